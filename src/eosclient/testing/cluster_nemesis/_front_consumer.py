"""The consumer target: one read_committed consumer in a group (sync, or asyncio on an event loop
of its own thread) polled by a reader thread that commits after every poll that returned
records, then judged against the log (``_front_run`` has the theory of operation).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar

from eosclient.aio import AsyncReadCommittedConsumer
from eosclient.consumer import ConsumerRecord, ReadCommittedConsumer
from eosclient.errors import AbortableError, EosError, RetriableError
from eosclient.testing.cluster_nemesis._front_target import (
    DRAIN,
    GROUP_CONFIG,
    TargetRun,
    committed_ends,
    wait,
)
from eosclient.testing.cluster_nemesis._front_verdict import judge_reads
from eosclient.testing.cluster_nemesis._verdict import value_of
from eosclient.testing.cluster_nemesis._writer import RECORDS_PER_TRANSACTION
from eosclient.testing.marker_log import PartitionLog

__all__ = ["ConsumerTarget"]

log = logging.getLogger("eosclient.testing.cluster_nemesis")

_T = TypeVar("_T")
_POLL: Final = 0.2
_COMMIT_TIMEOUT: Final = 10.0
_LINGER: Final = 0.5  # the reader polls this long past the last committed record, for strays


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
                                        config=GROUP_CONFIG)
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
                                           auto_offset_reset="earliest", config=GROUP_CONFIG)
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


class ConsumerTarget:
    done_word = "read"

    def __init__(self, run: TargetRun, servers: str) -> None:
        self.run = run
        topic, group = run.result.input_topic, run.group
        make: Callable[[], _Consumer] = (
            (lambda: _AsyncConsumer(servers, topic, group)) if run.result.asyncio
            else (lambda: _SyncConsumer(servers, topic, group)))
        self.reads = _Reads()
        self.reader = _Reader(make, self.reads)
        self.reader.start()

    def warm(self, seconds: float) -> bool:
        first = [value_of(0, i) for i in range(RECORDS_PER_TRANSACTION)]
        return wait(lambda: all(v in self.reads.first_read for v in first)
                    or self.reader.error is not None, seconds)

    def clock(self, clock: float) -> None:
        with self.reads.lock:
            self.reads.clock = clock
            self.reads.longest_poll = 0.0  # the warm-up's join is not a stall

    def finish(self, logs: Mapping[int, PartitionLog]) -> None:
        result, reads = self.run.result, self.reads
        ends = committed_ends(logs)
        drain = DRAIN.get(self.run.broker.kind, 60.0)

        def read_all() -> bool:
            got = reads.read_to()
            return all(got.get(p, -1) >= end - 1 for p, end in ends.items() if end) \
                or not self.reader.is_alive()

        if not wait(read_all, drain):
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
            times = [first_read.get(value_of(txn.n, i)) for i in range(txn.sent)]
            if any(t is None for t in times):
                continue  # lost: counted by the verdict
            lag = max(t for t in times if t is not None) - txn.ended
            if lag > result.slowest_read:
                result.slowest_read, result.slowest_read_at = round(lag, 3), txn.ended

    def close(self) -> None:
        if self.reader.is_alive():
            self.reader.stop()
