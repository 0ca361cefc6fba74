"""What a nemesis run records (its processes, the sampler's samples, the output's writes, the
steps played) and what fails it (:meth:`NemesisResult.problems`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from eosclient.testing._scenario_run import Child
from eosclient.testing.checker import KINDS, CheckReport
from eosclient.testing.nemesis._schedule import Schedule

__all__ = ["Event", "Expect", "Instance", "NemesisResult", "Sample", "Write"]

_FENCED_WORDS: Final = ("Fenced", "FENCED", "INVALID_PRODUCER_EPOCH")

Expect = Literal["alive", "killed", "fenced", "left"]


@dataclass
class Instance:
    """One ``eosclient copy`` process of a run.

    Attributes:
        slot: The worker or extra member it runs as (``w0``, ``x1``).
        role: ``worker`` (first or restarted), ``replacement`` (of a zombie), ``extra``.
        started, ended: Seconds since the run began (ended: None while it runs).
        expect: How it may end: ``alive`` (until the run stops it), ``killed`` (SIGKILL by the
            schedule), ``fenced`` (a zombie), ``left`` (an extra member's SIGTERM).
        returncode: Its exit status (None while it runs).
        last_lines: Its last lines of output (errors).
    """

    slot: str
    role: str
    started: float
    child: Child | None = field(default=None, repr=False)
    ended: float | None = None
    expect: Expect = "alive"
    returncode: int | None = None
    last_lines: str = ""

    @property
    def records_in(self) -> int:
        """Input records it committed (from its last progress line)."""
        return self.child.records_in if self.child is not None else 0

    def problem(self) -> str | None:
        """What is wrong with how it ended, if anything (judged once the run is over)."""
        rc = self.returncode
        name = f"{self.slot} ({self.role}, started at {self.started:.1f} s)"
        if self.expect == "fenced":
            if rc is None:
                return f"zombie {name} was still alive at the end: not fenced"
            if rc == 0 or not any(w in self.last_lines for w in _FENCED_WORDS):
                return f"zombie {name} exited {rc}, not fenced: {self.last_lines[-300:]!r}"
            return None
        if self.expect in ("alive", "left") and rc not in (None, 0):
            return (f"{name} died (exit {rc}) at {self.ended or 0:.1f} s: "
                    f"{self.last_lines[-400:]!r}")
        return None


@dataclass(frozen=True)
class Sample:
    """What the sampler saw at ``t`` (seconds since the run began)."""

    t: float
    records_in: dict[str, int]  # slot -> input records its processes committed so far
    committed: dict[int, int]  # input partition -> the group's committed offset
    ends: dict[int, int]  # input partition -> offset after its last input record
    alive: tuple[str, ...]  # slots with a live (and not stopped) process


@dataclass(frozen=True)
class Write:
    """One committed or aborted output batch: when, by whom, from which input partitions."""

    t: float
    slot: str
    sources: dict[int, int]  # input partition -> records
    committed: bool


@dataclass(frozen=True)
class Event:
    """One step the runner took, at ``t`` seconds since the run began."""

    t: float
    action: str
    target: str
    note: str = ""


@dataclass
class NemesisResult:
    """What one nemesis run did and found (see :meth:`problems`)."""

    broker: str
    seed: int
    schedule: Schedule
    records: int
    partitions: int
    input_topic: str = ""
    output_topic: str = ""
    fault_start: float = 0.0  # seconds since the run began when the schedule started
    fault_end: float = 0.0
    seconds: float = 0.0
    faults_injected: int = 0
    instances: list[Instance] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    # One line per output batch, partition by partition: offset, producer (slot), epoch, and
    # the marker or the records (with their input partitions): what a duplicate is read from.
    batch_lines: list[str] = field(default_factory=list)
    liveness: list[str] = field(default_factory=list)
    report: CheckReport | None = None
    report_path: Path | None = None
    error: str = ""  # the run itself failed (a broker that went away)
    asyncio: bool = False  # the workers ran eosclient.aio's processor (``copy --asyncio``)

    @property
    def uncommitted(self) -> int:
        """Input records past the group's committed offsets at the last sample."""
        if not self.samples:
            return 0
        last = self.samples[-1]
        return sum(max(0, end - last.committed.get(p, 0)) for p, end in last.ends.items())

    def count(self, kind: str) -> int:
        """One of the checker's counts (0 when the checker did not run)."""
        return getattr(self.report.totals, kind) if self.report is not None else 0

    def problems(self) -> list[str]:
        """Everything wrong with the run (empty: it passed)."""
        found = [f"{kind}: {self.count(kind)}" for kind in KINDS if self.count(kind)]
        if self.count("lost") and self.uncommitted:
            found[0] += (f" (of which up to {self.uncommitted} past the group's committed "
                         "offsets: not copied because the group stalled)")
        if self.error:
            found.append(f"run failed: {self.error}")
        elif self.report is None:
            found.append("the checker did not run")
        return found + [f"liveness: {problem}" for problem in self.liveness]

    def replay(self) -> str:
        """The command that replays this run's schedule."""
        return (f"python -m eosclient.testing.nemesis --broker {self.broker} --seeds {self.seed} "
                f"--duration {self.schedule.duration:g} --records {self.records} "
                f"--workers {self.schedule.workers} --partitions {self.partitions}"
                + (" --asyncio" if self.asyncio else ""))

    def summary(self) -> str:
        """The seed, the schedule, the problems and the replay command (a failure message)."""
        lines = [f"nemesis on {self.broker}{' (asyncio)' if self.asyncio else ''}, "
                 f"seed {self.seed}: "
                 + ("OK" if not self.problems() else "PROBLEMS"),
                 *(f"  {p}" for p in self.problems())]
        if self.report is not None and not self.report.ok:
            lines.append(str(self.report))
        lines += [str(self.schedule), f"replay: {self.replay()}"]
        if self.report_path is not None:
            lines += [f"report: {self.report_path}",
                      f"workers' logs: {self.report_path.with_suffix('.log')}"]
        return "\n".join(lines)
