"""The exactly-once processor's decisions, once, for both fronts.

What the rules are and why: :mod:`eosclient.processor`'s docstring (the theory of operation).
Here they are written as steps (:mod:`eosclient._processor.steps`): :class:`ProcessorCore`'s
generator methods yield every I/O they need and take its result back, so
:class:`~eosclient.ExactlyOnceProcessor` (sync clients, :func:`~eosclient._processor.steps.drive`)
and :class:`~eosclient.aio.AsyncExactlyOnceProcessor` (async clients, awaited) run the same loop,
commit, recovery, rebalance handling, fence probe and hand-over.

The ports a front provides:

* ``consumer``: a read_committed consumer (sync or async) with ``poll_batch``, ``assignment``,
  ``committed``, ``seek``, ``seek_to_beginning``, ``group_metadata``, ``in_generation``,
  ``watermarks``, ``topic_metadata``, and ``start_commit`` (a plain
  commit begun, not waited for: its job, None if out of the generation) with
  ``finish_commit(job, timeout)``;
* ``producer``: a transactional producer with ``init_transactions``, ``partitions_for``,
  ``begin_transaction``, ``send_offsets_to_transaction``, ``commit_transaction``,
  ``abort_transaction``, ``flush``;
* ``front``: ``open_producer()`` and ``open_consumer()`` (create them, subscribe with callbacks
  that drive :meth:`ProcessorCore.on_assign`/``on_revoke``/``on_lost``; each returns the client's
  settings), ``transform_each(records)`` (``[(record, outputs)]``, the transform awaited if it
  is a coroutine), ``transform_batch(records)``, ``send_all(topic, items)`` (each item
  ``(value, key, partition, headers)``, queued in order), ``send_copies(topic, runs)`` (each
  run ``(values, keys or None, headers)``: one input partition's records, queued as the
  producer's ``send_batch(topic, values, keys, headers=headers)`` queues them),
  ``probe(topic, headers)`` (send one record to partition 0 and flush), ``backoff(seconds)``
  (a wait that ``stop()`` ends early: whether it was stopped), ``sleep(seconds)`` and
  ``close_clients(replaced)`` (the consumer leaves the group, static or not, if ``replaced``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eosclient._consumer.partitions import ConsumerRecord
from eosclient._core.types import TopicPartition
from eosclient._net.backoff import Backoff
from eosclient._processor.stats import ProcessorStats, StatsCounter
from eosclient._processor.steps import Io, Steps
from eosclient._processor.visible import committed_steps
from eosclient.errors import (
    AbortableError,
    EosError,
    FencedError,
    KafkaTimeoutError,
    RetriableError,
)

__all__ = ["SOURCE_HEADER", "OutputRecord", "ProcessorCore", "ProcessorSettings"]

log = logging.getLogger("eosclient.processor")

SOURCE_HEADER = "eos.src"  # "topic/partition/offset" of the input record an output came from
_PROBE_HEADER = "eos.probe"  # an aborted record that proves the producer was not fenced
_UNKNOWN_TOPIC = 3  # UNKNOWN_TOPIC_OR_PARTITION
_COMMIT_ATTEMPTS = 3  # commit_transaction() calls (each resumes the last) before giving up
_SECURE_TIMEOUT = 10.0  # seconds for the plain commit of a committed transaction's offsets
_HANDOFF_TIMEOUT = 30.0  # seconds to wait for a revoked partition's committed offset to show
_ABORT_BACKOFF = Backoff(0.05, 2.0)  # before the n-th retry after aborts in a row (none at 1)
_SETTLE_BACKOFF = Backoff(0.01, 0.5)  # between looks at the output's LSO after an assignment
_SETTLE_WARN = 2.0  # seconds of waiting for the output to settle before a WARNING

Item = tuple[object, object, int | None, list[tuple[str, bytes | None]]]  # for send_all
CopyRun = tuple[list[Any], list[Any] | None, list[list[tuple[str, bytes | None]]]]  # send_copies


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """One record for the output topic, when a ``(key, value)`` pair is not enough.

    Attributes:
        value: bytes-like or None (or what the producer's value serializer takes).
        key: bytes-like or None.
        partition: The output partition; None lets the partitioner choose.
        headers: Extra ``(str, bytes | None)`` headers (``eos.src`` is added to them).
        source: The input record it came from; a ``batch_fn`` sets it so that the output gets
            its ``eos.src`` header (``fn``'s outputs get it from their input record).
    """

    value: object
    key: object = None
    partition: int | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    source: ConsumerRecord | None = None


Output = OutputRecord | tuple[object, object]


@dataclass(frozen=True, slots=True)
class ProcessorSettings:
    """Both processors' constructor arguments, checked (their docstrings say what each means).

    Raises:
        ValueError: both ``fn`` and ``batch_fn``, no input topic, or a bad limit.
    """

    bootstrap_servers: str
    input_topics: list[str]
    output_topic: str
    group_id: str
    transactional_id: str
    fn: Callable[[ConsumerRecord], Any] | None
    batch_fn: Callable[[list[ConsumerRecord]], Any] | None
    max_records_per_transaction: int
    commit_interval_ms: int
    preregister_partitions: bool
    max_consecutive_aborts: int | None
    producer_config: dict[str, object]
    consumer_config: dict[str, object]

    @classmethod
    def of(cls, *, bootstrap_servers: str, input_topics: Sequence[str], output_topic: str,
           group_id: str, transactional_id: str, fn: Callable[[ConsumerRecord], Any] | None,
           batch_fn: Callable[[list[ConsumerRecord]], Any] | None,
           max_records_per_transaction: int, commit_interval_ms: int,
           preregister_partitions: bool, max_consecutive_aborts: int | None,
           config: Mapping[str, object] | None, producer_config: Mapping[str, object] | None,
           consumer_config: Mapping[str, object] | None) -> ProcessorSettings:
        """Check the arguments and merge the three config mappings into two."""
        if fn is not None and batch_fn is not None:
            raise ValueError("give fn or batch_fn, not both")
        if max_consecutive_aborts is not None and max_consecutive_aborts < 1:
            raise ValueError("max_consecutive_aborts must be >= 1, or None (never give up)")
        if isinstance(input_topics, str) or not input_topics:
            raise ValueError("input_topics must be a non-empty list of topic names")
        if max_records_per_transaction < 1 or commit_interval_ms < 0:
            raise ValueError("max_records_per_transaction must be >= 1, commit_interval_ms >= 0")
        shared = dict(config or {})
        return cls(bootstrap_servers, list(input_topics), output_topic, group_id,
                   transactional_id, fn, batch_fn, max_records_per_transaction,
                   commit_interval_ms, preregister_partitions, max_consecutive_aborts,
                   {**shared, **(producer_config or {})},
                   {"auto.offset.reset": "earliest", "group.instance.id": transactional_id,
                    **shared, **(consumer_config or {})})


class _Txn:
    """The open transaction: the next offset per input partition, and what it holds."""

    def __init__(self, interval: float) -> None:
        self.offsets: dict[TopicPartition, int] = {}
        self.records_in = 0
        self.records_out = 0
        self.due = time.monotonic() + interval


class ProcessorCore:
    """One processor's state and decisions (the module docstring); ``run`` is the whole run.

    ``stop_event`` and ``counter`` are safe from any thread; everything else belongs to the
    steps being driven.
    """

    def __init__(self, settings: ProcessorSettings) -> None:
        self.settings = settings
        self.stop_event = threading.Event()
        self.counter = StatsCounter()
        self._interval = settings.commit_interval_ms / 1000
        self._started = time.monotonic()
        self._txn: _Txn | None = None
        self._rewind = False
        self._aborts_in_row = 0  # aborted transactions since the last commit
        # What this instance committed, per input partition it holds or held: the group must
        # show it before a partition is handed over, and a rewind never goes back past it (a
        # higher offset the group shows wins: another owner went further meanwhile). Kept
        # after a hand-over: Tansu may apply an older transaction's offsets after newer ones.
        self._committed: dict[TopicPartition, int] = {}
        self._outputs: list[TopicPartition] | None = None  # None: the count is not known
        self._declared: list[TopicPartition] | None = None
        self._securing: Any = None  # the plain commit of the last transaction's offsets, begun
        self._session = 10.0  # the consumer's session.timeout.ms, in seconds, once open
        self._txn_timeout = 60.0  # the producer's transaction.timeout.ms, in seconds, once open

    def run(self, max_records: int | None, timeout: float | None,
            idle_timeout: float | None) -> Steps[ProcessorStats]:
        """The whole of ``run()``: open, loop, commit, close (the processors' ``run`` says
        what ends it and what it raises)."""
        self.stop_event.clear()
        self.counter.started()
        stop_at = time.monotonic() + timeout if timeout is not None else float("inf")
        replaced = False  # fenced: the consumer leaves the group, static or not
        try:
            yield from self._open(idle_timeout)
            yield from self._loop(max_records, stop_at, idle_timeout)
            yield from self._commit()
            yield from self._secured()
        except BaseException as exc:
            replaced = isinstance(exc, FencedError)
            yield from self._abort_quietly()
            self._committed.clear()  # closing after a failure: do not wait on the broker again
            raise
        finally:
            self._txn = self._securing = None
            try:
                # on_revoke: nothing to commit, offsets to await
                yield Io("front", "close_clients", (replaced,))
            finally:
                self._committed.clear()
        stats = self.counter.snapshot()
        log.info("processor stopped: %s", stats)
        return stats

    # -- the loop -------------------------------------------------------------------------------

    def _loop(self, max_records: int | None, stop_at: float, idle: float | None) -> Steps[None]:
        last_record, last_turn = self._started, time.monotonic()
        assigned_once = False
        while not self.stop_event.is_set():
            now = time.monotonic()
            if now - last_turn >= self._session and self._txn is None:
                yield from self._prove_not_replaced()  # stopped for a session: a zombie now?
            last_turn = now
            if now >= stop_at:
                return
            if idle is not None and self._txn is None and now - last_record >= idle:
                if not assigned_once:  # nothing was ever there to read: say why, fail
                    raise (yield from self._never_assigned(now - self._started))
                return
            budget = self._budget(max_records)
            if budget <= 0:
                return
            try:
                read = yield from self._step(budget)
                assigned = bool((yield Io("consumer", "assignment")))
                assigned_once = assigned_once or assigned
                if read or (assigned_once and not assigned):  # a rebalance: not idle
                    last_record = time.monotonic()
            except AbortableError as exc:
                yield from self._recover(exc)

    def _never_assigned(self, waited: float) -> Steps[KafkaTimeoutError]:
        """The typed error for a run whose idle timeout passed with nothing ever assigned."""
        settings = self.settings
        topics = yield Io("consumer", "topic_metadata", (settings.input_topics,))
        missing = [t for t, m in topics.items() if m.error is not None
                   and m.error.code == _UNKNOWN_TOPIC]
        known = [t for t, m in topics.items() if m.partitions is not None]
        if missing:
            why = f"input topic(s) {', '.join(missing)} do not exist (UNKNOWN_TOPIC_OR_PARTITION)"
        elif not known:
            why = (f"no broker of {settings.bootstrap_servers} answered Metadata (unreachable? "
                   "see the WARNING lines)")
        else:
            why = f"the group {settings.group_id!r} join did not complete"
        return KafkaTimeoutError(f"no input partition was assigned in {waited:.1f} s "
                                 f"(idle_timeout): {why}")

    def _budget(self, max_records: int | None) -> int:
        """How many more input records this run may take into the open transaction."""
        open_in = self._txn.records_in if self._txn else 0
        room = self.settings.max_records_per_transaction - open_in
        if max_records is not None:
            room = min(room, max_records - self.counter.snapshot().records_in - open_in)
        return room

    def _step(self, budget: int) -> Steps[bool]:
        """Poll once, process what came, commit if the transaction is full or due."""
        if self._rewind:
            yield from self._rewind_to_committed()
        wait = 0.1 if self._txn is None else max(0.0, min(0.1, self._txn.due - time.monotonic()))
        # columns: no object per record
        batch = yield Io("consumer", "poll_batch", (wait,), {"max_records": budget})
        count = sum(map(len, batch.values()))
        if count:
            if self._txn is None:  # none open, or on_revoke committed it inside poll()
                yield from self._begin()
            yield from self._process(batch, count)
        txn = self._txn
        if txn is not None and (txn.records_in >= self.settings.max_records_per_transaction
                                or time.monotonic() >= txn.due or budget <= count):
            yield from self._commit()
        return bool(count)

    def _begin(self) -> Steps[None]:
        yield Io("producer", "begin_transaction", (self._declared, self.settings.group_id))
        self._txn = _Txn(self._interval)

    def _process(self, batch: dict[TopicPartition, Any], count: int) -> Steps[None]:
        txn = self._open_txn()
        settings = self.settings
        items: list[Item]
        if settings.batch_fn is not None:
            records = [r for c in batch.values() for r in c.records()]
            outputs = yield Io("front", "transform_batch", (records,))
            items = [_item(output, None) for output in outputs]
        elif settings.fn is not None:
            records = [r for c in batch.values() for r in c.records()]
            done = yield Io("front", "transform_each", (records,))
            items = [_item(output, record) for record, outputs in done for output in outputs]
        else:  # the default transform (key and value as they are), straight from the columns
            runs = [_copies(columns) for columns in batch.values()]
            yield Io("front", "send_copies", (settings.output_topic, runs))
            txn.records_out += count
            items = []
        if items:
            yield Io("front", "send_all", (settings.output_topic, items))
            txn.records_out += len(items)
        for tp, columns in batch.items():
            txn.offsets[tp] = columns.next_offset
        txn.records_in += count

    def _commit(self) -> Steps[None]:
        """Commit the open transaction (if any) with its input offsets.

        Raises:
            AbortableError: the transaction failed; it is still open (call ``_recover``).
            KafkaTimeoutError: the commit did not finish after a few attempts.
        """
        txn = self._txn
        if txn is None:
            return
        # Offsets are written in order, the last plain commit answered first. Not later (before
        # EndTxn, say): Kafka applies a transaction's offsets at its marker only where no
        # offset record came after its TxnOffsetCommit's in the offsets log, so a plain commit
        # of the older offsets that lands after it would win, and the group go back.
        yield from self._secured()
        if txn.offsets:
            metadata = yield Io("consumer", "group_metadata")
            yield Io("producer", "send_offsets_to_transaction", (txn.offsets, metadata))
        if not (yield Io("consumer", "in_generation")):
            # Past the session (a pause, a stall): the group may have handed these partitions
            # to another member, which starts from the offsets committed before. Committing now
            # would write their outputs twice, on a broker that does not check the generation of
            # a TxnOffsetCommit (KIP-447) as Kafka does. Checked by the clock, after the offsets
            # were sent: a process resumed from a pause fails here, not after EndTxn.
            raise AbortableError("the consumer lost its group generation during the transaction "
                                 "(session or poll interval ran out): not committing")
        for attempt in range(1, _COMMIT_ATTEMPTS + 1):
            try:
                yield Io("producer", "commit_transaction")
                break
            except KafkaTimeoutError:  # the same call resumes the same commit
                if attempt == _COMMIT_ATTEMPTS:
                    raise
                log.warning("commit timed out (attempt %d); resuming it", attempt)
            except EosError:
                raise
            except BaseException:
                yield from self._finish_interrupted_commit(txn)
                raise
        self._committed_txn(txn)
        if txn.offsets:
            yield from self._secure(txn.offsets)

    def _committed_txn(self, txn: _Txn) -> None:
        self._txn = None
        self._aborts_in_row = 0
        self._committed.update(txn.offsets)
        self.counter.committed(txn.records_in, txn.records_out)
        log.debug("committed %d in, %d out", txn.records_in, txn.records_out)

    def _finish_interrupted_commit(self, txn: _Txn) -> Steps[None]:
        """The commit was interrupted while in flight (the asyncio ``run()`` cancelled, or a
        KeyboardInterrupt): its EndTxn may already have landed, and a commit once asked for
        can only be finished, never aborted. So it is resumed to its end (bounded by the
        producer's timeout), counted if it committed, and the interruption then goes on."""
        log.warning("interrupted during the commit: finishing the commit first (a commit "
                    "cannot be undone once asked for)")
        try:
            yield Io("producer", "commit_transaction")
        except EosError as exc:  # failed after all: it is aborted as any failure is
            log.warning("the interrupted commit did not commit: %r", exc)
            return
        self._committed_txn(txn)

    def _secure(self, offsets: Mapping[TopicPartition, int]) -> Steps[None]:
        """Commit the offsets of a committed transaction again, plainly (OffsetCommit, under
        this member's generation); :meth:`_secured` waits for it before offsets are written
        again, so the next transaction's records are read and written meanwhile.

        A broker may acknowledge EndTxn(commit) and apply the transaction's offsets later, and
        lose them meanwhile: Tansu 0.6 defers them while another transaction that wrote earlier
        to the same output partition is open, keeps them in the state of the producer's epoch,
        which the producer's next transaction reuses, and drops them with it when that one is
        aborted, by this instance or by its successor's InitProducerId after a crash. The group
        would then show older offsets and the next owner copy committed records again. On a
        broker that applies them at once (Kafka, noida-db) this writes what the group holds.
        The plain commit carries the generation, so a coordinator that checks it refuses a
        member that lost it (Kafka does, late commits included); before partitions are handed
        over it has been answered. It is only a safeguard, so a refusal or a timeout is logged,
        not raised.
        """
        if (yield Io("consumer", "in_generation")):  # else not this member's to commit any more
            self._securing = yield Io("consumer", "start_commit", (dict(offsets),))

    def _secured(self) -> Steps[None]:
        """Wait for the plain commit :meth:`_secure` began, if any.

        Raises:
            FencedError, FatalError: the group refused this member for good.
        """
        job, self._securing = self._securing, None
        if job is None:
            return
        try:
            yield Io("consumer", "finish_commit", (job, _SECURE_TIMEOUT))
        except (AbortableError, RetriableError, KafkaTimeoutError) as exc:
            log.info("committed offsets not secured outside the transaction: %r", exc)

    def _recover(self, exc: AbortableError) -> Steps[None]:
        """Abort the failed transaction and rewind to the committed offsets, after a backoff
        that grows with each abort in a row.

        Raises:
            AbortableError: ``exc``, once ``max_consecutive_aborts`` transactions in a row
                failed (a record the broker always refuses, a topic not authorised: retrying
                cannot help), with a note saying so.
        """
        log.warning("transaction failed, aborting and rewinding: %r", exc)
        yield from self._abort()
        self._aborts_in_row += 1
        most = self.settings.max_consecutive_aborts
        if most is not None and self._aborts_in_row >= most:
            exc.add_note(f"the processor gave up: {self._aborts_in_row} transactions in "
                         f"a row were aborted (max_consecutive_aborts)")
            raise exc
        yield from self._rewind_to_committed()
        yield Io("front", "backoff", (_ABORT_BACKOFF.delay(self._aborts_in_row - 1),))

    def _abort(self) -> Steps[None]:
        if self._txn is not None:  # every transaction begun is tracked, failed ones included
            self._txn = None
            yield Io("producer", "abort_transaction")
            self.counter.aborted()

    def _abort_quietly(self) -> Steps[None]:
        try:
            yield from self._abort()
        except EosError as exc:  # the original error is what the caller needs
            log.warning("abort after a failure failed too: %r", exc)

    def _rewind_to_committed(self, partitions: list[TopicPartition] | None = None,
                             ) -> Steps[None]:
        """Seek ``partitions`` (None: every assigned one, and the pending rewind is done) to
        the offsets the group shows, or past what this instance committed there."""
        if partitions is None:
            self._rewind = False
            assigned = yield Io("consumer", "assignment")
        else:
            assigned = partitions
        if not assigned:
            return
        shown_now = yield Io("consumer", "committed", (assigned,))
        behind = {}
        for tp, shown in shown_now.items():
            ours = self._committed.get(tp)  # the group may not show it yet (module docstring)
            if ours is not None and (shown is None or shown < ours):
                behind[tp] = offset = ours
            else:
                offset = shown
            if offset is None:
                yield Io("consumer", "seek_to_beginning", ([tp],))
            else:
                yield Io("consumer", "seek", (tp, offset))
        if behind:
            # The group lost offsets of transactions this instance committed (Tansu drops
            # deferred ones when the producer's next transaction aborts), and the plain commit
            # that secures them was refused (the generation had moved on): with no new input
            # nothing would write them again, and the next owner would copy those records
            # twice. On assignment every transaction that could move these offsets has ended
            # (on_assign waits for that).
            log.info("the group shows less than this instance committed: %s; committing "
                     "that again", ", ".join(f"{tp.topic}/{tp.partition}: {shown_now[tp]} < "
                                             f"{offset}" for tp, offset in behind.items()))
            yield from self._secured()
            yield from self._secure(behind)

    # -- rebalances (the fronts' callbacks drive these) -----------------------------------------

    def on_lost(self, partitions: list[TopicPartition]) -> Steps[None]:
        """The group moved on without this member (its session ran out, e.g. the process was
        paused): the partitions may already be another member's, so the open transaction is
        aborted, never committed, and nothing is handed over."""
        log.warning("partitions lost (the group generation ran out): aborting the open "
                    "transaction; the next owner processes its records")
        # What this instance committed stays known: given a partition back, it starts past it
        # even where the group shows less (Tansu drops the offsets of a committed transaction
        # whose application it deferred once the same producer's next transaction aborts, as
        # the one open now will). Where another member went further meanwhile, the group shows
        # more, and that is taken (_rewind_to_committed).
        if self._txn is not None:
            yield from self._abort()  # a replacement fenced us: FencedError, and run() ends
        else:
            yield from self._prove_not_replaced()

    def _prove_not_replaced(self) -> Steps[None]:
        """A process that lost its generation, or whose loop did not turn for a whole session
        (stopped, starved), may have been replaced meanwhile (a zombie). The group fences it
        by ``group.instance.id`` where the broker keeps static members (KIP-345; Tansu does
        not), and a transaction fences it by its epoch, but only when one reaches the broker:
        a zombie with nothing to write would live on, and may join again and hold partitions.
        So it writes one record in a transaction it aborts (read by no read_committed reader):
        a newer epoch of the transactional.id refuses it, and ``FencedError`` ends ``run()``.
        A Produce because Tansu checks the epoch only there and on TxnOffsetCommit.

        Raises:
            FencedError: replaced.
        """
        yield Io("producer", "begin_transaction")
        yield Io("front", "probe", (self.settings.output_topic, [(_PROBE_HEADER, b"")]))
        yield Io("producer", "abort_transaction")

    def on_assign(self, partitions: list[TopicPartition]) -> Steps[None]:
        """Before processing new partitions, prove this instance was not replaced, let every
        transaction that was open on the output end, then start from the offsets the group
        shows.

        The proof (:meth:`_prove_not_replaced`) because an assignment does not show that this
        process is the live one: Tansu gives a static member that joins again under its
        instance id the member id of the one it replaces, so a zombie paused for less than
        its session and its replacement are one member to it, and both are given its
        partitions (nemesis Tansu seed 17, asyncio); with nothing to write, the zombie would
        hold them for good.

        The previous owner may have lost the partitions involuntarily (paused past its session)
        with a transaction open or just committed. On Kafka, an OffsetFetch with
        ``require_stable`` waits for such a transaction; Tansu ignores ``require_stable`` and
        applies a committed transaction's offsets only once the transactions that wrote earlier
        to its output partitions have ended (the module docstring). Either way, once the output
        partitions' last stable offsets pass their high watermarks of now, every transaction
        that could move these partitions' offsets has ended, and the offsets read then are
        final. The wait is bounded (:meth:`_await_output_settled`).

        Cooperative (KIP-429), partitions come while others are kept, and a transaction over
        the kept ones may be open: it is committed first, as before a revocation (its own
        records would hold the output's LSO back until it times out, and the proof needs no
        transaction open), and only the new partitions are rewound: the kept ones go on from
        where they are. ``on_assign`` with nothing new changes nothing.
        """
        if not partitions:
            return
        log.info("assigned %s", _named(partitions))
        if self._txn is not None:
            log.info("partitions assigned beside kept ones: committing the open transaction "
                     "first")
            yield from self._finish_before_rebalance()
        yield from self._prove_not_replaced()
        yield from self._await_output_settled()
        yield from self._rewind_to_committed(partitions)

    def _await_output_settled(self) -> Steps[None]:
        """Wait until the output's LSO reaches its high watermark of now, on every partition,
        for at most the producer's ``transaction.timeout.ms``: a live instance's transaction
        ends by then (the producer enforces it), so only a foreign writer's long transaction
        or a stopped instance's can hold it longer, and then the processor goes on with a
        WARNING (on Kafka and noida-db the offsets are final anyway; on Tansu they may be old).
        """
        outputs = list(self._outputs or [])
        if not outputs:
            return
        ends = yield Io("consumer", "watermarks", (outputs,))  # one request per leader
        marks = {tp: ends[tp].high_watermark for tp in outputs}
        started = time.monotonic()
        warned = False
        attempt = 0
        while True:
            ends = yield Io("consumer", "watermarks", (sorted(marks),))
            marks = {tp: mark for tp, mark in marks.items() if ends[tp].last_stable_offset < mark}
            open_ = sorted(tp.partition for tp in marks)
            waited = time.monotonic() - started
            if not open_:
                return
            if waited >= self._txn_timeout:
                log.warning("output %s partitions %s still hold a transaction open after %.0f s "
                            "(transaction.timeout.ms): going on; on a broker that applies "
                            "transactional offsets late (Tansu) records may be processed again",
                            self.settings.output_topic, open_, waited)
                return
            if not warned and waited >= _SETTLE_WARN:
                warned = True
                log.warning("new partitions wait for open transactions on %s partitions %s to "
                            "end (a paused or stopped instance?)", self.settings.output_topic,
                            open_)
            attempt += 1
            if (yield Io("front", "backoff", (_SETTLE_BACKOFF.delay(attempt),))):
                return

    def on_revoke(self, partitions: list[TopicPartition]) -> Steps[None]:
        """Finish the open transaction before the group takes partitions away, and wait until
        the group shows what was committed for them. Cooperative (KIP-429), ``partitions`` are
        only those that move: the transaction ends all the same (it holds their records), and
        the kept partitions carry on into the next one from where they are."""
        log.info("revoked %s", _named(partitions))
        if self._txn is not None:
            log.info("partitions revoked: committing the open transaction first")
            yield from self._finish_before_rebalance()
        yield from self._secured()
        handed = {tp: self._committed[tp] for tp in partitions if tp in self._committed}
        if handed:
            try:
                yield from committed_steps(handed, _HANDOFF_TIMEOUT)
            except EosError as exc:  # the group hands them over anyway: say what may follow
                log.error("handing over partitions whose committed offsets the group does not "
                          "show yet; the next owner may process records again: %r", exc)

    def _finish_before_rebalance(self) -> Steps[None]:
        """Commit the open transaction; if that fails, abort it, and rewind the partitions
        still assigned (kept) before the next poll."""
        try:
            yield from self._commit()
        except AbortableError as exc:
            log.warning("commit before the rebalance failed, aborting: %r", exc)
            yield from self._abort()
            self._rewind = True  # partitions kept (if any) must go back to committed offsets

    # -- lifecycle ------------------------------------------------------------------------------

    def _open(self, idle: float | None) -> Steps[None]:
        settings = self.settings
        self._started = time.monotonic()
        producer_config = yield Io("front", "open_producer")
        self._txn_timeout = producer_config.transaction_timeout_ms / 1000
        # fences an older instance, settles what it left open
        yield Io("producer", "init_transactions", (idle,))
        self._outputs = yield from self._output_partitions()
        self._declared = self._outputs if settings.preregister_partitions else None
        consumer_config = yield Io("front", "open_consumer")
        self._session = consumer_config.session_timeout_ms / 1000
        log.info("processor %s: %s -> %s, group %s", settings.transactional_id,
                 ",".join(settings.input_topics), settings.output_topic, settings.group_id)

    def _output_partitions(self) -> Steps[list[TopicPartition] | None]:
        # The producer's own connections: a side connection of its own (plaintext) failed
        # against a TLS or SASL listener, after a 10 s stall.
        try:
            found: list[TopicPartition] = yield Io("producer", "partitions_for",
                                                   (self.settings.output_topic,))
            return found
        except EosError as exc:  # not known: the producer adds partitions as it sends
            log.warning("output partitions unknown (%r): not pre-registered", exc)
            return None

    def _open_txn(self) -> _Txn:
        if self._txn is None:
            raise RuntimeError("no transaction is open")  # a bug: _begin comes first
        return self._txn


def _named(partitions: Sequence[TopicPartition]) -> str:
    """``topic[0, 2]``, topic by topic, for a log line."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return " ".join(f"{t}{sorted(ps)}" for t, ps in sorted(by_topic.items()))


def _item(output: Output, record: ConsumerRecord | None) -> Item:
    """What ``send_all`` queues for one output of ``record`` (or of ``output.source``)."""
    out = output if isinstance(output, OutputRecord) else OutputRecord(output[1], output[0])
    source = out.source or record
    headers = list(out.headers)
    if source is not None:
        headers.append((SOURCE_HEADER,
                        f"{source.topic}/{source.partition}/{source.offset}".encode()))
    return out.value, out.key, out.partition, headers


def _copies(columns: Any) -> CopyRun:
    """The default transform's records for one partition's columns, for one ``send_batch``
    (no record, output or future object each): values and keys as they came (keys None when
    every one is: then they fill batches in turn, as ``send()``'s keyless records do), and each
    record's ``eos.src`` header, one ``(str, bytes)`` pair."""
    source = f"{columns.topic}/{columns.partition}/".encode()
    offsets = columns.offsets  # first: it decodes every column in one pass (keys alone would not)
    keys = columns.keys
    headers: list[list[tuple[str, bytes | None]]] = [
        [(SOURCE_HEADER, b"%s%d" % (source, offset))] for offset in offsets]
    return columns.values, None if keys.count(None) == len(keys) else keys, headers
