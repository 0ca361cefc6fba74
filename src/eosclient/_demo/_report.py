"""The demo's outcome as data, its short report, and the exit status it gives.

The numbers come from three independent places: records in and out from reading both topics
back with read_committed (the checker), transactions from what the processors logged, and
anomalies from the checker's comparison. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from eosclient._demo._copier import CopierCounts
from eosclient.testing.checker import KINDS, CheckReport

__all__ = ["DemoResult", "FaultOutcome", "exit_status", "render"]

_LABEL: Final = 18


@dataclass(frozen=True, slots=True)
class FaultOutcome:
    """One fault of the plan and whether it was injected."""

    label: str
    fired: bool


@dataclass(slots=True)
class DemoResult:
    """Everything the report shows (filled in as the demo goes; a failed run leaves gaps).

    Attributes:
        broker: Which broker, e.g. ``"noida-db"``.
        seed: The seed the fault positions were drawn from.
        records: Committed input records written.
        aborted_input: Input records written in aborted transactions.
        processors: What each processor process reported, in start order.
        killed_open: Transactions left open by SIGKILLed processors (the broker aborts them
            when the next instance fences the old one).
        takeover: Seconds from starting the restarted processor to its first commit.
        faults: The proxy faults, in plan order.
        check: The checker's report (None if the run did not get that far).
        error: Why the run failed before it could be checked, if it did.
        elapsed: Wall time of the whole run, in seconds.
        work_dir: Where the logs are (kept when the run fails).
    """

    broker: str
    seed: int
    records: int = 0
    aborted_input: int = 0
    processors: list[CopierCounts] = field(default_factory=list)
    killed_open: int = 0
    takeover: float | None = None
    faults: list[FaultOutcome] = field(default_factory=list)
    check: CheckReport | None = None
    error: str | None = None
    elapsed: float = 0.0
    work_dir: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the run finished, injected every fault, and the checker found nothing."""
        return (self.error is None and self.check is not None and self.check.ok
                and all(f.fired for f in self.faults))


def exit_status(result: DemoResult) -> int:
    """0 for exactly once; 1 for anomalies, a fault that never fired, or a failed run."""
    return 0 if result.ok else 1


def render(result: DemoResult) -> str:
    """The short report, a dozen lines."""
    committed = sum(p.committed for p in result.processors)
    aborted = sum(p.aborted for p in result.processors)
    fired = sum(f.fired for f in result.faults)
    lines = ["", f"eosclient demo report ({result.broker}, seed {result.seed})"]

    def row(name: str, value: str) -> None:
        lines.append(f"  {name:<{_LABEL}}{value}")

    check = result.check
    if check is not None:
        row("records in", f"{check.input_records:,} committed in {check.input_topic} "
            f"(+{result.aborted_input} in aborted transactions)")
        row("records out", f"{check.output_records:,} committed in {check.output_topic}")
    row("transactions", f"committed {committed:,}, aborted {aborted + result.killed_open:,} "
        f"({aborted} by the processor on an error, {result.killed_open} left open by a kill)")
    for number, counts in enumerate(result.processors, 1):
        row(f"  processor {number}", f"{counts.committed:,} committed, {counts.aborted} aborted, "
            f"{counts.records_in:,} records" + (" (killed)" if number < len(result.processors)
                                                 else ""))
    row("faults injected", f"{fired + result.killed_open} of "
        f"{len(result.faults) + result.killed_open}")
    for fault in result.faults:
        lines.append(f"  {'':<{_LABEL}}{'-' if fault.fired else 'NOT INJECTED:'} {fault.label}")
    for _ in range(result.killed_open):
        lines.append(f"  {'':<{_LABEL}}- SIGKILL of the processor with a transaction open")
    if result.takeover is not None:
        row("restart", f"the restarted processor committed {result.takeover:.1f} s after it "
            "started")
    if check is not None:
        totals = ", ".join(f"{k.replace('_', '-')} {getattr(check.totals, k)}" for k in KINDS)
        row("anomalies", f"{check.totals.total()} ({totals})")
    row("wall time", f"{result.elapsed:.1f} s")
    row("result", _verdict(result))
    if check is not None and not check.ok:
        lines += ["", str(check)]
    if not result.ok and result.work_dir:
        row("logs", result.work_dir)
    return "\n".join(lines)


def _verdict(result: DemoResult) -> str:
    if result.error is not None:
        return f"FAILED: {result.error}"
    if result.check is None:
        return "FAILED: not checked"
    if not result.check.ok:
        return "FAILED: the output is not an exactly-once copy of the input"
    if not all(f.fired for f in result.faults):
        return "INCOMPLETE: a fault was not injected"
    return "exactly once"
