"""The processor target: ExactlyOnceProcessor workers (threads, or each on an event loop of its
own with asyncio) copying input to output in one group, each ``commit_transaction()`` timed,
then checked by :mod:`eosclient.testing.checker` (``_front_run`` has the theory of operation).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from eosclient._core.types import TopicPartition
from eosclient.aio import AsyncExactlyOnceProcessor
from eosclient.aio.producer import AsyncTransactionalProducer
from eosclient.consumer import ReadCommittedConsumer
from eosclient.errors import EosError, KafkaTimeoutError
from eosclient.processor import ExactlyOnceProcessor
from eosclient.producer import TransactionalProducer
from eosclient.testing.checker import check
from eosclient.testing.cluster_nemesis._front_target import (
    DRAIN,
    GROUP_CONFIG,
    READ_TIMEOUT,
    TargetRun,
    committed_ends,
    wait,
)
from eosclient.testing.cluster_nemesis._schedule import PARTITIONS
from eosclient.testing.marker_log import PartitionLog

__all__ = ["STOP_LIMIT", "ProcessorTarget"]

log = logging.getLogger("eosclient.testing.cluster_nemesis")

STOP_LIMIT: Final = 60.0  # from stop() to run() returning
_PRODUCER_CONFIG: Final = {"request.timeout.ms": 2000, "retry.backoff.ms": 20}


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


class ProcessorTarget:
    done_word = "copied"

    def __init__(self, run: TargetRun, servers: str) -> None:
        self.run = run
        self._clock = time.monotonic()
        # The group's committed offsets, read past the front, straight from the broker.
        self.monitor = ReadCommittedConsumer(run.broker.bootstrap_servers, group_id=run.group)
        self.tps = [TopicPartition(run.result.input_topic, p) for p in range(PARTITIONS)]
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
                    consumer_config=GROUP_CONFIG)

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
        return wait(lambda: len([o for o in self.committed().values() if o > 0]) ==
                    PARTITIONS, seconds, 0.3)

    def clock(self, clock: float) -> None:
        self._clock = clock
        self.timer.slowest = 0.0  # the warm-up's commits are not the schedule's

    def finish(self, logs: Mapping[int, PartitionLog]) -> None:
        result = self.run.result
        ends = committed_ends(logs)
        drain = DRAIN.get(self.run.broker.kind, 60.0)
        short: dict[int, int] = {}

        def drained() -> bool:
            committed = self.committed()
            short.clear()
            short.update({p: end - committed.get(p, 0) for p, end in ends.items()
                          if committed.get(p, 0) < end})
            return not short

        if not wait(drained, drain, 0.3):
            result.liveness.append(f"the group's committed offsets did not reach the input's "
                                   f"end within {drain:g} s of the writer's end: short "
                                   f"{short} (partition: offsets)")
        self._stop_workers()
        result.slowest_commit = round(self.timer.slowest, 3)
        result.slowest_commit_at = round(self.timer.slowest_at, 2)
        result.slowest_commit_id = self.timer.slowest_id.rsplit("-", 1)[-1]
        result.report = check(self.run.broker.bootstrap_servers, result.input_topic,
                              result.output_topic, timeout=READ_TIMEOUT)
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
