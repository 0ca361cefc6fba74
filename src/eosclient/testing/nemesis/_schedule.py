"""The nemesis's schedule: a seed drawn into faults at times, and the steps each fault expands
into when it is played (:mod:`eosclient.testing.nemesis` says what each fault does and why).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Final, Literal

from eosclient.errors import ApiKey

__all__ = ["DROP_APIS", "FAULT_KINDS", "SESSION_TIMEOUT_MS", "Fault", "FaultKind", "Schedule",
           "Step", "make_schedule", "steps"]

FaultKind = Literal["kill", "pause", "zombie", "join", "cut", "drop"]
FAULT_KINDS: Final[tuple[FaultKind, ...]] = ("kill", "pause", "zombie", "join", "cut", "drop")
_WEIGHTS: Final = (4, 3, 3, 2, 3, 4)
#: APIs whose answers ``drop`` loses: the transaction's and the group's.
DROP_APIS: Final = (ApiKey.PRODUCE, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT,
                    ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.ADD_PARTITIONS_TO_TXN,
                    ApiKey.OFFSET_FETCH, ApiKey.HEARTBEAT, ApiKey.SYNC_GROUP)
_SETTLE: Final = 3.0  # seconds a worker is left alone after a fault on it ends
_MAX_EXTRAS: Final = 2  # extra members alive at once
SESSION_TIMEOUT_MS: Final = 6_000  # noida-db's smallest
_REPLACE_AFTER: Final = 0.5  # a zombie's replacement starts this long after the SIGSTOP


@dataclass(frozen=True)
class Fault:
    """One fault of a schedule.

    Attributes:
        at: Seconds into the fault window.
        kind: One of :data:`FAULT_KINDS`.
        target: The worker (``w0``...), the extra member (``x0``...), or the API (``drop``).
        hold: kill: seconds until the restart; pause: seconds stopped;
            zombie: seconds from the replacement's start to the old one's SIGCONT; join:
            seconds until it leaves (None: it stays); cut, drop: unused.
    """

    at: float
    kind: FaultKind
    target: str = ""
    hold: float | None = None

    def __str__(self) -> str:
        what = {
            "kill": f"SIGKILL {self.target}, restart after {self.hold or 0:.1f} s",
            "pause": f"SIGSTOP {self.target} for {self.hold or 0:.1f} s, then SIGCONT",
            "zombie": f"SIGSTOP {self.target}, start its replacement, SIGCONT the old one "
                      f"{self.hold or 0:.1f} s later",
            "join": f"extra member {self.target} joins" + (
                f", leaves after {self.hold:.1f} s" if self.hold is not None else ", stays"),
            "cut": "cut every connection",
            "drop": f"lose the answer to the next {self.target}",
        }[self.kind]
        return f"t={self.at:5.1f}s {self.kind:<6} {what}"


@dataclass(frozen=True)
class Schedule:
    """A seed's faults, in time order, and what they were drawn for."""

    seed: int
    duration: float
    workers: int
    session_timeout: float
    faults: tuple[Fault, ...]

    def __str__(self) -> str:
        head = (f"nemesis schedule, seed {self.seed}: {len(self.faults)} faults in "
                f"{self.duration:.0f} s, {self.workers} workers, session timeout "
                f"{self.session_timeout:.0f} s")
        return "\n".join([head, *(f"  {fault}" for fault in self.faults)])


def make_schedule(seed: int, *, duration: float = 60.0, workers: int = 3,
                  session_timeout: float = SESSION_TIMEOUT_MS / 1000,
                  mean_gap: float = 5.0) -> Schedule:
    """The schedule of ``seed``: the same arguments give the same schedule, always.

    Faults come about every ``mean_gap`` seconds (exponential gaps, at least 1 s) until 2 s
    before ``duration``. A worker gets a fault only when the last one on it has ended (and
    :data:`_SETTLE` seconds passed); with none free, a proxy fault is drawn instead. At most
    :data:`_MAX_EXTRAS` extra members are in the group at once.

    Raises:
        ValueError: ``workers`` < 1, or ``duration`` or ``mean_gap`` not positive.
    """
    if workers < 1 or duration <= 0 or mean_gap <= 0:
        raise ValueError("workers must be >= 1, duration and mean_gap > 0")
    rng = random.Random(seed)
    names = [f"w{i}" for i in range(workers)]
    free_at = dict.fromkeys(names, 0.0)
    extras_until: list[float] = []
    faults: list[Fault] = []
    t = rng.uniform(1.0, mean_gap)
    while t < duration - 2.0:
        kind = rng.choices(FAULT_KINDS, _WEIGHTS)[0]
        free = [w for w in names if free_at[w] <= t]
        if kind in ("kill", "pause", "zombie") and not free:
            kind = rng.choice(("cut", "drop"))
        if kind == "join" and sum(1 for u in extras_until if u > t) >= _MAX_EXTRAS:
            kind = "cut"
        fault = _draw(rng, kind, round(t, 1), free, free_at=free_at, session=session_timeout,
                      extras_until=extras_until)
        faults.append(fault)
        t += max(1.0, rng.expovariate(1.0 / mean_gap))
    return Schedule(seed, duration, workers, session_timeout, tuple(faults))


def _draw(rng: random.Random, kind: FaultKind, t: float, free: list[str], *,
          free_at: dict[str, float], session: float, extras_until: list[float]) -> Fault:
    """One fault of ``kind`` at ``t``, its target and hold drawn from ``rng``."""
    hold: float | None
    if kind in ("cut", "drop"):
        return Fault(t, kind, rng.choice(DROP_APIS).label if kind == "drop" else "")
    if kind == "join":
        hold = None if rng.random() < 0.3 else round(rng.uniform(session, 3 * session), 1)
        extras_until.append(math.inf if hold is None else t + hold)
        return Fault(t, kind, f"x{len(extras_until) - 1}", hold)
    target = rng.choice(free)
    if kind == "kill":
        hold = round(rng.uniform(0.5, 2 * session), 1)
    elif kind == "pause":
        hold = round(rng.uniform(1.2 * session, 2.5 * session), 1)
    else:  # zombie
        hold = round(rng.uniform(2.0, 2.5 * session), 1)
    free_at[target] = t + hold + _SETTLE + _REPLACE_AFTER
    return Fault(t, kind, target, hold)


@dataclass(frozen=True, order=True)
class Step:
    """One thing the runner does at ``at``: a fault expands into one to three steps."""

    at: float
    order: int
    action: str
    target: str
    fault: Fault = field(compare=False)


def steps(schedule: Schedule) -> list[Step]:
    """The steps that play ``schedule``, in time order."""
    out: list[Step] = []

    def add(at: float, action: str, fault: Fault) -> None:
        out.append(Step(round(at, 3), len(out), action, fault.target, fault))

    for f in schedule.faults:
        hold = f.hold
        if f.kind == "kill":
            add(f.at, "sigkill", f)
            add(f.at + (hold or 0), "restart", f)
        elif f.kind == "pause":
            add(f.at, "sigstop", f)
            add(f.at + (hold or 0), "sigcont", f)
        elif f.kind == "zombie":
            add(f.at, "sigstop", f)
            add(f.at + _REPLACE_AFTER, "replace", f)
            add(f.at + _REPLACE_AFTER + (hold or 0), "resume-zombie", f)
        elif f.kind == "join":
            add(f.at, "join", f)
            if hold is not None:
                add(f.at + hold, "leave", f)
        else:
            add(f.at, f.kind, f)
    return sorted(out)
