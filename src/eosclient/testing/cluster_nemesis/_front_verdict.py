"""What a front target's run records, and the verdict on it: :func:`judge_reads` holds what the
consumer returned against the log, decided by its markers; :meth:`FrontNemesisResult.problems`
adds the checker's counts (the processor), the writer's verdict and the limits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from eosclient.testing.checker import KINDS, CheckReport
from eosclient.testing.cluster_nemesis._schedule import Schedule
from eosclient.testing.cluster_nemesis._verdict import (
    SLOWEST_COMMIT_LIMIT,
    ClusterNemesisResult,
    time_of,
)
from eosclient.testing.marker_log import PartitionLog, decide

__all__ = ["FRONT_TARGETS", "POLL_LIMIT", "READ_LAG_LIMIT", "FrontNemesisResult", "FrontTarget",
           "ReadCounts", "judge_reads"]

FrontTarget = Literal["consumer", "processor"]
FRONT_TARGETS: Final[tuple[FrontTarget, ...]] = ("consumer", "processor")
READ_LAG_LIMIT: Final = 15.0  # from a commit returning to its last record read
POLL_LIMIT: Final = 10.0  # one poll(0.2) call


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
class FrontNemesisResult:
    """What one front run did and found (see :meth:`problems`).

    ``feed`` is the writer's run as the producer target records it: its transactions, wedges,
    the verdict on the input's log, the schedule as played and the captured log lines.
    """

    target: FrontTarget
    broker: str
    asyncio: bool
    feed: ClusterNemesisResult
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
    def schedule(self) -> Schedule:
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
            if self.slowest_commit > SLOWEST_COMMIT_LIMIT:
                found.append(f"slowest commit {self.slowest_commit:.1f} s > "
                             f"{SLOWEST_COMMIT_LIMIT:g} s ({self.slowest_commit_id}, began "
                             f"t={self.slowest_commit_at:.1f}s)")
        if self.recreated:
            found.append(f"re-created: {self.recreated} (" + "; ".join(self.failures[-3:]) + ")")
        return found + [f"liveness: {p}" for p in self.liveness]

    def window(self) -> tuple[float, float] | None:
        """The schedule-clock window worth evidence: the first wedge of the writer; else, when
        the target did not catch up, from the writer's end to the last line (what the clients
        said while they stood still); else the slowest read or commit."""
        stall = self.feed.stall()
        if stall is not None:
            return stall
        if self.liveness and self.feed.log_lines:
            return self.feed.loop_seconds, max(self.feed.loop_seconds,
                                               time_of(self.feed.log_lines[-1]))
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
