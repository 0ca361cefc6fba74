"""The cluster nemesis's front targets: a read_committed consumer, and ExactlyOnceProcessor
workers, through a :class:`~eosclient.testing.cluster_front.ClusterFront` over a real broker
while a seeded schedule moves leaders and coordinators and bounces nodes.

Theory of operation. The schedule is :func:`eosclient.testing.cluster_nemesis.make_schedule`'s
with ``target="consumer"`` or ``"processor"``: a fault every 0.3-1.2 s, one of a partition's
leader moving to another node (partition p of every topic of the run), the coordinator of the
transactional ids or of the consumer group moving to another node, or one node down for
0.5-2.5 s (one at a time; moves only to nodes that are up). It is played by the same
``_Nemesis`` thread as the producer target's, on the front instead of the mock.

The writer is the producer target's application loop (``_Loop``), through the front too:
transactions of 20 records (record i to partition i % 6, value ``b"txn/record"``) into a
6-partition input topic, one every :data:`PACE` seconds, every other one aborted after its
sends. Its own verdict is the producer target's (:func:`~eosclient.testing.cluster_nemesis.judge`
on the input's log, read raw from the broker and decided by the markers), so a run also checks
the producer through the front.

* ``consumer``: one consumer (``ReadCommittedConsumer``, or ``AsyncReadCommittedConsumer`` on
  an event loop of its own thread) in a group (``subscribe``) polls and commits after every
  poll that returned records. It must read exactly the committed records of the log (decided
  by the markers, not by the consumer's code): none lost, none twice, none of an aborted
  transaction, in offset order per partition (:func:`judge_reads`). Liveness: every committed
  transaction read within :data:`READ_LAG_LIMIT` seconds of its commit returning, no poll call
  longer than :data:`POLL_LIMIT`, and no consumer re-created (a fatal error).
* ``processor``: :data:`WORKERS` workers (threads; each its own transactional id and
  ``group.instance.id``, one group; ``AsyncExactlyOnceProcessor`` on an event loop per worker
  with ``asyncio``) copy input to output. :mod:`eosclient.testing.checker` must count 0 lost,
  duplicated, aborted-read, unexpected and out of order; the group's committed offsets must
  reach the end of every input partition within :data:`DRAIN` seconds of the faults' end;
  no ``commit_transaction()`` of a worker may take longer than
  :data:`~eosclient.testing.cluster_nemesis.SLOWEST_COMMIT_LIMIT` (each call is timed: the
  producer classes' method is wrapped for the run); no worker's ``run()`` may raise (the
  worker makes a new processor, counted as re-created) or fail to return within
  :data:`STOP_LIMIT` seconds of ``stop()`` (wedged).

Both start with a warm-up: the writer's first transaction commits before the faults start,
and the consumer must have read it (or the group committed it) within :data:`WARMUP` seconds,
so a join (Tansu holds each for about half the session timeout) is not taken for a stall.

Evidence: the DEBUG lines of every ``eosclient`` logger (the front's moves and refusals
included) on the schedule's clock, printed around the worst window (the slowest read or
commit, or a wedge) with the schedule as drawn and as played, and the replay command.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, TypeVar

from eosclient._core.types import TopicPartition
from eosclient.aio import AsyncExactlyOnceProcessor, AsyncReadCommittedConsumer
from eosclient.aio.producer import AsyncTransactionalProducer
from eosclient.consumer import ConsumerRecord, ReadCommittedConsumer
from eosclient.errors import AbortableError, EosError, KafkaTimeoutError, RetriableError
from eosclient.processor import ExactlyOnceProcessor
from eosclient.producer import TransactionalProducer
from eosclient.testing import cluster_nemesis as cn
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import KINDS, CheckReport, check
from eosclient.testing.cluster_front import ClusterFront
from eosclient.testing.marker_log import PartitionLog, decide, read_logs
from eosclient.testing.topics import create_topic

__all__ = ["DRAIN", "FRONT_TARGETS", "POLL_LIMIT", "READ_LAG_LIMIT", "FrontNemesisResult",
           "ReadCounts", "format_table", "judge_reads", "run_front_nemesis"]

log = logging.getLogger("eosclient.testing.cluster_nemesis")
_T = TypeVar("_T")

FrontTarget = Literal["consumer", "processor"]
FRONT_TARGETS: Final[tuple[FrontTarget, ...]] = ("consumer", "processor")
PACE: Final = 0.1  # seconds the writer waits after each transaction
WORKERS: Final = 3
READ_LAG_LIMIT: Final = 15.0  # from a commit returning to its last record read
POLL_LIMIT: Final = 10.0  # one poll(0.2) call
STOP_LIMIT: Final = 60.0  # from stop() to run() returning
WARMUP: Final = {"noida": 20.0, "tansu": 60.0}
DRAIN: Final = {"noida": 45.0, "tansu": 120.0}
_POLL: Final = 0.2
_COMMIT_TIMEOUT: Final = 10.0
_LINGER: Final = 0.5  # the reader polls this long past the last committed record, for strays
_READ_TIMEOUT: Final = 60.0
_CAPTURED: Final = ("eosclient",)
_GROUP_CONFIG: Final = {"session.timeout.ms": 6_000, "heartbeat.interval.ms": 500,
                        "fetch.max.wait.ms": 100}
_PRODUCER_CONFIG: Final = {"request.timeout.ms": 2000, "retry.backoff.ms": 20}
_REFUSALS: Final = {6: "NOT_LEADER_OR_FOLLOWER", 16: "NOT_COORDINATOR"}


# -- the cluster: the front --------------------------------------------------------------------

class _Front:
    """A schedule's faults on a front: leaders of every topic of the run, the coordinators of
    every transactional id (``"transaction"``) or of the group."""

    def __init__(self, front: ClusterFront, topics: Sequence[str], txn_ids: Sequence[str],
                 group: str) -> None:
        self._front, self._topics, self._txn_ids, self._group = front, topics, txn_ids, group
        for txn_id in txn_ids:  # where the schedule starts them
            front.move_coordinator("transaction", txn_id, 1)
        front.move_coordinator("group", group, 1)

    def leader(self, partition: int, broker: int) -> None:
        for topic in self._topics:
            self._front.move_leader(topic, partition, broker)

    def coordinator(self, key: cn.CoordinatorKey, broker: int) -> None:
        for txn_id in self._txn_ids if key == "transaction" else ():
            self._front.move_coordinator("transaction", txn_id, broker)
        if key == "group":
            self._front.move_coordinator("group", self._group, broker)

    def down(self, broker: int) -> None:
        self._front.set_node_down(broker)

    def up(self, broker: int) -> None:
        self._front.set_node_up(broker)

    def error(self, api: int, code: int) -> None:
        raise ValueError("the front targets push no errors")


# -- the consumer's reads and their verdict ----------------------------------------------------

@dataclass
class ReadCounts:
    """What the consumer read against what the log committed (the consumer target's verdict)."""

    committed: int = 0  # committed records in the log
    read: int = 0  # records the consumer returned, repeats included
    lost: int = 0
    duplicated: int = 0
    aborted_read: int = 0
    out_of_order: int = 0
    unexpected: int = 0
    unread: int = 0  # log offsets below a high watermark the raw read never reached
    examples: list[str] = field(default_factory=list)

    def bad(self) -> dict[str, int]:
        """The non-zero counts that fail a run."""
        kinds = ("lost", "duplicated", "aborted_read", "out_of_order", "unexpected", "unread")
        return {k: getattr(self, k) for k in kinds if getattr(self, k)}


def judge_reads(reads: Mapping[int, Sequence[tuple[int, bytes]]],
                logs: Mapping[int, PartitionLog], *, topic: str = "input") -> ReadCounts:
    """Compare what a consumer returned (partition -> ``(offset, value)`` in the order
    returned) with the log (partition -> what was read of it raw), each record decided by its
    producer's markers. Pure: no broker.

    A record returned twice is ``duplicated`` (and not also out of order); one of an aborted
    transaction, or of one with no marker after it, is ``aborted_read``; one at an offset the
    log has no such record at is ``unexpected``; one below an offset returned before it is
    ``out_of_order``; a committed record never returned is ``lost``.
    """
    counts = ReadCounts()

    def example(text: str) -> None:
        if len(counts.examples) < 20:
            counts.examples.append(text)

    for partition, raw in sorted(logs.items()):
        if not raw.complete:
            counts.unread += raw.end_offset - raw.read_to
            example(f"unread: {topic}-{partition} read raw to {raw.read_to} of {raw.end_offset}")
        decided = decide(raw.batches)
        committed = dict(decided.committed)
        not_committed = dict(decided.aborted + decided.open)
        counts.committed += len(committed)
        seen: set[int] = set()
        matched: set[int] = set()  # offsets read with the log's committed value
        last = -1
        for offset, value in reads.get(partition, ()):
            counts.read += 1
            where = f"{topic}-{partition}@{offset} {value.decode(errors='replace')!r}"
            if offset in seen:
                counts.duplicated += 1
                example(f"duplicated: {where}")
                continue
            seen.add(offset)
            if offset in not_committed:
                counts.aborted_read += 1
                example(f"aborted-read: {where}")
            elif committed.get(offset) != value:
                counts.unexpected += 1
                example(f"unexpected: {where} (the log: {committed.get(offset)!r})")
            else:
                matched.add(offset)
            if offset < last:
                counts.out_of_order += 1
                example(f"out-of-order: {where} after offset {last}")
            last = max(last, offset)
        missing = sorted(set(committed) - matched)
        counts.lost += len(missing)
        if missing:
            example(f"lost: {topic}-{partition} offsets {_ranges(missing)} committed, not read")
    for partition in sorted(set(reads) - set(logs)):
        counts.unexpected += len(reads[partition])
        example(f"unexpected: {len(reads[partition])} records read from {topic}-{partition}")
    return counts


def _ranges(offsets: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` as ``"1-3, 7"`` (at most 8 runs)."""
    runs: list[list[int]] = []
    for o in offsets:
        if runs and o == runs[-1][1] + 1:
            runs[-1][1] = o
        else:
            runs.append([o, o])
    text = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in runs[:8])
    return text + (f", ... ({len(runs)} runs)" if len(runs) > 8 else "")


@dataclass
class _Reads:
    """What the reader thread saw, on the schedule's clock."""

    clock: float = field(default_factory=time.monotonic)
    records: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    first_read: dict[bytes, float] = field(default_factory=dict)  # value -> first returned
    longest_poll: float = 0.0
    longest_poll_at: float = 0.0
    polls: int = 0
    commits: int = 0
    failures: list[str] = field(default_factory=list)
    recreated: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def polled(self, started: float, records: Sequence[ConsumerRecord]) -> None:
        now = time.monotonic()
        with self.lock:
            self.polls += 1
            if now - started > self.longest_poll:
                self.longest_poll, self.longest_poll_at = now - started, started - self.clock
            for r in records:
                value = r.value or b""
                self.records.setdefault(r.partition, []).append((r.offset, value))
                self.first_read.setdefault(value, now - self.clock)

    def failed(self, what: str, exc: BaseException) -> None:
        line = f"t={time.monotonic() - self.clock:.2f}s {what}: {exc!r}"
        log.info("cluster nemesis reader: %s", line)
        with self.lock:
            if len(self.failures) < 200:
                self.failures.append(line)

    def read_to(self) -> dict[int, int]:
        """Partition -> the highest offset returned (-1: none)."""
        with self.lock:
            return {p: max((o for o, _ in rs), default=-1) for p, rs in self.records.items()}


class _Consumer(Protocol):
    """The reader's view of a consumer, sync or asyncio."""

    def poll(self, timeout: float) -> list[ConsumerRecord]: ...
    def commit(self, timeout: float) -> None: ...
    def close(self) -> None: ...


class _SyncConsumer:
    def __init__(self, servers: str, topic: str, group: str) -> None:
        self._c = ReadCommittedConsumer(servers, group_id=group, auto_offset_reset="earliest",
                                        config=_GROUP_CONFIG)
        self._c.subscribe([topic])

    def poll(self, timeout: float) -> list[ConsumerRecord]:
        return self._c.poll(timeout)

    def commit(self, timeout: float) -> None:
        self._c.commit(timeout=timeout)

    def close(self) -> None:
        self._c.close(5)


class _EventLoop:
    """An event loop running in a thread of its own; :meth:`call` awaits a coroutine there
    from any other thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Awaitable[_T]) -> _T:
        async def wrapped() -> _T:
            return await coro
        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class _AsyncConsumer:
    """``AsyncReadCommittedConsumer`` on an event loop of its own thread, awaited from the
    reader's: the same reader drives both fronts."""

    def __init__(self, servers: str, topic: str, group: str) -> None:
        self._loop = _EventLoop("cluster-nemesis-aio-consumer")

        async def make() -> AsyncReadCommittedConsumer:
            c = AsyncReadCommittedConsumer(servers, group_id=group,
                                           auto_offset_reset="earliest", config=_GROUP_CONFIG)
            await c.start()
            c.subscribe([topic])
            return c

        try:
            self._c = self._loop.call(make())
        except BaseException:
            self._loop.close()
            raise

    def poll(self, timeout: float) -> list[ConsumerRecord]:
        return self._loop.call(self._c.poll(timeout))

    def commit(self, timeout: float) -> None:
        self._loop.call(self._c.commit(timeout=timeout))

    def close(self) -> None:
        try:
            self._loop.call(self._c.close(5))
        finally:
            self._loop.close()


class _Reader(threading.Thread):
    """Polls one consumer until :meth:`stop`, committing after every poll that returned
    records; a retriable or abortable error is noted and the loop goes on, any other error
    closes the consumer and makes a new one (counted: a failure of the run)."""

    def __init__(self, make: Callable[[], _Consumer], reads: _Reads) -> None:
        super().__init__(name="cluster-nemesis-reader", daemon=True)
        self._make, self.reads = make, reads
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            consumer = self._make()
        except BaseException as exc:  # the run reports it
            self.error = exc
            return
        try:
            while not self._halt.is_set():
                consumer = self._turn(consumer)
        except BaseException as exc:
            self.error = exc
        finally:
            with contextlib.suppress(Exception):
                consumer.close()

    def _turn(self, consumer: _Consumer) -> _Consumer:
        reads = self.reads
        started = time.monotonic()
        try:
            records = consumer.poll(_POLL)
        except (RetriableError, AbortableError) as exc:
            reads.polled(started, [])
            reads.failed("poll() raised", exc)
            return consumer
        except EosError as exc:
            reads.polled(started, [])
            return self._recreate(consumer, "poll() raised", exc)
        reads.polled(started, records)
        if not records:
            return consumer
        try:
            consumer.commit(_COMMIT_TIMEOUT)
            reads.commits += 1
        except (RetriableError, AbortableError) as exc:  # the next poll's commit covers it
            reads.failed("commit() raised", exc)
        except EosError as exc:
            return self._recreate(consumer, "commit() raised", exc)
        return consumer

    def _recreate(self, consumer: _Consumer, what: str, exc: EosError) -> _Consumer:
        self.reads.failed(what + " (the consumer is re-created)", exc)
        with contextlib.suppress(Exception):
            consumer.close()
        self.reads.recreated += 1
        return self._make()

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


# -- the processor's workers -------------------------------------------------------------------

class _CommitTimer:
    """Times every ``commit_transaction()`` of the given transactional ids, sync and asyncio,
    by wrapping the producer classes' method while it is entered (a timed-out call that is
    called again counts from the first call: the processor resumes a commit that way)."""

    def __init__(self, txn_ids: Sequence[str], clock: Callable[[], float]) -> None:
        self._ids = frozenset(txn_ids)
        self._clock = clock
        self._pending: dict[str, float] = {}
        self.slowest = 0.0
        self.slowest_at = 0.0  # schedule clock, when it began
        self.slowest_id = ""
        self.commits = 0
        self._lock = threading.Lock()
        self._saved: list[tuple[type, Any]] = []

    def _began(self, txn_id: str) -> None:
        with self._lock:
            self._pending.setdefault(txn_id, self._clock())

    def _ended(self, txn_id: str, exc: BaseException | None) -> None:
        if isinstance(exc, KafkaTimeoutError):
            return  # called again: the same commit goes on
        with self._lock:
            began = self._pending.pop(txn_id, None)
            if began is None:
                return
            self.commits += exc is None
            seconds = self._clock() - began
            if seconds > self.slowest:
                self.slowest, self.slowest_at, self.slowest_id = seconds, began, txn_id

    def __enter__(self) -> _CommitTimer:
        timer = self
        sync = TransactionalProducer.commit_transaction
        aio = AsyncTransactionalProducer.commit_transaction

        @functools.wraps(sync)
        def commit(producer: TransactionalProducer, timeout: float | None = None) -> None:
            txn_id = producer.config.transactional_id or ""
            if txn_id not in timer._ids:
                return sync(producer, timeout)
            timer._began(txn_id)
            try:
                sync(producer, timeout)
            except BaseException as exc:
                timer._ended(txn_id, exc)
                raise
            timer._ended(txn_id, None)
            return None

        @functools.wraps(aio)
        async def acommit(producer: AsyncTransactionalProducer,
                          timeout: float | None = None) -> None:
            txn_id = producer.config.transactional_id or ""
            if txn_id not in timer._ids:
                return await aio(producer, timeout)
            timer._began(txn_id)
            try:
                await aio(producer, timeout)
            except BaseException as exc:
                timer._ended(txn_id, exc)
                raise
            timer._ended(txn_id, None)
            return None

        self._saved = [(TransactionalProducer, sync), (AsyncTransactionalProducer, aio)]
        setattr(TransactionalProducer, "commit_transaction", commit)  # noqa: B010
        setattr(AsyncTransactionalProducer, "commit_transaction", acommit)  # noqa: B010
        return self

    def __exit__(self, *exc_info: object) -> None:
        for cls, method in self._saved:
            setattr(cls, "commit_transaction", method)  # noqa: B010


class _Worker(threading.Thread):
    """Runs processors of one transactional id until :meth:`stop`; one whose ``run()``
    raises is replaced by a new one, as a supervisor would (counted: a failure of the run)."""

    def __init__(self, name: str, make: Callable[[], ExactlyOnceProcessor |
                                                AsyncExactlyOnceProcessor]) -> None:
        super().__init__(name=f"cluster-nemesis-{name}", daemon=True)
        self.slot = name
        self._make = make
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._current: ExactlyOnceProcessor | AsyncExactlyOnceProcessor | None = None
        self.failures: list[str] = []
        self.recreated = 0
        self.committed = 0  # transactions, over its processors

    def run(self) -> None:
        while not self._halt.is_set():
            processor = self._make()
            with self._lock:
                if self._halt.is_set():
                    return
                self._current = processor
            try:
                if isinstance(processor, AsyncExactlyOnceProcessor):
                    asyncio.run(processor.run())
                else:
                    processor.run()
                if not self._halt.is_set():
                    raise RuntimeError("run() returned before stop()")
            except Exception as exc:  # a supervisor's view: note it, make a new one
                log.info("cluster nemesis %s: run() raised %r", self.slot, exc)
                self.failures.append(f"{self.slot}: run() raised {exc!r}")
                if not self._halt.is_set():
                    self.recreated += 1
            finally:
                self.committed += processor.stats.transactions_committed

    def stop(self, timeout: float) -> bool:
        """Ask the processor to stop; False if ``run()`` had not returned within ``timeout``."""
        self._halt.set()
        with self._lock:
            if self._current is not None:
                self._current.stop()
        self.join(timeout)
        return not self.is_alive()


# -- what a run records ------------------------------------------------------------------------

@dataclass
class FrontNemesisResult:
    """What one front run did and found (see :meth:`problems`).

    ``feed`` is the writer's run as the producer target records it: its transactions, wedges,
    the verdict on the input's log, the schedule as played and the captured log lines.
    """

    target: FrontTarget
    broker: str
    asyncio: bool
    feed: cn.ClusterNemesisResult
    input_topic: str = ""
    output_topic: str = ""
    reads: ReadCounts | None = None  # consumer
    report: CheckReport | None = None  # processor
    records_read: int = 0  # consumer: records returned; processor: input records committed
    slowest_read: float = 0.0  # consumer: from a commit returning to its last record read
    slowest_read_at: float = 0.0
    longest_poll: float = 0.0
    longest_poll_at: float = 0.0
    slowest_commit: float = 0.0  # processor: one commit_transaction(), schedule clock
    slowest_commit_at: float = 0.0
    slowest_commit_id: str = ""
    recreated: int = 0  # consumers or processors made after a failure
    failures: list[str] = field(default_factory=list)  # what the clients raised, noted
    liveness: list[str] = field(default_factory=list)
    refusals: dict[str, int] = field(default_factory=dict)  # the front's, by error
    error: str = ""
    seconds: float = 0.0

    @property
    def schedule(self) -> cn.Schedule:
        return self.feed.schedule

    @property
    def seed(self) -> int:
        return self.feed.seed

    def problems(self) -> list[str]:
        """Everything wrong with the run (empty: it passed)."""
        found = [f"run failed: {self.error}"] if self.error else []
        found += [f"writer: {p}" for p in self.feed.problems() if not p.startswith("run failed")]
        if self.target == "consumer":
            if self.reads is None:
                found.append("the reads were not judged")
            else:
                found += [f"{k.replace('_', '-')}: {n}" for k, n in self.reads.bad().items()]
            if self.slowest_read > READ_LAG_LIMIT:
                found.append(f"slowest read {self.slowest_read:.1f} s > {READ_LAG_LIMIT:g} s "
                             f"(a transaction committed at t={self.slowest_read_at:.1f}s)")
            if self.longest_poll > POLL_LIMIT:
                found.append(f"a poll took {self.longest_poll:.1f} s > {POLL_LIMIT:g} s "
                             f"(t={self.longest_poll_at:.1f}s)")
        else:
            if self.report is None:
                found.append("the checker did not run")
            else:
                found += [f"{k.replace('_', '-')}: {getattr(self.report.totals, k)}"
                          for k in KINDS if getattr(self.report.totals, k)]
            if self.slowest_commit > cn.SLOWEST_COMMIT_LIMIT:
                found.append(f"slowest commit {self.slowest_commit:.1f} s > "
                             f"{cn.SLOWEST_COMMIT_LIMIT:g} s ({self.slowest_commit_id}, began "
                             f"t={self.slowest_commit_at:.1f}s)")
        if self.recreated:
            found.append(f"re-created: {self.recreated} (" + "; ".join(self.failures[-3:]) + ")")
        return found + [f"liveness: {p}" for p in self.liveness]

    def window(self) -> tuple[float, float] | None:
        """The schedule-clock window worth evidence: the first wedge of the writer, else the
        slowest read or commit."""
        stall = self.feed.stall()
        if stall is not None:
            return stall
        if self.target == "consumer":
            return (self.slowest_read_at, self.slowest_read_at + self.slowest_read) \
                if self.slowest_read else None
        return (self.slowest_commit_at, self.slowest_commit_at + self.slowest_commit) \
            if self.slowest_commit else None

    def replay(self) -> str:
        """The command that replays this run's schedule."""
        return (f"python -m eosclient.testing.cluster_nemesis --target {self.target} "
                f"--broker {self.broker} --seeds {self.seed} "
                f"--duration {self.schedule.duration:g}" + (" --asyncio" if self.asyncio else ""))

    def summary(self, *, max_log_lines: int = 200) -> str:
        """Seed, verdict, problems, examples, the schedule as drawn and played, the log around
        the worst window and the replay command."""
        problems = self.problems()
        front = "asyncio" if self.asyncio else "sync"
        lines = [f"cluster nemesis, {self.target} ({front}) on {self.broker}, seed {self.seed}: "
                 + ("OK" if not problems else "PROBLEMS"), *(f"  {p}" for p in problems)]
        examples = [*(self.reads.examples if self.reads is not None else []),
                    *(self.feed.counts.examples if self.feed.counts is not None else [])]
        if self.report is not None and not self.report.ok:
            examples.append(str(self.report))
        if examples:
            lines += ["examples:", *(f"  {e}" for e in examples)]
        if self.failures:
            lines += ["client errors noted:", *(f"  {f}" for f in self.failures[-20:])]
        lines += [str(self.schedule), "as played:", *(f"  {e}" for e in self.feed.events)]
        if self.refusals:
            lines.append("the front refused: " + ", ".join(
                f"{n} {code}" for code, n in self.refusals.items()))
        window = self.window()
        if window is not None and (problems or max_log_lines):
            lines += self.feed.evidence(window, max_log_lines)
        lines.append(f"replay: {self.replay()}")
        return "\n".join(lines)


# -- the run -----------------------------------------------------------------------------------

def run_front_nemesis(target: FrontTarget, broker: RunningBroker, *, seed: int = 1,
                      duration: float = 30.0, schedule: cn.Schedule | None = None,
                      asyncio: bool = False, workers: int = WORKERS) -> FrontNemesisResult:
    """One run of ``target`` through a fresh front over ``broker`` (shared is fine: the run's
    topics, group and ids are its own) under ``seed``'s schedule (or ``schedule``).

    Args:
        target: ``"consumer"`` or ``"processor"``.
        broker: The broker.
        seed: Draws the schedule unless ``schedule`` is given.
        duration: Seconds of the writer and the faults.
        schedule: Play this schedule (drawn for a front target) instead of drawing one.
        asyncio: eosclient.aio's consumer or processor instead of the sync one.
        workers: The processor target's workers.

    Returns:
        The result; a run that could not be played or judged has ``error`` set.

    Raises:
        ValueError: an unknown ``target``, or a schedule drawn for another kind of target.
    """
    if target not in FRONT_TARGETS:
        raise ValueError(f"target must be one of {', '.join(FRONT_TARGETS)}, not {target!r}")
    schedule = schedule or cn.make_schedule(seed, duration=duration, target=target)
    if schedule.target == "producer":
        raise ValueError("a producer schedule pushes errors the front cannot: draw one with "
                         "target='consumer' or 'processor'")
    started = time.monotonic()
    tag = f"cn-{target}-{schedule.seed}-{uuid.uuid4().hex[:8]}"
    feed = cn.ClusterNemesisResult("eosclient", schedule)
    result = FrontNemesisResult(target, broker.kind, asyncio, feed)
    result.input_topic = create_topic(broker, f"{tag}-in", cn.PARTITIONS)
    if target == "processor":
        result.output_topic = create_topic(broker, f"{tag}-out", cn.PARTITIONS)
    run = _FrontRun(result, broker, tag, workers)
    with ClusterFront(broker.host, broker.port) as front, \
            cn._Capture(_CAPTURED) as capture:
        try:
            run.play(front, capture)
        except (cn._Retry, cn._Abort, cn._Fatal) as exc:
            result.error = f"the writer's init_transactions(): {exc}"
        except Exception as exc:  # a harness or client bug: the table still gets its row
            log.exception("the %s run of seed %d failed", target, schedule.seed)
            result.error = result.error or f"the run raised {exc!r}"
        finally:
            feed.log_lines = list(capture.lines)
            result.refusals = {f"{_REFUSALS.get(code, code)}": n for code, n in sorted(
                Counter(r.refused for r in front.seen if r.refused is not None).items())}
    result.seconds = round(time.monotonic() - started, 1)
    return result


class _FrontRun:
    """One run in progress (see the module docstring)."""

    def __init__(self, result: FrontNemesisResult, broker: RunningBroker, tag: str,
                 workers: int) -> None:
        self.result, self.broker, self.tag = result, broker, tag
        self.group = f"{tag}-group"
        self.feed_id = f"{tag}-feed"
        self.worker_ids = [f"{tag}-w{n}" for n in range(workers)] \
            if result.target == "processor" else []
        self.topics = [t for t in (result.input_topic, result.output_topic) if t]

    def play(self, front: ClusterFront, capture: cn._Capture) -> None:
        result, feed, schedule = self.result, self.result.feed, self.result.schedule
        cluster = _Front(front, self.topics, [self.feed_id, *self.worker_ids], self.group)
        servers = front.bootstrap_servers
        loop = cn._Loop(feed, lambda: cn._EosClient(servers, topic=result.input_topic,
                                                    transactional_id=self.feed_id),
                        schedule.duration, pace=PACE, abort_every=2)
        nemesis: cn._Nemesis | None = None
        try:
            loop.init()
            capture.clock = loop.clock = time.monotonic()
            with self._target(servers) as target:
                first = cn.Txn(0, 0.0)
                feed.txns.append(first)
                loop.transaction(first)
                if not target.warm(WARMUP.get(self.broker.kind, 60.0)):
                    result.liveness.append(f"the first transaction was not "
                                           f"{target.done_word} within "
                                           f"{WARMUP.get(self.broker.kind, 60.0):g} s")
                    return
                _restamp(capture, time.monotonic())
                loop.clock = capture.clock
                target.clock(loop.clock)
                nemesis = cn._Nemesis(cluster, schedule, loop.clock, feed.events)
                nemesis.start()
                loop.run()
                feed.loop_seconds = round(loop.now(), 3)
                nemesis.stop()
                loop.client.close(cn._CLOSE_TIMEOUT)
                logs = _read_raw(self.broker.bootstrap_servers, result.input_topic)
                feed.counts = cn.judge(feed.txns, logs, topic=result.input_topic)
                target.finish(logs)
        finally:
            if nemesis is not None:
                nemesis.stop()
                if nemesis.error is not None:
                    result.error = result.error or f"the nemesis failed: {nemesis.error!r}"
            loop.client.close(cn._CLOSE_TIMEOUT)

    @contextlib.contextmanager
    def _target(self, servers: str) -> Iterator[_Target]:
        target: _Target = (_ConsumerTarget(self, servers) if self.result.target == "consumer"
                           else _ProcessorTarget(self, servers))
        try:
            yield target
        finally:
            target.close()


def _read_raw(servers: str, topic: str) -> dict[int, PartitionLog]:
    """Every partition of ``topic`` read whole and raw, straight from the broker; partitions
    left short are read again (Tansu once answered a Fetch from offset 0 with no records for
    one partition of six, its high watermark at 248, and read_logs takes an empty answer as
    the end)."""
    deadline = time.monotonic() + _READ_TIMEOUT
    logs = read_logs(servers, topic, range(cn.PARTITIONS), timeout=_READ_TIMEOUT)
    while short := [p for p, raw in logs.items() if not raw.complete]:
        if time.monotonic() > deadline:
            break
        log.info("cluster nemesis: %s partitions %s read short; reading them again", topic,
                 short)
        time.sleep(0.2)
        logs.update(read_logs(servers, topic, short,
                              timeout=max(1.0, deadline - time.monotonic())))
    return logs


def _restamp(capture: cn._Capture, clock: float) -> None:
    """Move ``capture`` to the schedule's clock, ``clock``: the warm-up's lines kept so far
    get negative times, on that clock too."""
    shift = clock - capture.clock
    old, capture.lines = capture.lines, deque(maxlen=capture.lines.maxlen)
    capture.clock = clock
    restamped = []
    for line in old:
        stamp, _, rest = line.partition("s ")
        restamped.append(f"t={float(stamp.removeprefix('t=')) - shift:.3f}s {rest}")
    capture.lines.extendleft(reversed(restamped))


class _Target(Protocol):
    done_word: str

    def warm(self, seconds: float) -> bool: ...
    def clock(self, clock: float) -> None: ...
    def finish(self, logs: Mapping[int, PartitionLog]) -> None: ...
    def close(self) -> None: ...


def _committed_ends(logs: Mapping[int, PartitionLog]) -> dict[int, int]:
    """Partition -> the offset after its last committed record (0: none)."""
    ends = {}
    for p, raw in logs.items():
        committed = decide(raw.batches).committed
        ends[p] = committed[-1][0] + 1 if committed else 0
    return ends


def _wait(done: Callable[[], bool], seconds: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


class _ConsumerTarget:
    done_word = "read"

    def __init__(self, run: _FrontRun, servers: str) -> None:
        self.run = run
        topic, group = run.result.input_topic, run.group
        make: Callable[[], _Consumer] = (
            (lambda: _AsyncConsumer(servers, topic, group)) if run.result.asyncio
            else (lambda: _SyncConsumer(servers, topic, group)))
        self.reads = _Reads()
        self.reader = _Reader(make, self.reads)
        self.reader.start()

    def warm(self, seconds: float) -> bool:
        first = [cn.value_of(0, i) for i in range(cn.RECORDS_PER_TRANSACTION)]
        return _wait(lambda: all(v in self.reads.first_read for v in first)
                     or self.reader.error is not None, seconds)

    def clock(self, clock: float) -> None:
        with self.reads.lock:
            self.reads.clock = clock
            self.reads.longest_poll = 0.0  # the warm-up's join is not a stall

    def finish(self, logs: Mapping[int, PartitionLog]) -> None:
        result, reads = self.run.result, self.reads
        ends = _committed_ends(logs)
        drain = DRAIN.get(self.run.broker.kind, 60.0)

        def read_all() -> bool:
            got = reads.read_to()
            return all(got.get(p, -1) >= end - 1 for p, end in ends.items() if end) \
                or not self.reader.is_alive()

        if not _wait(read_all, drain):
            result.liveness.append(f"the committed records were not all read within "
                                   f"{drain:g} s of the writer's end")
        time.sleep(_LINGER)
        self.reader.stop()
        if self.reader.error is not None:
            result.error = result.error or f"the reader failed: {self.reader.error!r}"
        with reads.lock:
            records = {p: list(rs) for p, rs in reads.records.items()}
            first_read = dict(reads.first_read)
        result.reads = judge_reads(records, logs, topic=result.input_topic)
        result.records_read = result.reads.read
        result.longest_poll = round(reads.longest_poll, 3)
        result.longest_poll_at = round(reads.longest_poll_at, 2)
        result.recreated, result.failures = reads.recreated, list(reads.failures)
        for txn in result.feed.txns:
            if txn.outcome != "committed" or txn.ended is None or txn.n == 0:
                continue
            times = [first_read.get(cn.value_of(txn.n, i)) for i in range(txn.sent)]
            if any(t is None for t in times):
                continue  # lost: counted by the verdict
            lag = max(t for t in times if t is not None) - txn.ended
            if lag > result.slowest_read:
                result.slowest_read, result.slowest_read_at = round(lag, 3), txn.ended

    def close(self) -> None:
        if self.reader.is_alive():
            self.reader.stop()


class _ProcessorTarget:
    done_word = "copied"

    def __init__(self, run: _FrontRun, servers: str) -> None:
        self.run = run
        self._clock = time.monotonic()
        # The group's committed offsets, read past the front, straight from the broker.
        self.monitor = ReadCommittedConsumer(run.broker.bootstrap_servers, group_id=run.group)
        self.tps = [TopicPartition(run.result.input_topic, p) for p in range(cn.PARTITIONS)]
        self.workers = [_Worker(f"w{n}", functools.partial(self._processor, servers, txn_id))
                        for n, txn_id in enumerate(run.worker_ids)]
        self.timer = _CommitTimer(run.worker_ids, self._now).__enter__()
        for worker in self.workers:
            worker.start()

    def _now(self) -> float:
        return time.monotonic() - self._clock

    def _processor(self, servers: str, txn_id: str,
                   ) -> ExactlyOnceProcessor | AsyncExactlyOnceProcessor:
        run = self.run
        kind = AsyncExactlyOnceProcessor if run.result.asyncio else ExactlyOnceProcessor
        return kind(bootstrap_servers=servers, input_topics=[run.result.input_topic],
                    output_topic=run.result.output_topic, group_id=run.group,
                    transactional_id=txn_id, max_records_per_transaction=200,
                    commit_interval_ms=100, producer_config=_PRODUCER_CONFIG,
                    consumer_config=_GROUP_CONFIG)

    def committed(self) -> dict[int, int]:
        try:
            found = self.monitor.committed(self.tps, 5.0)
        except EosError as exc:
            log.debug("committed offsets not read: %r", exc)
            return {}
        return {tp.partition: offset or 0 for tp, offset in found.items()}

    def warm(self, seconds: float) -> bool:
        """Every input partition committed past the first transaction's records: the group
        is formed and each of its partitions has been copied once."""
        return _wait(lambda: len([o for o in self.committed().values() if o > 0]) ==
                     cn.PARTITIONS, seconds, 0.3)

    def clock(self, clock: float) -> None:
        self._clock = clock
        self.timer.slowest = 0.0  # the warm-up's commits are not the schedule's

    def finish(self, logs: Mapping[int, PartitionLog]) -> None:
        result = self.run.result
        ends = _committed_ends(logs)
        drain = DRAIN.get(self.run.broker.kind, 60.0)
        short: dict[int, int] = {}

        def drained() -> bool:
            committed = self.committed()
            short.clear()
            short.update({p: end - committed.get(p, 0) for p, end in ends.items()
                          if committed.get(p, 0) < end})
            return not short

        if not _wait(drained, drain, 0.3):
            result.liveness.append(f"the group's committed offsets did not reach the input's "
                                   f"end within {drain:g} s of the writer's end: short "
                                   f"{short} (partition: offsets)")
        self._stop_workers()
        result.slowest_commit = round(self.timer.slowest, 3)
        result.slowest_commit_at = round(self.timer.slowest_at, 2)
        result.slowest_commit_id = self.timer.slowest_id.rsplit("-", 1)[-1]
        result.report = check(self.run.broker.bootstrap_servers, result.input_topic,
                              result.output_topic, timeout=_READ_TIMEOUT)
        result.records_read = result.report.input_records

    def _stop_workers(self) -> None:
        result = self.run.result
        for worker in self.workers:
            if not worker.stop(STOP_LIMIT) and f"{worker.slot} wedged" not in result.liveness:
                result.liveness.append(f"{worker.slot} wedged: run() had not returned "
                                       f"{STOP_LIMIT:g} s after stop()")
            result.recreated += worker.recreated
            result.failures += worker.failures

    def close(self) -> None:
        if any(w.is_alive() for w in self.workers):
            self._stop_workers()
        self.timer.__exit__(None, None, None)
        self.monitor.close()


# -- the table ---------------------------------------------------------------------------------

_HEADINGS: Final = ("target", "front", "broker", "seed", "faults", "txns committed",
                    "records", "lost", "dup", "ab-read", "order", "unexp", "slowest s",
                    "longest poll s", "re-created", "liveness", "s", "ok")


def format_row(result: FrontNemesisResult) -> str:
    """One Markdown table row for ``result``: ``records`` are the committed records read
    (consumer) or the input records copied (processor); ``slowest`` the slowest read (from a
    commit returning) or the slowest processor commit."""
    counts: Mapping[str, int] | None
    if result.target == "consumer":
        counts = dataclasses.asdict(result.reads) if result.reads is not None else None
        slowest, poll = result.slowest_read, f"{result.longest_poll:.2f}"
    else:
        counts = dataclasses.asdict(result.report.totals) if result.report is not None \
            else None
        slowest, poll = result.slowest_commit, "-"

    def count(kind: str) -> str:
        return str(counts[kind]) if counts is not None else "-"

    liveness = len(result.liveness) + len(result.feed.wedges)
    cells = [result.target, "asyncio" if result.asyncio else "sync", result.broker,
             str(result.seed), str(len(result.schedule.faults)), str(result.feed.committed),
             str(result.records_read),
             *(count(k) for k in ("lost", "duplicated", "aborted_read", "out_of_order",
                                  "unexpected")),
             f"{slowest:.2f}", poll, str(result.recreated),
             "ok" if not liveness and not result.error else str(liveness or "error"),
             f"{result.seconds:.0f}", "yes" if not result.problems() else "NO"]
    return "| " + " | ".join(cells) + " |"


def format_table(results: Sequence[FrontNemesisResult]) -> str:
    """A Markdown table of ``results``, one row each."""
    head = "| " + " | ".join(_HEADINGS) + " |"
    rule = "|" + "|".join("---" for _ in _HEADINGS) + "|"
    return "\n".join([head, rule, *(format_row(r) for r in results)])
