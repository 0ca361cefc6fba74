"""The transactional (and idempotent) producer: the public facade over the core and the network.

Threading: any number of application threads may call a producer. Every call takes one lock
(shared with the producer's single I/O thread, :mod:`eosclient._producer.sender`) for the few
microseconds it touches the transaction core and the record accumulator; key and value
serialization and argument checks run before it. Blocking calls (``init_transactions``,
``commit_transaction``, ``abort_transaction``, ``flush``, ``close``, and ``send`` while a topic's
metadata is first fetched) wait on a condition of that lock with a deadline, and raise
:class:`~eosclient.errors.KafkaTimeoutError` when it passes; the work goes on, and the same call
made again resumes it. The I/O thread starts with the producer; delivery futures are resolved by
it after it released the lock, so their callbacks may call the producer.

``send()`` keeps a shortcut per topic (keyless records) and per topic and partition: the batch
its last record went to (:attr:`Sender.shortcuts <eosclient._producer.sender.Sender.shortcuts>`).
A record that fits there is added in one call, without routing it or asking the transaction
core again. That is only right while nothing else happened under the lock: every turn of the I/O
thread, every call that changes the transaction, and every append that opens a batch forgets
the shortcuts; and a batch that is closed, drained or dropped refuses records anyway.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from eosclient._core.delivery import BatchOutcome, DeliveryHandle
from eosclient._core.encoder import Header
from eosclient._core.partitioner import Partitioner
from eosclient._core.prepared import PreparedTransaction
from eosclient._core.records import RecordChecker, Serializer, check_timestamp
from eosclient._core.txn import Completion, State
from eosclient._core.types import TopicPartition
from eosclient._producer import args
from eosclient._producer.prepared import end_prepared
from eosclient._producer.results import DeliveryFuture, RecordFuture, RecordMetadata, publish
from eosclient._producer.routing import Groups, Router
from eosclient._producer.sender import Sender
from eosclient._stats_reporter import LoopStatsReporter, StatsReporter
from eosclient.config import ProducerConfig, build
from eosclient.errors import (
    AbortableError,
    ConfigError,
    EosError,
    FatalError,
    FencedError,
    IllegalStateError,
    KafkaTimeoutError,
)
from eosclient.group_metadata import ConsumerGroupMetadata
from eosclient.stats import ClientStats

__all__ = ["PreparedTransaction", "TransactionalProducer", "end_prepared"]

log = logging.getLogger("eosclient.producer")

_GRACE = 1.0  # seconds past a deadline before a caller stops waiting for the I/O thread
_RUN_SLACK = 200  # bytes: a record's overhead in a batch, and then some (_send_run)
_JOIN_MIN = 1.0  # seconds close() gives the stopped I/O thread to exit, even past its deadline
_DEAD = frozenset({State.FENCED, State.FATAL, State.CLOSED})
_PUBLIC_NAMES = {"init": "init_transactions", "commit": "commit_transaction",
                 "abort": "abort_transaction"}


class TransactionalProducer:
    """A Kafka producer whose records are written exactly once, in transactions.

    With a ``transactional_id`` it is transactional: ``init_transactions()`` once, then
    ``begin_transaction()`` ... ``send()`` ... ``commit_transaction()`` (or the
    :meth:`transaction` block). Without one it is an idempotent producer: ``send()`` at any time,
    retries deduplicated by the broker, no transactions.

    Args:
        bootstrap_servers: ``"host:port,host:port"`` or a list of ``"host:port"``.
        transactional_id: Identifies the producer across restarts; None for idempotent only.
        transaction_timeout_ms: ``transaction.timeout.ms``.
        client_id: ``client.id``.
        linger_ms: ``linger.ms``.
        batch_size: ``batch.size``.
        compression_type: ``compression.type``: none, gzip, snappy, lz4 or zstd.
        request_timeout_ms: ``request.timeout.ms``.
        delivery_timeout_ms: ``delivery.timeout.ms``.
        max_block_ms: ``max.block.ms``: the default timeout of blocking calls.
        key_serializer: Turns keys into bytes (default: keys must be bytes-like or None).
        value_serializer: Turns values into bytes (default: bytes-like or None).
        partitioner: ``(topic, key bytes, partitions) -> partition or None`` (None: sticky);
            the default is murmur2 for keys, like the Java client.
        security_protocol: ``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL.
        ssl_context: An :class:`ssl.SSLContext` used as it is (instead of ``ssl.*`` keys).
        sasl_mechanism: ``sasl.mechanism``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.
        sasl_username: ``sasl.username``.
        sasl_password: ``sasl.password`` (kept as a :class:`~eosclient.config.Secret`).
            The other ``ssl.*``/``sasl.*`` settings go in ``config``; see docs/security.md.
        config: Any setting by Kafka's dotted key (``{"linger.ms": 5}``), or a whole
            :class:`~eosclient.config.ProducerConfig` (then pass no other setting).

    Raises:
        ConfigError: an unknown key (named, with the nearest known one), a wrong type, a bad
            value, or one setting given twice with different values. Nothing was started.
    """

    _reporter: StatsReporter | LoopStatsReporter | None  # stats_cb's (thread or timer)

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        transactional_id: str | None = None,
        transaction_timeout_ms: int | None = None,
        client_id: str | None = None,
        linger_ms: float | None = None,
        batch_size: int | None = None,
        compression_type: str | None = None,
        request_timeout_ms: int | None = None,
        delivery_timeout_ms: int | None = None,
        max_block_ms: int | None = None,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        partitioner: Partitioner | None = None,
        security_protocol: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sasl_mechanism: str | None = None,
        sasl_username: str | None = None,
        sasl_password: str | None = None,
        config: Mapping[str, object] | ProducerConfig | None = None,
    ) -> None:
        given = {k: v for k, v in locals().items() if k not in ("self", "config")}
        self._setup(_config(given, config))
        self._sender.start()
        self._finalizer = weakref.finalize(self, self._sender.stop)
        cfg = self.config
        if cfg.stats_cb is not None:
            self._reporter = StatsReporter(cfg.statistics_interval_ms / 1000, self.stats,
                                           cfg.stats_cb, f"eosclient-stats-{cfg.client_id}")

    @classmethod
    def _unstarted(cls, config: ProducerConfig) -> TransactionalProducer:
        """A producer whose I/O thread is never started: the asyncio front
        (:mod:`eosclient.aio`) runs its turns from an event loop instead."""
        self = cls.__new__(cls)
        self._setup(config)
        self._finalizer = weakref.finalize(self, self._sender.stop)
        return self

    def _setup(self, config: ProducerConfig) -> None:
        self.config = cfg = config
        self._checker = RecordChecker(key_serializer=cfg.key_serializer,
                                      value_serializer=cfg.value_serializer,
                                      max_request_size=cfg.max_request_size)
        self._sender = sender = Sender(cfg)
        self._lock, self._changed = sender.lock, sender.changed
        self._core, self._acc, self._metadata = sender.core, sender.acc, sender.metadata
        self._router = Router(sender)
        self._budget = sender.acc.budget  # buffer.memory: send() reads budget.full
        self._shortcuts = sender.shortcuts  # send()'s (see Sender.shortcuts)
        self._opened = 0  # batches send() opened: the asyncio front sends the full one then
        # What send() hands back for a record, made from (outcome, offset delta, timestamp):
        # a RecordFuture here; the asyncio front's Delivery there (one object a record, not two)
        self._record_handle: Callable[[BatchOutcome, int, int], Any] = RecordFuture
        # send()'s inlined check: bytes key and value within this many bytes together need no
        # other (-1 with a serializer: every record goes through the checker).
        self._raw_limit = self._checker.fast_limit if self._checker.raw else -1
        self._closed = False
        self._closing = False  # close() is finishing: its waits end when no broker is reachable
        if not cfg.transactional:
            self._core.init(time.monotonic(), float("inf"))  # idempotent: a producer id now
        self._reporter = None  # started by __init__ (the sync front)

    # -- transactions ---------------------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Get a producer id and epoch, fencing any older instance with this transactional.id.

        A transaction the older instance left open is completed or aborted by the coordinator
        first. Called again after a timeout, it resumes; in COMMITTING or ABORTING it gives up
        on that transaction's outcome and re-initialises.

        Raises:
            KafkaTimeoutError: not done within ``timeout`` (default ``max.block.ms``); the
                work goes on, call again to resume.
            FencedError: a newer instance took over the transactional.id; close this one.
            FatalError: e.g. not authorised; close, fix the configuration.
            IllegalStateError: not allowed in this state (e.g. a transaction is open).
        """
        self._blocking(self._core.init, timeout)

    def begin_transaction(self, partitions: Iterable[TopicPartition] | None = None,
                          group_id: str | None = None) -> None:
        """Open a transaction; never waits.

        Args:
            partitions: The partitions this transaction may write; ``send()`` to any other
                partition raises :class:`~eosclient.errors.UnknownPartitionError`. They are
                pre-registered (KIP-609 style: one AddPartitionsToTxn at once, overlapping the
                application's work) where leaving one empty is safe on every broker: while
                this producer id is new (no earlier instance held the transactional.id) and
                none of its aborted transactions wrote there. The others are registered with
                their first record, so a declared partition that gets none is never in the
                transaction (noida-db fails such a commit half done; docs/testing.md).
            group_id: Pre-register the consumer group whose offsets this transaction commits;
                ``send_offsets_to_transaction`` for another group then raises
                :class:`~eosclient.errors.InvalidGroupIdError`.

        Raises:
            IllegalStateError: not initialised, a transaction is open, an EndTxn outcome is
                still unknown, or the producer is idempotent only; nothing changed.
            AbortableError: the previous transaction failed and was not aborted; nothing changed.
            FencedError: fenced (FatalError likewise); close the producer.
        """
        declared = args.partitions_of(partitions)
        group = args.group_id_of(group_id)
        with self._lock:
            self._check_open()
            self._core.begin(time.monotonic(), partitions=declared, group_id=group)
            self._router.transaction_began()
            if declared:
                self._metadata.want({tp.topic for tp in declared})
            self._sender.wake()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group_metadata_or_group_id: ConsumerGroupMetadata | str,
    ) -> None:
        """Commit consumer offsets as part of the open transaction (KIP-447).

        Does not wait: the TxnOffsetCommit goes out once the group is registered, and
        ``commit_transaction()`` waits for it (its errors surface there).

        Args:
            offsets: The next offset to read per input partition.
            group_metadata_or_group_id: The consumer's :class:`ConsumerGroupMetadata` (so a
                zombie consumer's commit is refused), or a bare group id.

        Raises:
            InvalidGroupIdError: another group was pre-registered, or the group is empty.
            IllegalStateError: no transaction is open; nothing changed.
            AbortableError: the transaction failed (FencedError/FatalError likewise).
            TypeError, ValueError: ``offsets`` is not a mapping of TopicPartition to int >= 0.
        """
        checked = args.offsets_of(offsets)
        group = args.group_of(group_metadata_or_group_id)
        with self._lock:
            self._check_open()
            self._shortcuts.clear()  # (whatever the core does, send() asks it again)
            self._core.send_offsets(checked, group, time.monotonic(), float("inf"))
            self._sender.wake()

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is queued, then commit the transaction (EndTxn).

        Raises:
            KafkaTimeoutError: not done within ``timeout`` (default ``max.block.ms``); the
                outcome may be unknown; call again to resume the same commit.
            AbortableError: the transaction failed: call ``abort_transaction()``.
            FencedError: another instance took over; close this one. FatalError likewise.
            IllegalStateError: no transaction is open, or it is being aborted.
        """
        self._blocking(self._core.commit, timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: unsent records fail, EndTxn(abort), and a KIP-360 epoch bump
        when the failure broke a partition's sequence. Then the producer is READY again.

        Raises:
            KafkaTimeoutError: not done within ``timeout``; call again to resume the abort.
            FencedError: another instance took over; close this one. FatalError likewise.
            IllegalStateError: no transaction is open, or a commit is in progress.
        """
        self._blocking(self._core.abort, timeout)

    @contextlib.contextmanager
    def transaction(self, partitions: Iterable[TopicPartition] | None = None,
                    group_id: str | None = None, *, timeout: float | None = None,
                    ) -> Iterator[TransactionalProducer]:
        """A transaction as a block: commits when it ends, aborts on any exception.

        The exception is re-raised after the abort. A commit that fails with an
        :class:`~eosclient.errors.AbortableError` is aborted too, then re-raised.

        Args:
            partitions: As in :meth:`begin_transaction`.
            group_id: As in :meth:`begin_transaction`.
            timeout: For the commit or abort (default ``max.block.ms``).
        """
        self.begin_transaction(partitions=partitions, group_id=group_id)
        try:
            yield self
        except BaseException as exc:
            self._abort_after(exc, timeout)
            raise
        try:
            self.commit_transaction(timeout)
        except AbortableError as exc:
            self._abort_after(exc, timeout)
            raise

    def prepare_transaction(self, timeout: float | None = None) -> PreparedTransaction:
        """Flush the open transaction and hand it over *without ending it*; then close.

        Every record is written and every registration answered; the transaction stays open
        in the broker (invisible to read_committed readers) until some process ends it with
        :func:`end_prepared` (EndTxn needs only the returned identity), or until the next
        ``init_transactions()`` of this transactional.id aborts it. The producer is closed
        afterwards (not aborting): a producer cannot go on under an identity it gave away.

        Returns:
            The transactional id, producer id and epoch to end the transaction with.

        Raises:
            KafkaTimeoutError: records or registrations still pending after ``timeout``; the
                producer is still open: call again, or close it (which aborts).
            AbortableError: the transaction failed; abort it (or close the producer).
            FencedError: another instance took over; close this one. FatalError likewise.
            IllegalStateError: no transaction is open, or the producer is closed.
        """
        seconds = args.timeout_of(timeout, self.config.max_block_ms)
        deadline = time.monotonic() + seconds
        self.flush(seconds)
        with self._lock:
            self._check_open()
            while not self._prepared_yet():
                self._sender.check_alive()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._not_prepared(seconds)
                self._changed.wait(remaining)
            prepared = self._hand_over()
        self._sender.join(max(_JOIN_MIN, deadline - time.monotonic()))
        self._finalizer.detach()
        return prepared

    def _prepared_yet(self) -> bool:
        """prepare_transaction()'s look (both fronts'): whether everything of the open
        transaction is written and registered.

        Raises:
            EosError: the transaction failed (its error), or IllegalStateError: none is open.
        """
        state = self._core.state
        if state is not State.IN_TRANSACTION:
            error = self._core.error
            if error is not None:
                raise error
            raise IllegalStateError(f"prepare_transaction() needs an open transaction; "
                                    f"the producer is {state.value}")
        return not self._core.waiting_for() and not self._sender.incomplete()

    def _not_prepared(self, seconds: float) -> KafkaTimeoutError:
        return KafkaTimeoutError(f"prepare_transaction(): still waiting for "
                                 f"{sorted(w.value for w in self._core.waiting_for())} "
                                 f"after {seconds:g} s")

    def _hand_over(self) -> PreparedTransaction:
        """Give the prepared transaction's identity away and stop (no abort)."""
        identity = self._core.identity
        prepared = PreparedTransaction(self.config.transactional_id or "",
                                       identity.producer_id, identity.epoch)
        self._closed = True
        self._shortcuts.clear()
        self._core.close()
        self._sender.stop()
        return prepared

    # -- records --------------------------------------------------------------------------------

    def send(self, topic: str, value: object, key: object = None, *,
             partition: int | None = None, headers: Sequence[tuple[str, Any]] | None = None,
             timestamp_ms: int | None = None) -> Future[RecordMetadata]:
        """Queue one record; the future says where it was written.

        Args:
            topic: The topic.
            value: bytes-like or None (or what ``value_serializer`` takes).
            key: bytes-like or None (or what ``key_serializer`` takes); picks the partition
                with murmur2 when ``partition`` is None.
            partition: The partition; None lets the partitioner choose.
            headers: ``(str, bytes | str | None)`` pairs; a str value is sent as UTF-8.
            timestamp_ms: CreateTime in ms since the epoch (default: now).

        Returns:
            A ``concurrent.futures.Future`` of :class:`RecordMetadata`; it fails if the
            transaction is aborted. It is a light subclass, completed once per batch rather
            than per record, that becomes a full Future only when waited on or given a
            callback; it cannot be cancelled.

        Raises:
            RecordTypeError: a key, value, header, topic or timestamp of the wrong type.
            RecordTooLargeError: the record exceeds ``max.request.size``.
            UnknownPartitionError: the partition does not exist, or was not declared at
                ``begin_transaction(partitions=...)``.
            IllegalStateError: no transaction is open, or the producer is closed.
            AbortableError: the transaction failed (FencedError/FatalError likewise).
            KafkaTimeoutError: the topic's metadata did not arrive, or ``buffer.memory``
                stayed full, within ``max.block.ms``.

        Nothing was queued when any of these is raised.
        """
        # The hot path (~0.7 us a record, most of it Python calls): the common case (bytes, no
        # serializer, no headers) is checked inline, the lock is taken once, and a record that
        # goes where the one before it of its topic (or topic and partition) went is added to
        # that batch in one call (a shortcut, _append makes them); nothing is made per record
        # but its encoded pieces and the RecordFuture, after the lock.
        if type(topic) is not str or not topic:
            args.topic_of(topic)  # raises
        stamp = _time_ns() // 1_000_000 if timestamp_ms is None else check_timestamp(timestamp_ms)
        extra: Sequence[Header] = ()
        if type(value) is not bytes or headers is not None or (
                key is not None and type(key) is not bytes) or len(value) + (
                len(key) if key else 0) > self._raw_limit:  # else: nothing more to check
            key, value, extra, stamp = self._checker.one(key, value, headers, stamp)
        if partition is None:  # a keyed record's partition is the partitioner's: no shortcut
            place: object = topic if key is None else None
        else:
            args.partition_of(partition)
            place = (topic, partition)
        with self._lock:
            if self._closed or self._sender.crashed is not None:
                self._check_open()
            if self._budget.full:
                self._router.await_buffer(topic)
            shortcut = self._shortcuts.get(place)
            if shortcut is None or (delta := shortcut[0](stamp, key, value, extra)) < 0:
                outcome, delta = self._append(topic, partition, key, value, extra, stamp, place)
            else:
                outcome = shortcut[1]
        future: Future[RecordMetadata] = self._record_handle(outcome, delta, stamp)
        if not delta and outcome.state:  # failed at once: its transaction was aborted
            publish((outcome,))
        return future

    def _append(self, topic: str, partition: int | None, key: bytes | None,  # noqa: PLR0917
                value: bytes | None, extra: Sequence[Header], stamp: int, place: object,
                ) -> tuple[BatchOutcome, int]:
        """:meth:`send` under the lock when no shortcut took the record: route it, check it
        against the transaction, append it; then leave a shortcut for the next record of its
        ``place`` (None: none) to the same batch."""
        tp = self._router.target(topic, partition, key)
        generation = self._core.send(tp)
        outcome, delta = self._acc.append_record(tp, stamp, key, value, extra, _monotonic(),
                                                 generation)
        if not delta:  # it opened a batch: the one before may be full, sticky may move
            self._opened += 1
            self._router.batch_opened()  # (and forgets the shortcuts)
            if self._sender.sleeping:  # the I/O thread sends the full batch, or starts
                self._sender.wake()  # the new one's linger timer
        elif place is not None:  # the sticky choice moves only when a batch opens: it holds
            shortcut = self._acc.appender(tp, generation)
            if shortcut is not None:
                self._shortcuts[place] = shortcut
        return outcome, delta

    def send_batch(self, topic: str, values: Sequence[object],
                   keys: Sequence[object] | None = None,
                   partition: int | None = None, *,
                   headers: Sequence[Sequence[tuple[str, Any]] | None] | None = None,
                   ) -> Future[list[RecordMetadata]]:
        """Queue many records at once (the fast path); one future for all.

        ``headers``, if given, holds each record's headers (``headers[i]`` those of
        ``values[i]``: ``(str, bytes | str | None)`` pairs as :meth:`send` takes, or None).

        Every record is checked before any is queued. Keyed records go where the partitioner
        puts them; keyless ones without a partition fill a batch on the sticky partition, then
        one on the next partition, and so on (as ``send()``'s keyless records move on when a
        batch fills, KIP-480), only on partitions the transaction accepts.

        Returns:
            A future of one :class:`RecordMetadata` per run of records written together
            (``record_count`` says how many); for keyless records in the order given, keyed
            ones by partition. It fails if any record is lost.

        Raises:
            EosError: as :meth:`send`.
            ValueError: ``keys`` (or ``headers``) and ``values`` differ in length.

        Nothing was queued when any of these is raised.
        """
        number = args.partition_of(partition)
        name = args.topic_of(topic)
        ks, vals = self._checker.many(values, keys)
        hs = None if headers is None else self._checker.many_headers(headers, ks, vals)
        return self._queue_batch(name, number, ks, vals, hs)

    def _send_run(self, topic: str, values: Sequence[object], keys: Sequence[object] | None,
                  headers: list[list[Header]]) -> None:
        """:meth:`send_batch` for records whose headers the caller made, ``(str, bytes)`` pairs
        (the processor's copy: ``eos.src``), so they are not checked again: the keys and values
        are, and every record's size once one may come near ``max.request.size``."""
        ks, vals = self._checker.many(values, keys)
        header_bytes = max((len(k) * 4 + len(v or b"") + 10 for h in headers[-1:] for k, v in h),
                           default=0)  # the last has the longest offset: the longest header
        room = self.config.max_request_size - _RUN_SLACK - header_bytes
        if max(map(len, filter(None, vals)), default=0) + max(
                map(len, filter(None, ks or ())), default=0) > room:
            self.send_batch(topic, vals, ks, headers=headers)  # checked record by record
        else:
            self._queue_batch(args.topic_of(topic), None, ks, vals, headers)

    def _queue_batch(self, name: str, number: int | None, ks: list[bytes | None] | None,
                     vals: list[bytes | None], hs: list[list[Header]] | None,
                     ) -> Future[list[RecordMetadata]]:
        """:meth:`send_batch` after its checks (the processor's copy calls it with its own
        headers, ``(str, bytes)`` pairs it made, after ``_checker.many``)."""
        stamp = _now_ms()
        with self._lock:
            self._check_open()
            if self._budget.full:  # (this call's records may then go past buffer.memory)
                self._router.await_buffer(name)
            groups = self._router.group(name, number, ks, vals, hs)
            generation = 0
            for tp, _, _, _ in groups:  # every partition checked before any record is queued
                generation = self._core.send(tp)
            now = time.monotonic()
            handle = self._append_groups(groups, stamp, now, generation)
            self._router.batch_opened()  # batches filled: the sticky partition may have moved
            if handle is None:  # no records: done at once
                done: Future[list[RecordMetadata]] = Future()
                done.set_result([])
                return done
            self._sender.wake()
            future: DeliveryFuture[list[RecordMetadata]] = DeliveryFuture(
                handle, self._sender.settled, False)
            if not handle.done():
                future.watch()
                return future
        future.resolve()
        return future

    def partitions_for(self, topic: str) -> list[TopicPartition]:
        """The partitions of ``topic``, from the producer's metadata (as Java's
        ``partitionsFor``), asked of the cluster if not known yet; in any state.

        It goes through the producer's own connections, so it works wherever the producer
        does (TLS, SASL), and a missing topic is created if the broker auto-creates topics.

        Raises:
            KafkaTimeoutError: the topic's metadata did not come within ``max.block.ms``.
            EosError: the cluster answered with an error for the topic.
            IllegalStateError: the producer is closed.
        """
        args.topic_of(topic)
        self._sender.refuse_to_wait("partitions_for")
        with self._lock:
            self._check_open()
            return self._router.partitions(topic, self._check_open)

    def stats(self) -> ClientStats:
        """A snapshot of this producer's counters and request timings (see
        :mod:`eosclient.stats`); cheap, never blocks on the network. Works after close()."""
        with self._lock:
            return self._sender.stats()

    def flush(self, timeout: float | None = None) -> None:
        """Send every queued record now and wait until each is written or failed.

        Returns early if the open transaction failed (its records fail on abort).

        Raises:
            KafkaTimeoutError: records are still pending after ``timeout``; they stay queued.
            IllegalStateError: the producer is closed.
        """
        seconds = args.timeout_of(timeout, self.config.max_block_ms)
        deadline = time.monotonic() + seconds
        self._sender.refuse_to_wait("flush")
        with self._lock:
            self._check_open()
            self._sender.flushing += 1
            self._sender.wake()
            try:
                while self._sender.incomplete() and self._core.state is not State.ABORTABLE_ERROR:
                    self._sender.check_alive()
                    self._check_reachable("flush")
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise KafkaTimeoutError(f"flush(): records still pending after "
                                                f"{seconds:g} s; they stay queued"
                                                ) from self._sender.client.connect_failure
                    self._changed.wait(remaining)
            finally:
                self._sender.flushing -= 1

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Finish or abort what is open, fail what is left, stop the I/O thread. Idempotent.

        A transaction still open is aborted (a commit in progress is resumed); an idempotent
        producer flushes first. That takes at most ``timeout`` (default ``max.block.ms``), and
        less when no broker is reachable: once every connect has failed for
        ``reconnect.backoff.max.ms`` (at least 1 s), close() stops waiting, as nothing could
        finish (a transaction left open is then aborted by the coordinator, at its timeout or
        when the next instance of the transactional.id initialises). Records still pending
        then fail with IllegalStateError; none is dropped without its future saying so.
        Failures on the way are not raised: closing always closes, and the I/O thread is
        stopped even if finishing raised. Called from a delivery future's callback (the I/O
        thread), it only stops: records still pending fail with IllegalStateError.
        """
        seconds = args.timeout_of(timeout, self.config.max_block_ms)
        deadline = time.monotonic() + seconds
        with self._lock:
            if self._closed:
                return
            state = self._core.state
            self._closing = True
        try:
            if not self._sender.in_io_thread():  # a future's callback cannot wait for itself
                self._finish(state, max(0.0, deadline - time.monotonic()))
        except EosError as exc:
            log.warning("close(): %s; failing what is left", exc)
        finally:
            if self._reporter is not None:
                self._reporter.stop()
            with self._lock:
                self._closed = True
                self._shortcuts.clear()
                self._core.close()
                self._sender.stop()
            stopped = self._sender.join(max(_JOIN_MIN, deadline - time.monotonic()))
            if not stopped and not self._sender.in_io_thread():
                log.warning("close(): the I/O thread has not exited yet (a delivery callback "
                            "still running?); it exits when that returns")
            self._finalizer.detach()

    def __enter__(self) -> TransactionalProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = f"transactional_id={self.config.transactional_id!r}" \
            if self.config.transactional else "idempotent"
        return f"<TransactionalProducer {kind} state={self._core.state.name}>"

    # -- internals ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the producer is closed")
        self._sender.check_alive()

    def _check_reachable(self, what: str) -> None:
        """In close(), end a wait that no broker can end (call under the lock).

        Raises:
            KafkaTimeoutError: closing, and no broker has been reachable for a while.
        """
        if self._closing and self._sender.broker_gone(time.monotonic()):
            raise KafkaTimeoutError(f"close(): {what} cannot finish, no broker is reachable"
                                    ) from self._sender.client.connect_failure

    def _blocking(self, call: Any, timeout: float | None) -> None:
        """Run a core call that returns a Completion, and wait for it (under the lock)."""
        seconds = args.timeout_of(timeout, self.config.max_block_ms)
        self._sender.refuse_to_wait(_PUBLIC_NAMES.get(call.__name__, call.__name__))
        with self._lock:
            self._check_open()
            now = time.monotonic()
            self._shortcuts.clear()  # the state changes: send() must ask the core again
            completion: Completion = call(now, now + seconds)
            self._sender.wake()
            self._wait(completion, now + seconds)

    def _wait(self, completion: Completion, deadline: float) -> None:
        while not completion.done:
            self._sender.check_alive()
            self._check_reachable(completion.call.value)
            remaining = deadline + _GRACE - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"{completion.call.value}: the deadline passed; the "
                                        f"work goes on, call again to resume"
                                        ) from self._sender.client.connect_failure
            self._changed.wait(remaining)
        completion.result()

    def _append_groups(self, groups: Groups, stamp: int, now: float,
                       generation: int) -> DeliveryHandle | None:
        handle = None
        for tp, ks, vals, hs in groups:
            handle = self._acc.append_many(tp, vals, ks, timestamp_ms=stamp, now=now,
                                           generation=generation, handle=handle, checked=True,
                                           headers=hs)
        return handle

    def _abort_after(self, exc: BaseException, timeout: float | None) -> None:
        if isinstance(exc, FencedError | FatalError) or self._core.state in _DEAD:
            return
        try:
            self.abort_transaction(timeout)
        except EosError as abort_error:
            exc.add_note(f"abort_transaction() after the failure also failed: {abort_error!r}")

    def _finish(self, state: State, seconds: float) -> None:
        """close()'s attempt to leave nothing open behind."""
        if not self.config.transactional:
            self.flush(seconds)
        elif state in (State.IN_TRANSACTION, State.ABORTABLE_ERROR, State.ABORTING):
            log.info("close(): aborting the open transaction")
            self.abort_transaction(seconds)
        elif state is State.COMMITTING:
            self.commit_transaction(seconds)


def _config(given: dict[str, Any], config: Mapping[str, object] | ProducerConfig | None,
            ) -> ProducerConfig:
    if isinstance(config, ProducerConfig):
        extra = sorted(k for k, v in given.items() if v is not None)
        if extra:
            raise ConfigError("pass settings either in the ProducerConfig or as keywords, "
                              f"not both: {', '.join(extra)}", key=extra[0])
        return config
    return build(ProducerConfig, given, config)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


_time_ns, _monotonic = time.time_ns, time.monotonic  # module globals: the hot path looks them up
