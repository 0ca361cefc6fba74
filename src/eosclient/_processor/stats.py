"""The processor's progress counters, updated by its loop and read from any thread."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

__all__ = ["ProcessorStats", "StatsCounter"]


@dataclass(frozen=True, slots=True)
class ProcessorStats:
    """A snapshot of an :class:`~eosclient.ExactlyOnceProcessor`'s progress.

    Attributes:
        records_in: Input records whose transaction committed.
        records_out: Output records committed.
        transactions_committed: Transactions committed.
        transactions_aborted: Transactions aborted (their records are processed again).
        elapsed: Seconds since ``run()`` began.
        busy: Seconds from ``run()``'s start to the last commit (``elapsed`` before the
            first): the time the committed records took, without the idle wait after them.
        records_per_second: ``records_in / busy``.
    """

    records_in: int = 0
    records_out: int = 0
    transactions_committed: int = 0
    transactions_aborted: int = 0
    elapsed: float = 0.0
    busy: float | None = None  # None: as elapsed (a snapshot made without it)

    @property
    def records_per_second(self) -> float:
        """Committed input records per second, from ``run()``'s start to the last commit: a
        wait with nothing to do after it (``idle_timeout``) does not dilute the rate."""
        busy = self.elapsed if self.busy is None else self.busy
        return self.records_in / busy if busy > 0 else 0.0

    def __str__(self) -> str:
        return (f"records in {self.records_in}, out {self.records_out}, transactions "
                f"committed {self.transactions_committed}, aborted {self.transactions_aborted}, "
                f"{self.records_per_second:,.0f} records/s")


class StatsCounter:
    """The live counters behind :class:`ProcessorStats` (a lock: ``stats`` is read anywhere)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._last_commit: float | None = None
        self._counts = [0, 0, 0, 0]

    def started(self) -> None:
        """``run()`` began: the clock of ``records_per_second`` starts again."""
        with self._lock:
            self._started = time.monotonic()
            self._last_commit = None

    def committed(self, records_in: int, records_out: int) -> None:
        """A transaction of that many records committed."""
        with self._lock:
            self._last_commit = time.monotonic()
            self._counts[0] += records_in
            self._counts[1] += records_out
            self._counts[2] += 1

    def aborted(self) -> None:
        """A transaction was aborted."""
        with self._lock:
            self._counts[3] += 1

    def snapshot(self) -> ProcessorStats:
        """The counters now."""
        with self._lock:
            records_in, records_out, committed, aborted = self._counts
            now = time.monotonic()
            last = now if self._last_commit is None else self._last_commit
            return ProcessorStats(records_in, records_out, committed, aborted,
                                  now - self._started, last - self._started)
