"""What the front run asks of a target (:class:`Target`) and what a target reads of the run
(:class:`TargetRun`), and what both targets share: the wait, the drain's limit, the group's
settings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol

from eosclient.testing.brokers import RunningBroker
from eosclient.testing.cluster_nemesis._front_verdict import FrontNemesisResult
from eosclient.testing.marker_log import PartitionLog, decide

__all__ = ["DRAIN", "GROUP_CONFIG", "READ_TIMEOUT", "Target", "TargetRun", "committed_ends",
           "wait"]

DRAIN: Final = {"noida": 45.0, "tansu": 120.0}
READ_TIMEOUT: Final = 60.0
GROUP_CONFIG: Final = {"session.timeout.ms": 6_000, "heartbeat.interval.ms": 500,
                       "fetch.max.wait.ms": 100}


class TargetRun(Protocol):
    """What a target reads of the run it is part of."""

    @property
    def result(self) -> FrontNemesisResult: ...
    @property
    def broker(self) -> RunningBroker: ...
    @property
    def group(self) -> str: ...
    @property
    def worker_ids(self) -> Sequence[str]: ...


class Target(Protocol):
    """A front target as the run drives it: started when made, warmed up on the writer's first
    transaction, put on the schedule's clock, finished against the log, closed."""

    done_word: str

    def warm(self, seconds: float) -> bool: ...
    def clock(self, clock: float) -> None: ...
    def finish(self, logs: Mapping[int, PartitionLog]) -> None: ...
    def close(self) -> None: ...


def committed_ends(logs: Mapping[int, PartitionLog]) -> dict[int, int]:
    """Partition -> the offset after its last committed record (0: none)."""
    ends = {}
    for p, raw in logs.items():
        committed = decide(raw.batches).committed
        ends[p] = committed[-1][0] + 1 if committed else 0
    return ends


def wait(done: Callable[[], bool], seconds: float, step: float = 0.1) -> bool:
    """Whether ``done()`` came true within ``seconds`` (asked every ``step`` seconds)."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True
