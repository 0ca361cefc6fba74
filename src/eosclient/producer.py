"""The transactional (and idempotent) producer: the sync front over the producer session.

What the producer is and decides lives in :class:`~eosclient._producer.session.ProducerSession`
(shared with the asyncio front, :mod:`eosclient.aio.producer`); this front checks arguments,
carries the docstrings, and waits the way threads wait: it drives the session's steps on the
caller's thread, holding the lock (:meth:`Sender.drive <eosclient._producer.sender.Sender.drive>`).

Threading: any number of application threads may call a producer. Every call takes one lock
(shared with the producer's single I/O thread, :mod:`eosclient._producer.sender`) for the few
microseconds it touches the transaction core and the record accumulator; key and value
serialization and argument checks run before it. Blocking calls (``init_transactions``,
``commit_transaction``, ``abort_transaction``, ``flush``, ``close``, and ``send`` while a topic's
metadata is first fetched) wait on a condition of that lock with a deadline, and raise
:class:`~eosclient.errors.KafkaTimeoutError` when it passes; the work goes on, and the same call
made again resumes it. The I/O thread starts with the producer; delivery futures are resolved by
it after it released the lock, so their callbacks may call the producer.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from eosclient._core.encoder import Header
from eosclient._core.partitioner import Partitioner
from eosclient._core.prepared import PreparedTransaction
from eosclient._core.records import Serializer
from eosclient._core.types import TopicPartition
from eosclient._producer import args
from eosclient._producer.prepared import end_prepared
from eosclient._producer.results import RecordMetadata
from eosclient._producer.session import ProducerSession, TxnCall
from eosclient._stats_reporter import StatsReporter
from eosclient.config import ProducerConfig, build
from eosclient.errors import AbortableError, EosError
from eosclient.group_metadata import ConsumerGroupMetadata
from eosclient.stats import ClientStats

__all__ = ["PreparedTransaction", "TransactionalProducer", "end_prepared"]

log = logging.getLogger("eosclient.producer")

_JOIN_MIN = 1.0  # seconds close() gives the stopped I/O thread to exit, even past its deadline
_PUBLIC_NAMES: dict[TxnCall, str] = {"init": "init_transactions",
                                     "commit": "commit_transaction",
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
        self.config = cfg = build(ProducerConfig, given, config)
        self._session = session = ProducerSession(cfg)
        self._sender = session.sender  # (tests' probes read it too)
        # The hot path, with no call in between: this producer's send() *is* the session's
        # (the method below carries the signature and the docstring).
        self.send = session.send  # type: ignore[method-assign]
        session.sender.start()
        if cfg.stats_cb is not None:
            session.reporter = StatsReporter(cfg.statistics_interval_ms / 1000, self.stats,
                                             cfg.stats_cb, f"eosclient-stats-{cfg.client_id}")

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
        self._blocking("init", timeout)

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
        self._session.begin(args.partitions_of(partitions), args.group_id_of(group_id))

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
        self._session.send_offsets(checked, args.group_of(group_metadata_or_group_id))

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is queued, then commit the transaction (EndTxn).

        Raises:
            KafkaTimeoutError: not done within ``timeout`` (default ``max.block.ms``); the
                outcome may be unknown; call again to resume the same commit.
            AbortableError: the transaction failed: call ``abort_transaction()``.
            FencedError: another instance took over; close this one. FatalError likewise.
            IllegalStateError: no transaction is open, or it is being aborted.
        """
        self._blocking("commit", timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: unsent records fail, EndTxn(abort), and a KIP-360 epoch bump
        when the failure broke a partition's sequence. Then the producer is READY again.

        Raises:
            KafkaTimeoutError: not done within ``timeout``; call again to resume the abort.
            FencedError: another instance took over; close this one. FatalError likewise.
            IllegalStateError: no transaction is open, or a commit is in progress.
        """
        self._blocking("abort", timeout)

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
        session = self._session
        seconds = args.timeout_of(timeout, self.config.max_block_ms)
        deadline = time.monotonic() + seconds
        session.sender.refuse_to_wait("flush")
        with session.lock:
            prepared = session.sender.drive(session.prepare(deadline, seconds))
        session.sender.join(max(_JOIN_MIN, deadline - time.monotonic()))
        return prepared

    # -- records --------------------------------------------------------------------------------

    def send(self, topic: str, value: object, key: object = None, *,  # (replaced: __init__)
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
        future: Future[RecordMetadata] = self._session.send(
            topic, value, key, partition=partition, headers=headers, timestamp_ms=timestamp_ms)
        return future

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
        return self._session.send_batch(topic, values, keys, partition, headers)

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
        session = self._session
        session.sender.refuse_to_wait("partitions_for")
        with session.lock:
            return session.sender.drive(session.partitions(topic))

    def stats(self) -> ClientStats:
        """A snapshot of this producer's counters and request timings (see
        :mod:`eosclient.stats`); cheap, never blocks on the network. Works after close()."""
        return self._session.stats()

    def flush(self, timeout: float | None = None) -> None:
        """Send every queued record now and wait until each is written or failed.

        Returns early if the open transaction failed (its records fail on abort).

        Raises:
            KafkaTimeoutError: records are still pending after ``timeout``; they stay queued.
            IllegalStateError: the producer is closed.
        """
        session = self._session
        seconds = args.timeout_of(timeout, self.config.max_block_ms)
        deadline = time.monotonic() + seconds
        session.sender.refuse_to_wait("flush")
        with session.lock:
            session.sender.drive(session.flush(deadline, seconds))

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
        session = self._session
        seconds = args.timeout_of(timeout, self.config.max_block_ms)
        deadline = time.monotonic() + seconds
        state = session.start_closing()
        if state is None:
            return
        try:
            if not session.sender.in_io_thread():  # a future's callback cannot wait for itself
                self._finish(session.left_open(state), max(0.0, deadline - time.monotonic()))
        except EosError as exc:
            log.warning("close(): %s; failing what is left", exc)
        finally:
            session.shut_down()
            stopped = session.sender.join(max(_JOIN_MIN, deadline - time.monotonic()))
            if not stopped and not session.sender.in_io_thread():
                log.warning("close(): the I/O thread has not exited yet (a delivery callback "
                            "still running?); it exits when that returns")

    def __enter__(self) -> TransactionalProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<TransactionalProducer {self._session.describe()}>"

    # -- internals ------------------------------------------------------------------------------

    def _blocking(self, call: TxnCall, timeout: float | None) -> None:
        """Make a transaction call and wait for it (under the lock)."""
        session = self._session
        seconds = args.timeout_of(timeout, self.config.max_block_ms)
        session.sender.refuse_to_wait(_PUBLIC_NAMES[call])
        with session.lock:
            deadline = time.monotonic() + seconds
            completion = session.transaction_call(call, deadline)
            session.sender.drive(session.completed(completion, deadline))

    def _abort_after(self, exc: BaseException, timeout: float | None) -> None:
        if not self._session.worth_aborting(exc):
            return
        try:
            self.abort_transaction(timeout)
        except EosError as abort_error:
            exc.add_note(f"abort_transaction() after the failure also failed: {abort_error!r}")

    def _finish(self, left: str | None, seconds: float) -> None:
        """close()'s attempt to leave nothing open behind (``left``: what
        :meth:`ProducerSession.left_open` said)."""
        if left == "flush":
            self.flush(seconds)
        elif left == "abort":
            log.info("close(): aborting the open transaction")
            self.abort_transaction(seconds)
        elif left == "commit":
            self.commit_transaction(seconds)


def send_run(producer: TransactionalProducer, topic: str, values: Sequence[object],
             keys: Sequence[object] | None, headers: list[list[Header]]) -> None:
    """The processor's copies: :meth:`TransactionalProducer.send_batch` for records whose
    headers it made (``eos.src``), so they are not checked again
    (:meth:`ProducerSession.send_run <eosclient._producer.session.ProducerSession.send_run>`)."""
    producer._session.send_run(topic, values, keys, headers)
