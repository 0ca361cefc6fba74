"""The producer session: the one producer both fronts drive, and what a front may call of it.

:class:`~eosclient.TransactionalProducer` (threads) and
:class:`~eosclient.aio.AsyncTransactionalProducer` (an event loop) are fronts: argument checks,
docstrings, and a way of waiting. Everything they share is here, once: the I/O state
(:class:`~eosclient._producer.sender.Sender`: the transaction core, the accumulator, the
metadata, the lock), the router, the ``buffer.memory`` budget, the closed and closing state,
what ``send()`` hands back for a record, and the record paths (``send``, ``send_batch`` and the
processor's ``send_run``).

Every operation that waits is written once, as steps (:mod:`eosclient._net.steps`): a
transaction call's completion (:meth:`ProducerSession.completed`), :meth:`~ProducerSession.flush`,
:meth:`~ProducerSession.prepare`, :meth:`~ProducerSession.partitions` and what ``send`` waits
for (:meth:`~ProducerSession.room`). The sync front runs them with
:meth:`Sender.drive <eosclient._producer.sender.Sender.drive>` holding :attr:`lock`; the asyncio
front with :func:`~eosclient._net.steps.adrive`, without the lock (the loop's thread is then the
only one that touches the session). ``send`` itself never yields: on the sync front it blocks in
place for a topic's first metadata or a full ``buffer.memory`` (rare, off the hot path); on the
asyncio front it raises :class:`~eosclient._producer.sender.WouldWait` instead, before anything
is queued, and the front awaits :meth:`~ProducerSession.room` and calls it again.

Calls that take :attr:`lock` themselves say so; the steps and the rest expect the sync front to
hold it.

``send()`` keeps a shortcut per topic (keyless records) and per topic and partition: the batch
its last record went to (:attr:`Sender.shortcuts <eosclient._producer.sender.Sender.shortcuts>`).
A record that fits there is added in one call, without routing it or asking the transaction
core again. That is only right while nothing else happened under the lock: every turn of the I/O
thread, every call that changes the transaction, and every append that opens a batch forgets
the shortcuts; and a batch that is closed, drained or dropped refuses records anyway.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Literal

from eosclient._core.delivery import BatchOutcome, DeliveryHandle
from eosclient._core.encoder import Header
from eosclient._core.prepared import PreparedTransaction
from eosclient._core.records import RecordChecker, check_timestamp
from eosclient._core.txn import Completion, GroupMetadata, State
from eosclient._core.types import TopicPartition
from eosclient._net.steps import Steps, wait_until
from eosclient._producer import args
from eosclient._producer.results import DeliveryFuture, RecordFuture, RecordMetadata, publish
from eosclient._producer.routing import Groups, Router
from eosclient._producer.sender import Sender
from eosclient._stats_reporter import LoopStatsReporter, StatsReporter
from eosclient.config import ProducerConfig
from eosclient.errors import (
    FatalError,
    FencedError,
    IllegalStateError,
    KafkaTimeoutError,
)
from eosclient.stats import ClientStats

__all__ = ["ProducerSession", "RecordHandle", "TxnCall"]

_GRACE = 1.0  # seconds past a deadline before a caller stops waiting for the I/O loop
_RUN_SLACK = 200  # bytes: a record's overhead in a batch, and then some (send_run)
_DEAD = frozenset({State.FENCED, State.FATAL, State.CLOSED})

TxnCall = Literal["init", "commit", "abort"]
"""A transaction call that waits for the coordinator (:meth:`ProducerSession.transaction_call`)."""

RecordHandle = Callable[[BatchOutcome, int, int], Any]
"""What ``send()`` hands back for a record, made from (outcome, offset delta, timestamp)."""


class ProducerSession:
    """One producer's state and decisions, driven by a sync or an asyncio front.

    Args:
        config: The producer's settings.
        record_handle: What ``send()`` returns for a record: a
            :class:`~eosclient._producer.results.RecordFuture` for the sync front; the asyncio
            front's Delivery there (one object a record, not two).

    The I/O thread is not started here: the sync front starts :attr:`sender`, the asyncio
    front has a :class:`~eosclient._net.loop_driver.LoopDriver` run its turns.

    What a front may use: :attr:`config`, :attr:`sender` (to start, join or drive it),
    :attr:`lock`, :attr:`reporter` (set by the front that starts one), :attr:`opened` (read
    only) and the methods without a leading underscore; the rest is the session's own.
    """

    def __init__(self, config: ProducerConfig, record_handle: RecordHandle = RecordFuture,
                 ) -> None:
        self.config = cfg = config
        self._checker = RecordChecker(key_serializer=cfg.key_serializer,
                                      value_serializer=cfg.value_serializer,
                                      max_request_size=cfg.max_request_size)
        self.sender = sender = Sender(cfg)
        self.lock = self._lock = sender.lock
        self._sender = sender  # (the hot path's name for it)
        self._core, self._acc, self._metadata = sender.core, sender.acc, sender.metadata
        self._router = Router(sender)
        self._txn_calls: dict[TxnCall, Callable[[float, float], Completion]] = {
            "init": self._core.init, "commit": self._core.commit, "abort": self._core.abort}
        self._budget = sender.acc.budget  # buffer.memory: send() reads budget.full
        self._shortcuts = sender.shortcuts  # send()'s (see Sender.shortcuts)
        self.opened = 0  # batches send() opened: the asyncio front sends the full one then
        self._record_handle = record_handle
        # send()'s inlined check: bytes key and value within this many bytes together need no
        # other (-1 with a serializer: every record goes through the checker).
        self._raw_limit = self._checker.fast_limit if self._checker.raw else -1
        self._closed = False
        self._closing = False  # close() is finishing: its waits end when no broker is reachable
        self.reporter: StatsReporter | LoopStatsReporter | None = None  # stats_cb's
        # A producer dropped without close() still stops its I/O thread.
        self._finalizer = weakref.finalize(self, sender.discard)
        if not cfg.transactional:
            self._core.init(time.monotonic(), float("inf"))  # idempotent: a producer id now

    # -- state ----------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether close() (or the hand-over of a prepared transaction) ended the producer."""
        return self._closed

    def check_open(self) -> None:
        """Raise if the producer can do nothing more.

        Raises:
            IllegalStateError: the producer is closed.
            FatalError: the I/O thread crashed (and the others of :meth:`Sender.check_alive`).
        """
        if self._closed:
            raise IllegalStateError("the producer is closed")
        self._sender.check_alive()

    def _check_waiting(self, what: str) -> None:
        """What every wait checks at each turn: the I/O loop alive and, in close(), a broker
        reachable (call under the lock).

        Raises:
            KafkaTimeoutError: closing, and no broker has been reachable for a while.
        """
        self._sender.check_alive()
        if self._closing and self._sender.broker_gone(time.monotonic()):
            raise KafkaTimeoutError(f"close(): {what} cannot finish, no broker is reachable"
                                    ) from self._sender.client.connect_failure

    # -- transactions ---------------------------------------------------------------------------

    def begin(self, partitions: list[TopicPartition] | None, group_id: str | None) -> None:
        """``begin_transaction`` after its argument checks (takes the lock; never waits)."""
        with self._lock:
            self.check_open()
            self._core.begin(time.monotonic(), partitions=partitions, group_id=group_id)
            self._router.transaction_began()
            if partitions:
                self._metadata.want({tp.topic for tp in partitions})
            self._sender.wake()

    def send_offsets(self, offsets: Mapping[TopicPartition, int],
                     group: GroupMetadata) -> None:
        """``send_offsets_to_transaction`` after its argument checks (takes the lock; never
        waits)."""
        with self._lock:
            self.check_open()
            self._shortcuts.clear()  # (whatever the core does, send() asks it again)
            self._core.send_offsets(offsets, group, time.monotonic(), float("inf"))
            self._sender.wake()

    def transaction_call(self, call: TxnCall, deadline: float) -> Completion:
        """Make a transaction call that waits for the coordinator, to be done by ``deadline``;
        :meth:`completed` waits for it.

        Raises:
            IllegalStateError, FencedError, FatalError: as the core's call; nothing changed.
        """
        self.check_open()
        self._shortcuts.clear()  # the state changes: send() must ask the core again
        completion = self._txn_calls[call](time.monotonic(), deadline)
        self._sender.wake()
        return completion

    def completed(self, completion: Completion, deadline: float) -> Steps[None]:
        """Wait for a transaction call :meth:`transaction_call` made, a little past its ``deadline``
        (the core's own timeout comes first); then its outcome.

        Raises:
            KafkaTimeoutError: not done; the work goes on, the same call made again resumes.
            EosError: the call's failure, as the core classified it.
        """
        what = completion.call.value
        yield from wait_until(self._sender, lambda: completion.done, deadline + _GRACE, what,
                              lambda: self._check_waiting(what),
                              unchanged="the work goes on, call again to resume")
        completion.result()

    def abandon(self, completion: Completion) -> None:
        """The caller stopped waiting for ``completion`` early (a cancelled task): the same
        call made again resumes it, as after a timeout
        (:meth:`TransactionCore.abandon <eosclient._core.txn.TransactionCore.abandon>`)."""
        self._core.abandon(completion)

    def prepare(self, deadline: float, seconds: float) -> Steps[PreparedTransaction]:
        """Flush the open transaction, wait until it is all written and registered, and hand
        it over (the producer is then closed; the front stops its I/O loop).

        Raises:
            KafkaTimeoutError: still pending at ``deadline``; the producer is still open.
            EosError: the transaction failed (its error), or IllegalStateError: none is open,
                or the producer is closed.
        """
        yield from self.flush(deadline, seconds)
        self.check_open()
        yield from wait_until(self._sender, self._prepared_yet, deadline,
                              "prepare_transaction()", self._sender.check_alive,
                              cause=lambda: self._not_prepared(seconds),
                              unchanged="the producer is still open: call again, or close it "
                                        "(which aborts)")
        return self._hand_over()

    def _prepared_yet(self) -> bool:
        """Whether everything of the open transaction is written and registered.

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
        self._stop()
        return prepared

    def worth_aborting(self, exc: BaseException) -> bool:
        """Whether a transaction block that failed with ``exc`` should abort: not after
        FencedError or FatalError, nor once the producer can do nothing more."""
        return not isinstance(exc, FencedError | FatalError) and self._core.state not in _DEAD

    # -- records --------------------------------------------------------------------------------

    def send(self, topic: str, value: object, key: object = None, *,
             partition: int | None = None, headers: Sequence[tuple[str, Any]] | None = None,
             timestamp_ms: int | None = None) -> Any:
        """``send()``, both fronts' (the sync front's ``send`` is this very method): queue one
        record; a record handle (:data:`RecordHandle`) says where it was written.

        Takes the lock. On the sync front it blocks, at most ``max.block.ms``, for the topic's
        first metadata or a full ``buffer.memory``; on the asyncio front it raises
        :class:`~eosclient._producer.sender.WouldWait` instead.

        Raises:
            EosError: as :meth:`TransactionalProducer.send <eosclient.TransactionalProducer.send>`;
                nothing was queued.
        """
        # The hot path (~0.7 us a record, most of it Python calls): the common case (bytes, no
        # serializer, no headers) is checked inline, the lock is taken once, and a record that
        # goes where the one before it of its topic (or topic and partition) went is added to
        # that batch in one call (a shortcut, _append makes them); nothing is made per record
        # but its encoded pieces and the record handle, after the lock.
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
                self.check_open()
            if self._budget.full:
                self._block_for_buffer(topic)
            shortcut = self._shortcuts.get(place)
            if shortcut is None or (delta := shortcut[0](stamp, key, value, extra)) < 0:
                outcome, delta = self._append(topic, partition, key, value, extra, stamp, place)
            else:
                outcome = shortcut[1]
        handle = self._record_handle(outcome, delta, stamp)
        if not delta and outcome.state:  # failed at once: its transaction was aborted
            publish((outcome,))
        return handle

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
            self.opened += 1
            self._router.batch_opened()  # (and forgets the shortcuts)
            if self._sender.sleeping:  # the I/O thread sends the full batch, or starts
                self._sender.wake()  # the new one's linger timer
        elif place is not None:  # the sticky choice moves only when a batch opens: it holds
            shortcut = self._acc.appender(tp, generation)
            if shortcut is not None:
                self._shortcuts[place] = shortcut
        return outcome, delta

    def _block_for_buffer(self, topic: str) -> None:
        """:meth:`send` on the sync front (under the lock): wait for ``buffer.memory``.

        Raises:
            WouldWait: an event loop runs the turns; nothing changed.
        """
        self._sender.refuse_to_wait("send")
        self._sender.drive(self._buffer_free(topic))

    def send_batch(self, topic: str, values: Sequence[object], keys: Sequence[object] | None,
                   partition: int | None,
                   headers: Sequence[Sequence[tuple[str, Any]] | None] | None,
                   ) -> Future[list[RecordMetadata]]:
        """``send_batch()`` (takes the lock); blocks or raises WouldWait as :meth:`send`.

        Raises:
            EosError, ValueError: as :meth:`TransactionalProducer.send_batch
                <eosclient.TransactionalProducer.send_batch>`; nothing was queued.
        """
        number = args.partition_of(partition)
        name = args.topic_of(topic)
        ks, vals = self._checker.many(values, keys)
        hs = None if headers is None else self._checker.many_headers(headers, ks, vals)
        return self._queue_batch(name, number, ks, vals, hs)

    def send_run(self, topic: str, values: Sequence[object], keys: Sequence[object] | None,
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
            self.send_batch(topic, vals, ks, None, headers)  # checked record by record
        else:
            self._queue_batch(args.topic_of(topic), None, ks, vals, headers)

    def _queue_batch(self, name: str, number: int | None, ks: list[bytes | None] | None,
                     vals: list[bytes | None], hs: list[list[Header]] | None,
                     ) -> Future[list[RecordMetadata]]:
        """:meth:`send_batch` after its checks."""
        stamp = _now_ms()
        with self._lock:
            self.check_open()
            if self._budget.full:  # (this call's records may then go past buffer.memory)
                self._block_for_buffer(name)
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

    def _append_groups(self, groups: Groups, stamp: int, now: float,
                       generation: int) -> DeliveryHandle | None:
        handle = None
        for tp, ks, vals, hs in groups:
            handle = self._acc.append_many(tp, vals, ks, timestamp_ms=stamp, now=now,
                                           generation=generation, handle=handle, checked=True,
                                           headers=hs)
        return handle

    # -- what the records wait for --------------------------------------------------------------

    def room(self, topic: str) -> Steps[bool]:
        """Wait (before anything is queued) for what :meth:`send` would block on: the topic's
        metadata and free ``buffer.memory``; then ``send`` does not wait. Returns whether
        there was anything to wait for.

        Raises:
            KafkaTimeoutError: either did not come within ``max.block.ms``.
            EosError: the state refuses sends, or the metadata answer carried an error.
        """
        waited = False
        if self._metadata.partition_count(topic) is None:
            yield from self._router.partition_count(topic)
            waited = True
        if self._budget.full:
            yield from self._buffer_free(topic)
            waited = True
        return waited

    def _buffer_free(self, topic: str) -> Steps[None]:
        """Wait, at most ``max.block.ms``, while the batches not yet acknowledged hold
        ``buffer.memory``; the I/O loop frees it as answers come.

        Raises:
            KafkaTimeoutError: still full after ``max.block.ms``; nothing was queued.
            EosError: the state refuses sends (close() or an abort from another thread
                ends the wait).
        """
        budget = self._budget
        max_block_ms = self.config.max_block_ms

        def check() -> None:
            self._sender.check_alive()
            self._router.check_state(topic)

        yield from wait_until(
            self._sender, lambda: not budget.full, time.monotonic() + max_block_ms / 1000,
            "waiting for buffer.memory", check,
            unchanged=f"{budget.limit} bytes still held by batches not yet acknowledged after "
                      f"max.block.ms ({max_block_ms:g} ms); nothing was queued")

    def partitions(self, topic: str) -> Steps[list[TopicPartition]]:
        """``partitions_for()``: the topic's partitions, its metadata asked of the cluster and
        awaited (at most ``max.block.ms``) if not known yet.

        Raises:
            KafkaTimeoutError: the metadata did not come in time (chained from why).
            EosError: the metadata answer carried a non-retriable error for the topic.
            IllegalStateError: the producer is closed (also while waiting).
        """
        self.check_open()
        count = yield from self._router.partition_count(topic, lambda _: self.check_open())
        return [TopicPartition(topic, p) for p in range(count)]

    def flush(self, deadline: float, seconds: float) -> Steps[None]:
        """Send every queued record now and wait until each is written or failed, or the
        open transaction failed.

        Raises:
            KafkaTimeoutError: records still pending at ``deadline``; they stay queued.
            IllegalStateError: the producer is closed.
        """
        self.check_open()
        sender = self._sender
        sender.flushing += 1
        sender.wake()
        try:
            yield from wait_until(
                sender, self._flushed, deadline, "flush()", lambda: self._check_waiting("flush"),
                unchanged=f"records still pending after {seconds:g} s; they stay queued")
        finally:
            sender.flushing -= 1

    def _flushed(self) -> bool:
        return not self._sender.incomplete() or self._core.state is State.ABORTABLE_ERROR

    def stats(self) -> ClientStats:
        """A snapshot of the counters (takes the lock; never waits)."""
        with self._lock:
            return self._sender.stats()

    # -- the end --------------------------------------------------------------------------------

    def start_closing(self) -> State | None:
        """close() begins (takes the lock): its waits end from now on when no broker is
        reachable. Returns the state to finish from, None if already closed."""
        with self._lock:
            if self._closed:
                return None
            self._closing = True
            return self._core.state

    def left_open(self, state: State) -> Literal["flush", "abort", "commit"] | None:
        """What close() finishes, from ``state``: an idempotent producer flushes, an open
        transaction is aborted, a commit in progress is resumed."""
        if not self.config.transactional:
            return "flush"
        if state in (State.IN_TRANSACTION, State.ABORTABLE_ERROR, State.ABORTING):
            return "abort"
        if state is State.COMMITTING:
            return "commit"
        return None

    def shut_down(self) -> None:
        """close()'s end (takes the lock): stop the stats reporter, fail what is left, ask the
        I/O loop to stop. The front then waits for the loop to exit."""
        if self.reporter is not None:
            self.reporter.stop()
        with self._lock:
            self._stop()

    def close_unstarted(self) -> None:
        """close() of a producer whose I/O loop never ran (nothing was sent): close the
        connections at once."""
        self._sender.stop()
        self._closed = True
        self._finalizer.detach()
        self._sender.client.close()

    def _stop(self) -> None:
        self._closed = True
        self._shortcuts.clear()
        self._core.close()
        self._sender.stop()
        self._finalizer.detach()  # (stopped already: the collector need not)

    def describe(self) -> str:
        """What ``repr()`` says of the producer after its class name."""
        kind = f"transactional_id={self.config.transactional_id!r}" \
            if self.config.transactional else "idempotent"
        return f"{kind} state={self._core.state.name}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


_time_ns, _monotonic = time.time_ns, time.monotonic  # module globals: the hot path looks them up
