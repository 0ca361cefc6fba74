"""ExactlyOnceProcessor: consume, transform, produce, each input record's effect exactly once.

Theory of operation. One loop on the caller's thread (``run()``), over one
:class:`~eosclient.ReadCommittedConsumer` (``subscribe()``, a consumer group) and one
:class:`~eosclient.TransactionalProducer`::

    poll -> begin(the group, and every output partition if asked: KIP-609 pre-registration)
         -> transform -> send (each output with an ``eos.src`` header naming its input record)
         -> poll more while the transaction is neither full nor due -> ...
         -> send_offsets_to_transaction(positions after the records, group_metadata())  KIP-447
         -> commit

The input offsets move if and only if the outputs commit, so a crash anywhere redoes exactly the
transaction that was open: the next instance with the same transactional.id fences this one
(InitProducerId), the coordinator aborts what it left open, and the group resumes from the
committed offsets.

Failures, by kind (see :mod:`eosclient.errors`):

* :class:`~eosclient.errors.AbortableError`: the transaction is aborted, every assigned
  partition is rewound to its committed offset (read with ``require_stable``), and the loop goes
  on: the same records are processed again in a new transaction, after a backoff that grows
  with each abort in a row (0, then 50 ms doubling up to 2 s). After ``max_consecutive_aborts``
  (10) in a row ``run()`` raises the last error: a record the broker always refuses
  (MESSAGE_SIZE_TOO_LARGE) or a topic the producer may not write would otherwise loop for ever.
* :class:`~eosclient.errors.FencedError` (another instance owns the transactional.id) and
  :class:`~eosclient.errors.FatalError`: the producer and consumer are closed and ``run()``
  raises. The processor does not rejoin on its own: a fenced instance is a zombie, and the
  newer one already does its work; a supervisor may build a new processor if it knows better.
* An exception raised by the transform: the transaction is aborted, the clients closed, and
  ``run()`` re-raises it (nothing of that transaction was committed).

Static membership (KIP-345). The consumer's ``group.instance.id`` defaults to the
transactional.id (unless ``consumer_config`` sets one): both name *this* instance, stable across
restarts and unique among instances. A restarted instance then takes its predecessor's place in
the group at once, with its partitions, instead of waiting for the coordinator to notice the
dead member (noida-db never drops a SIGKILLed member and makes it the next generation's leader,
so a restarted dynamic member would never get a partition). A zombie is fenced twice: by the
transactional.id (InitProducerId bumps the epoch) and by the instance id (the group answers its
heartbeats and commits FENCED_INSTANCE_ID). The price, as in Java: a static member does not
leave the group when it closes, so after a clean stop its partitions wait
``session.timeout.ms`` for it before the group hands them to the other instances.

Output partitions are added to a transaction as records go to them (as Java does), not
pre-registered, unless ``preregister_partitions=True``: noida-db fails the EndTxn(commit) of a
transaction that registered a partition whose last marker is an ABORT of this producer and wrote
nothing there, after marking the other partitions committed (a half-committed transaction,
hence duplicates); every abort can leave such a partition behind. Pre-registration saves a
round trip per transaction on brokers that get this right, when the transform is slow.

A rebalance that revokes partitions commits the open transaction first (in ``on_revoke``); if
that commit fails, it is aborted and every partition still assigned is rewound before the next
poll, so no record is lost and no output is written twice. Before it gives a partition up
(rebalance or close) the processor reads back the offset it last committed there, waiting up to
30 s until the group shows it: the next owner starts from that offset, and a broker may apply a
transaction's offsets after acknowledging its commit (Tansu 0.6 does, while another transaction
that wrote earlier to the same output partition is open). For the same reason a rewind after an
abort never goes back past what this instance committed for a partition it still holds.

Partitions can also be taken involuntarily: a process paused (GC, a stopped VM) or stalled past
its session or poll interval has lost its generation, and the group may already have given its
partitions to another member. Four rules keep that exactly once, and the zombie fenced, on
brokers that check less than Kafka does (neither broker here checks a TxnOffsetCommit's
generation strictly, times transactions out, or honours ``require_stable``; Tansu keeps no
static members):

* a transaction is committed only if the consumer still holds its generation by the clock
  (``in_generation()``), checked after the offsets were sent: a process resumed from a pause
  aborts instead, even before its I/O thread noticed the lost session;
* lost partitions (``on_lost``, KIP-429) abort the open transaction, never commit it;
* a worker that lost its generation, or whose loop did not turn for a whole session (a stopped
  process), with no transaction open proves its producer was not replaced meanwhile: one record
  in a transaction it aborts, which a newer epoch refuses (``FencedError``);
* newly assigned partitions start only once every transaction that was open on the output has
  ended (the output's LSO passes its high watermark of the moment; at most
  ``transaction.timeout.ms``), then from the offsets the group shows: a previous owner's last
  transaction is then decided, and its offsets applied.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from eosclient._core.encoder import Header
from eosclient._core.types import TopicPartition
from eosclient._net.backoff import Backoff
from eosclient._processor.stats import ProcessorStats, StatsCounter
from eosclient._processor.visible import await_committed
from eosclient.consumer import ConsumerRecord, ReadCommittedConsumer, RecordColumns
from eosclient.errors import AbortableError, EosError, KafkaTimeoutError
from eosclient.producer import TransactionalProducer

_UNKNOWN_TOPIC = 3  # UNKNOWN_TOPIC_OR_PARTITION

__all__ = ["SOURCE_HEADER", "ExactlyOnceProcessor", "OutputRecord", "ProcessorStats"]

log = logging.getLogger("eosclient.processor")

_HEADER_ROOM = 256  # bytes: a record's overhead and its source header, but the input topic's name
SOURCE_HEADER = "eos.src"  # "topic/partition/offset" of the input record an output came from
_PROBE_HEADER = "eos.probe"  # an aborted record that proves the producer was not fenced
_T = TypeVar("_T")
_COMMIT_ATTEMPTS = 3  # commit_transaction() calls (each resumes the last) before giving up
_HANDOFF_TIMEOUT = 30.0  # seconds to wait for a revoked partition's committed offset to show
_ABORT_BACKOFF = Backoff(0.05, 2.0)  # before the n-th retry after aborts in a row (none at 1)
_SETTLE_BACKOFF = Backoff(0.01, 0.5)  # between looks at the output's LSO after an assignment
_SETTLE_WARN = 2.0  # seconds of waiting for the output to settle before a WARNING


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
Transform = Callable[[ConsumerRecord], Iterable[Output]]
BatchTransform = Callable[[list[ConsumerRecord]], Iterable[Output]]


class _Txn:
    """The open transaction: the next offset per input partition, and what it holds."""

    def __init__(self, interval: float) -> None:
        self.offsets: dict[TopicPartition, int] = {}
        self.records_in = 0
        self.records_out = 0
        self.due = time.monotonic() + interval


class ExactlyOnceProcessor:
    """Copy (and transform) records from input topics to an output topic, exactly once.

    Args:
        bootstrap_servers: ``"host:port,host:port"``.
        input_topics: The topics to consume (as a member of ``group_id``).
        output_topic: The topic outputs go to.
        group_id: The consumer group; its offsets are committed inside the transactions.
        transactional_id: Stable across restarts of this instance (one per instance).
        fn: ``fn(record) -> iterable of (key, value) or OutputRecord``; default: identity.
        batch_fn: Instead of ``fn``: ``batch_fn(records) -> iterable of outputs``, called once
            per poll.
        max_records_per_transaction: Commit when a transaction holds this many input records.
        commit_interval_ms: Commit a transaction at the latest this long after it began.
        preregister_partitions: Register every output partition at ``begin_transaction``
            (KIP-609 style), so that the AddPartitionsToTxn round trip overlaps the transform
            instead of delaying the first Produce. Off by default: a transaction then leaves
            most registered partitions empty, which Apache Kafka accepts (it writes a marker
            there anyway) but noida-db 0.2.3 answers with INVALID_TXN_STATE (fatal) once such
            a partition holds aborted records of this transactional.id, after committing the
            other partitions (module docstring). The consumer group is always pre-registered.
        max_consecutive_aborts: ``run()`` raises the last error once this many transactions in
            a row were aborted (None: retry for ever). Between them it waits, from 0 after the
            first abort up to 2 s.
        config: Settings by Kafka's dotted key given to both clients, the producer and the
            consumer: what they must share to reach the cluster (``security.protocol``,
            ``ssl.*``, ``sasl.*``, ``client.id``, timeouts). ``producer_config`` and
            ``consumer_config`` add to it and win over it.
        producer_config: Producer settings by Kafka's dotted key.
        consumer_config: Consumer settings by Kafka's dotted key (``auto.offset.reset``
            defaults to ``earliest`` here, and ``group.instance.id`` to ``transactional_id``:
            static membership, see the module docstring).

    Raises:
        ValueError: both ``fn`` and ``batch_fn``, no input topic, or a bad limit.
    """

    def __init__(self, *, bootstrap_servers: str, input_topics: Sequence[str],
                 output_topic: str, group_id: str, transactional_id: str,
                 fn: Transform | None = None, batch_fn: BatchTransform | None = None,
                 max_records_per_transaction: int = 500, commit_interval_ms: int = 100,
                 preregister_partitions: bool = False,
                 max_consecutive_aborts: int | None = 10,
                 config: Mapping[str, object] | None = None,
                 producer_config: Mapping[str, object] | None = None,
                 consumer_config: Mapping[str, object] | None = None) -> None:
        if fn is not None and batch_fn is not None:
            raise ValueError("give fn or batch_fn, not both")
        if max_consecutive_aborts is not None and max_consecutive_aborts < 1:
            raise ValueError("max_consecutive_aborts must be >= 1, or None (never give up)")
        if isinstance(input_topics, str) or not input_topics:
            raise ValueError("input_topics must be a non-empty list of topic names")
        if max_records_per_transaction < 1 or commit_interval_ms < 0:
            raise ValueError("max_records_per_transaction must be >= 1, commit_interval_ms >= 0")
        self.bootstrap_servers = bootstrap_servers
        self.input_topics = list(input_topics)
        self.output_topic = output_topic
        self.group_id = group_id
        self.transactional_id = transactional_id
        self._fn, self._batch_fn = fn, batch_fn
        self._max_records = max_records_per_transaction
        self._interval = commit_interval_ms / 1000
        self._preregister = preregister_partitions
        shared = dict(config or {})
        self._producer_config = {**shared, **(producer_config or {})}
        self._consumer_config = {"auto.offset.reset": "earliest",
                                 "group.instance.id": transactional_id, **shared,
                                 **(consumer_config or {})}
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._counter = StatsCounter()
        self._txn: _Txn | None = None
        self._rewind = False
        self._max_aborts = max_consecutive_aborts
        self._aborts_in_row = 0  # aborted transactions since the last commit
        # What this instance committed for partitions it holds: the group must show it before
        # a partition is handed over, and a rewind never goes back past it.
        self._committed: dict[TopicPartition, int] = {}
        self._outputs: list[TopicPartition] | None = None  # None: the count is not known
        self._declared: list[TopicPartition] | None = None
        self._producer: TransactionalProducer | None = None
        self._consumer: ReadCommittedConsumer | None = None

    @property
    def stats(self) -> ProcessorStats:
        """Progress so far (committed records, transactions, records/s); any thread."""
        return self._counter.snapshot()

    def stop(self) -> None:
        """Ask ``run()`` to commit what it has and return; safe from any thread or a signal
        handler."""
        self._stop.set()

    def run(self, max_records: int | None = None, timeout: float | None = None,
            idle_timeout: float | None = None) -> ProcessorStats:
        """Process until ``stop()``, ``max_records`` input records, ``timeout`` seconds, or
        ``idle_timeout`` seconds without a record; commit, close the clients, return the stats.

        ``idle_timeout`` counts from the start (``init_transactions()`` and the first group
        join included), then from the last record; once partitions were assigned, a later
        rebalance does not count (a join may wait for a dead member's session to expire).

        Raises:
            KafkaTimeoutError: ``idle_timeout`` passed before any partition was ever assigned
                (an input topic that does not exist, no broker reachable: the message says
                which), or init did not finish within it; clients closed.
            FencedError: another instance took over the transactional.id; clients closed.
            FatalError: e.g. not authorised; clients closed.
            KafkaTimeoutError: init or a commit did not finish in time; clients closed.
            AbortableError: ``max_consecutive_aborts`` transactions in a row failed (the last
                one's error, with a note); clients closed.
            Exception: whatever ``fn``/``batch_fn`` raised, after aborting its transaction.
        """
        self._stop.clear()
        self._counter.started()
        stop_at = time.monotonic() + timeout if timeout is not None else float("inf")
        try:
            self._open(idle_timeout)
            self._loop(max_records, stop_at, idle_timeout)
            self._commit()
        except BaseException:
            self._abort_quietly()
            self._committed.clear()  # closing after a failure: do not wait on the broker again
            raise
        finally:
            self._close()
        log.info("processor stopped: %s", self.stats)
        return self.stats

    # -- the loop -------------------------------------------------------------------------------

    def _loop(self, max_records: int | None, stop_at: float, idle: float | None) -> None:
        last_record, last_turn = self._started, time.monotonic()
        assigned_once = False
        session = self._need(self._consumer).config.session_timeout_ms / 1000
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last_turn >= session and self._txn is None:
                self._prove_not_replaced()  # stopped for a session: a zombie now?
            last_turn = now
            if now >= stop_at:
                return
            if idle is not None and self._txn is None and now - last_record >= idle:
                if not assigned_once:  # nothing was ever there to read: say why, fail
                    raise self._never_assigned(now - self._started)
                return
            budget = self._budget(max_records)
            if budget <= 0:
                return
            try:
                read = self._step(budget)
                assigned = bool(self._need(self._consumer).assignment())
                assigned_once = assigned_once or assigned
                if read or (assigned_once and not assigned):  # a rebalance: not idle
                    last_record = time.monotonic()
            except AbortableError as exc:
                self._recover(exc)

    def _never_assigned(self, waited: float) -> KafkaTimeoutError:
        """The typed error for a run whose idle timeout passed with nothing ever assigned."""
        topics = self._need(self._consumer).topic_metadata(self.input_topics)
        missing = [t for t, m in topics.items() if m.error is not None
                   and m.error.code == _UNKNOWN_TOPIC]
        known = [t for t, m in topics.items() if m.partitions is not None]
        if missing:
            why = f"input topic(s) {', '.join(missing)} do not exist (UNKNOWN_TOPIC_OR_PARTITION)"
        elif not known:
            why = (f"no broker of {self.bootstrap_servers} answered Metadata (unreachable? see "
                   "the WARNING lines)")
        else:
            why = f"the group {self.group_id!r} join did not complete"
        return KafkaTimeoutError(f"no input partition was assigned in {waited:.1f} s "
                                 f"(idle_timeout): {why}")

    def _budget(self, max_records: int | None) -> int:
        """How many more input records this run may take into the open transaction."""
        open_in = self._txn.records_in if self._txn else 0
        room = self._max_records - open_in
        if max_records is not None:
            room = min(room, max_records - self.stats.records_in - open_in)
        return room

    def _step(self, budget: int) -> bool:
        """Poll once, process what came, commit if the transaction is full or due."""
        consumer = self._need(self._consumer)
        if self._rewind:
            self._rewind_to_committed()
        wait = 0.1 if self._txn is None else max(0.0, min(0.1, self._txn.due - time.monotonic()))
        batch = consumer.poll_batch(wait, max_records=budget)  # columns: no object per record
        count = sum(map(len, batch.values()))
        if count:
            if self._txn is None:  # none open, or on_revoke committed it inside poll()
                self._begin()
            self._process(batch, count)
        txn = self._txn
        if txn is not None and (txn.records_in >= self._max_records or time.monotonic() >= txn.due
                                or budget <= count):
            self._commit()
        return bool(count)

    def _begin(self) -> None:
        self._need(self._producer).begin_transaction(self._declared, self.group_id)
        self._txn = _Txn(self._interval)

    def _process(self, batch: dict[TopicPartition, RecordColumns], count: int) -> None:
        txn = self._need(self._txn)
        if self._batch_fn is not None:
            for output in self._batch_fn([r for c in batch.values() for r in c.records()]):
                self._send(output, None)
        elif self._fn is not None:
            for columns in batch.values():
                for record in columns.records():
                    for output in self._fn(record):
                        self._send(output, record)
        else:
            for columns in batch.values():
                self._copy(columns)
        for tp, columns in batch.items():
            txn.offsets[tp] = columns.next_offset
        txn.records_in += count

    def _copy(self, columns: RecordColumns) -> None:
        """The default transform (key and value as they are), straight from the columns, in one
        ``send_batch``: what :meth:`_send` does for each record, without a record, an output
        or a future per record. (Keyed records go where the partitioner puts them, keyless
        ones fill batches in turn, as ``send()`` would place them.)"""
        txn, producer = self._need(self._txn), self._need(self._producer)
        source = f"{columns.topic}/{columns.partition}/".encode()
        keys = columns.keys
        # send_batch's checks of keys and values; not of the headers, made here: one
        # (str, bytes) pair each, its size bounded below.
        ks, values = producer._checker.many(
            columns.values, None if keys.count(None) == len(keys) else keys)
        headers: list[list[Header]] = [[(SOURCE_HEADER, b"%s%d" % (source, offset))]
                                       for offset in columns.offsets]
        # A record this close to max.request.size may not fit with its header: check exactly.
        room = producer.config.max_request_size - _HEADER_ROOM - len(source)
        if max(map(len, filter(None, values)), default=0) + max(
                map(len, filter(None, ks or ())), default=0) > room:
            producer.send_batch(self.output_topic, values, ks, headers=headers)
        else:
            producer._queue_batch(self.output_topic, None, ks, values, headers)
        txn.records_out += len(headers)

    def _send(self, output: Output, record: ConsumerRecord | None) -> None:
        out = output if isinstance(output, OutputRecord) else OutputRecord(output[1], output[0])
        source = out.source or record
        headers = list(out.headers)
        if source is not None:
            headers.append((SOURCE_HEADER,
                            f"{source.topic}/{source.partition}/{source.offset}".encode()))
        self._need(self._producer).send(self.output_topic, out.value, out.key,
                                        partition=out.partition, headers=headers)
        self._need(self._txn).records_out += 1

    def _commit(self) -> None:
        """Commit the open transaction (if any) with its input offsets.

        Raises:
            AbortableError: the transaction failed; it is still open (call ``_recover``).
            KafkaTimeoutError: the commit did not finish after a few attempts.
        """
        txn, producer, consumer = self._txn, self._need(self._producer), self._need(self._consumer)
        if txn is None:
            return
        if txn.offsets:
            producer.send_offsets_to_transaction(txn.offsets, consumer.group_metadata())
        if not consumer.in_generation():
            # Past the session (a pause, a stall): the group may have handed these partitions
            # to another member, which starts from the offsets committed before. Committing now
            # would write their outputs twice, on a broker that does not check the generation of
            # a TxnOffsetCommit (KIP-447) as Kafka does. Checked by the clock, after the offsets
            # were sent: a process resumed from a pause fails here, not after EndTxn.
            raise AbortableError("the consumer lost its group generation during the transaction "
                                 "(session or poll interval ran out): not committing")
        for attempt in range(1, _COMMIT_ATTEMPTS + 1):
            try:
                producer.commit_transaction()
                break
            except KafkaTimeoutError:  # the same call resumes the same commit
                if attempt == _COMMIT_ATTEMPTS:
                    raise
                log.warning("commit timed out (attempt %d); resuming it", attempt)
        self._txn = None
        self._aborts_in_row = 0
        self._committed.update(txn.offsets)
        self._counter.committed(txn.records_in, txn.records_out)
        log.debug("committed %d in, %d out", txn.records_in, txn.records_out)

    def _recover(self, exc: AbortableError) -> None:
        """Abort the failed transaction and rewind to the committed offsets, after a backoff
        that grows with each abort in a row.

        Raises:
            AbortableError: ``exc``, once ``max_consecutive_aborts`` transactions in a row
                failed (a record the broker always refuses, a topic not authorised: retrying
                cannot help), with a note saying so.
        """
        log.warning("transaction failed, aborting and rewinding: %r", exc)
        self._abort()
        self._aborts_in_row += 1
        if self._max_aborts is not None and self._aborts_in_row >= self._max_aborts:
            exc.add_note(f"ExactlyOnceProcessor gave up: {self._aborts_in_row} transactions in "
                         f"a row were aborted (max_consecutive_aborts)")
            raise exc
        self._rewind_to_committed()
        self._stop.wait(_ABORT_BACKOFF.delay(self._aborts_in_row - 1))

    def _abort(self) -> None:
        if self._txn is not None:  # every transaction begun is tracked, failed ones included
            self._txn = None
            self._need(self._producer).abort_transaction()
            self._counter.aborted()

    def _rewind_to_committed(self) -> None:
        consumer = self._need(self._consumer)
        self._rewind = False
        assigned = consumer.assignment()
        if not assigned:
            return
        for tp, shown in consumer.committed(assigned).items():
            ours = self._committed.get(tp)  # the group may not show it yet (module docstring)
            offset = ours if ours is not None and (shown is None or shown < ours) else shown
            if offset is None:
                consumer.seek_to_beginning([tp])
            else:
                consumer.seek(tp, offset)

    # -- rebalances -----------------------------------------------------------------------------

    def _on_lost(self, partitions: list[TopicPartition]) -> None:
        """The group moved on without this member (its session ran out, e.g. the process was
        paused): the partitions may already be another member's, so the open transaction is
        aborted, never committed, and nothing is handed over."""
        log.warning("partitions lost (the group generation ran out): aborting the open "
                    "transaction; the next owner processes its records")
        for tp in partitions:
            self._committed.pop(tp, None)
        if self._txn is not None:
            self._abort()  # a replacement fenced us: FencedError, and run() ends
        else:
            self._prove_not_replaced()

    def _prove_not_replaced(self) -> None:
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
        producer = self._need(self._producer)
        producer.begin_transaction()
        producer.send(self.output_topic, None, partition=0, headers=[(_PROBE_HEADER, b"")])
        producer.flush()
        producer.abort_transaction()

    def _on_assign(self, partitions: list[TopicPartition]) -> None:
        """Before processing new partitions, let every transaction that was open on the output
        end, then start from the offsets the group shows.

        The previous owner may have lost the partitions involuntarily (paused past its session)
        with a transaction open or just committed. On Kafka, an OffsetFetch with
        ``require_stable`` waits for such a transaction; Tansu ignores ``require_stable`` and
        applies a committed transaction's offsets only once the transactions that wrote earlier
        to its output partitions have ended (the module docstring). Either way, once the output
        partitions' last stable offsets pass their high watermarks of now, every transaction
        that could move these partitions' offsets has ended, and the offsets read then are
        final. The wait is bounded (:meth:`_await_output_settled`).
        """
        if not partitions:
            return
        self._await_output_settled()
        self._rewind_to_committed()

    def _await_output_settled(self) -> None:
        """Wait until the output's LSO reaches its high watermark of now, on every partition,
        for at most the producer's ``transaction.timeout.ms``: a live instance's transaction
        ends by then (the producer enforces it), so only a foreign writer's long transaction
        or a stopped instance's can hold it longer, and then the processor goes on with a
        WARNING (on Kafka and noida-db the offsets are final anyway; on Tansu they may be old).
        """
        consumer, producer = self._need(self._consumer), self._need(self._producer)
        marks = {tp: consumer.high_watermark(tp) for tp in self._outputs or []}
        bound = producer.config.transaction_timeout_ms / 1000
        started = time.monotonic()
        warned = False
        attempt = 0
        while True:
            open_ = [tp.partition for tp, mark in sorted(marks.items())
                     if consumer.last_stable_offset(tp) < mark]
            waited = time.monotonic() - started
            if not open_:
                return
            if waited >= bound:
                log.warning("output %s partitions %s still hold a transaction open after %.0f s "
                            "(transaction.timeout.ms): going on; on a broker that applies "
                            "transactional offsets late (Tansu) records may be processed again",
                            self.output_topic, open_, waited)
                return
            if not warned and waited >= _SETTLE_WARN:
                warned = True
                log.warning("new partitions wait for open transactions on %s partitions %s to "
                            "end (a paused or stopped instance?)", self.output_topic, open_)
            attempt += 1
            if self._stop.wait(_SETTLE_BACKOFF.delay(attempt)):
                return

    def _on_revoke(self, partitions: list[TopicPartition]) -> None:
        """Finish the open transaction before the group takes partitions away, and wait until
        the group shows what was committed for them."""
        if self._txn is not None:
            log.info("partitions revoked: committing the open transaction first")
            try:
                self._commit()
            except AbortableError as exc:
                log.warning("commit before revocation failed, aborting: %r", exc)
                self._abort()
                self._rewind = True  # partitions kept (if any) must go back to committed offsets
        handed = {tp: self._committed.pop(tp) for tp in partitions if tp in self._committed}
        if handed and self._consumer is not None:
            try:
                await_committed(self._consumer, handed, _HANDOFF_TIMEOUT)
            except EosError as exc:  # the group hands them over anyway: say what may follow
                log.error("handing over partitions whose committed offsets the group does not "
                          "show yet; the next owner may process records again: %r", exc)

    # -- lifecycle ------------------------------------------------------------------------------

    def _open(self, idle: float | None) -> None:
        self._started = time.monotonic()
        producer = TransactionalProducer(self.bootstrap_servers,
                                         transactional_id=self.transactional_id,
                                         config=self._producer_config)
        self._producer = producer
        producer.init_transactions(idle)  # fences an older instance, settles what it left open
        self._outputs = self._output_partitions(producer)
        self._declared = self._outputs if self._preregister else None
        consumer = ReadCommittedConsumer(self.bootstrap_servers, group_id=self.group_id,
                                         config=self._consumer_config)
        self._consumer = consumer
        consumer.subscribe(self.input_topics, on_assign=self._on_assign,
                           on_revoke=self._on_revoke, on_lost=self._on_lost)
        log.info("processor %s: %s -> %s, group %s", self.transactional_id,
                 ",".join(self.input_topics), self.output_topic, self.group_id)

    def _output_partitions(self, producer: TransactionalProducer) -> list[TopicPartition] | None:
        # The producer's own connections: a side connection of its own (plaintext) failed
        # against a TLS or SASL listener, after a 10 s stall.
        try:
            return producer.partitions_for(self.output_topic)
        except EosError as exc:  # not known: the producer adds partitions as it sends
            log.warning("output partitions unknown (%r): not pre-registered", exc)
            return None

    def _abort_quietly(self) -> None:
        try:
            self._abort()
        except EosError as exc:  # the original error is what the caller needs
            log.warning("abort after a failure failed too: %r", exc)

    def _close(self) -> None:
        consumer, producer = self._consumer, self._producer
        self._txn = None
        try:
            if consumer is not None:  # on_revoke: no transaction to commit, offsets to await
                consumer.close()
        finally:
            self._consumer = self._producer = None
            self._committed.clear()
            if producer is not None:
                producer.close()

    @staticmethod
    def _need(value: _T | None) -> _T:
        if value is None:
            raise RuntimeError("the processor is not running")
        return value
