"""What a producer run records (each transaction and what the application was told, the wedges,
the evidence) and the verdict on it: :func:`judge` holds the log, decided by its markers,
against what the application was told; :meth:`ClusterNemesisResult.problems` adds the limits.
The front targets' writer is judged the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from eosclient.testing.cluster_nemesis._schedule import PARTITIONS, TOPIC, Schedule
from eosclient.testing.marker_log import PartitionLog, decide

__all__ = ["CALL_TIMEOUT", "GIVE_UP", "SLOWEST_COMMIT_LIMIT", "ClusterNemesisResult", "Counts",
           "Outcome", "Txn", "Wedge", "judge", "time_of", "value_of"]

SLOWEST_COMMIT_LIMIT: Final = 15.0
CALL_TIMEOUT: Final = 5.0  # each commit_transaction / abort_transaction call's timeout
GIVE_UP: Final = 60.0  # seconds of retrying a commit or an abort before it counts as wedged
_AROUND: Final = 3.0  # seconds of log printed either side of a stall

Outcome = Literal["committed", "aborted", "failed", "unknown"]


@dataclass
class Txn:
    """One transaction of the loop, and what the application was told.

    Attributes:
        n: Its number (in send order, from 0).
        began: Seconds on the schedule's clock when it began.
        outcome: What the application was told (see :mod:`eosclient.testing.cluster_nemesis`).
        sent: How many of its records ``send()`` accepted.
        commit_seconds: From the first ``commit_transaction()`` call to the last one's end
            (retries included); None if the commit was never called.
        abort_seconds: Likewise for the abort.
        note: The error that decided it, if any.
        ended: Seconds on the schedule's clock when it was committed or aborted (None: it
            was neither, as far as the application knows).
    """

    n: int
    began: float
    outcome: Outcome = "failed"
    sent: int = 0
    commit_seconds: float | None = None
    abort_seconds: float | None = None
    note: str = ""
    ended: float | None = None


@dataclass(frozen=True)
class Wedge:
    """A commit or abort that never finished, or a producer that had to be re-created."""

    at: float  # schedule clock, when the call that wedged began
    txn: int
    what: str
    seconds: float  # how long it was tried

    def __str__(self) -> str:
        return f"t={self.at:.1f}s transaction {self.txn}: {self.what} (after {self.seconds:.1f} s)"


@dataclass
class Counts:
    """What the log holds against what the application was told (the verdict's counts)."""

    committed_records: int = 0
    lost: int = 0
    duplicated: int = 0
    aborted_read: int = 0
    out_of_order: int = 0
    partial: int = 0  # transactions of unknown outcome committed in part
    unexpected: int = 0
    unread: int = 0  # offsets below a high watermark the read never reached
    pruned: int = 0  # committed or unknown transactions the mock's dropped log head hid in part
    open_records: int = 0  # records with no marker after them (not a problem by itself)
    examples: list[str] = field(default_factory=list)

    def bad(self) -> dict[str, int]:
        """The non-zero counts that fail a run."""
        kinds = ("lost", "duplicated", "aborted_read", "out_of_order", "partial", "unexpected",
                 "unread")
        return {k: getattr(self, k) for k in kinds if getattr(self, k)}


def value_of(txn: int, record: int) -> bytes:
    """The value of ``record`` of transaction ``txn``: ``b"txn/record"``, short, so the mock's
    5 MiB a partition holds as many transactions as it can."""
    return b"%d/%d" % (txn, record)


def _parse(value: bytes) -> tuple[int, int] | None:
    txn, slash, record = value.partition(b"/")
    if not slash or not txn.isdigit() or not record.isdigit():
        return None
    return int(txn), int(record)


def judge(txns: Sequence[Txn], logs: Mapping[int, PartitionLog], *,
          topic: str = TOPIC) -> Counts:
    """Compare what the application was told (``txns``) with the log, partition by partition
    (``logs``: partition -> what was read of it), deciding each record by the markers. Pure:
    no broker.

    Where the mock dropped a partition's head (``start_offset`` above 0), its records of the
    transactions before the first one still in it cannot be judged: those transactions count
    as ``pruned``, and only their other partitions are judged.
    """
    counts = Counts()
    told = {t.n: t for t in txns}
    committed_of: dict[int, set[int]] = {}  # txn -> its committed record numbers
    seen: Counter[bytes] = Counter()
    judged_from: dict[int, int] = {}  # partition -> first transaction judged there

    def example(text: str) -> None:
        if len(counts.examples) < 20:
            counts.examples.append(text)

    for partition, read in sorted(logs.items()):
        if not read.complete:
            counts.unread += read.end_offset - read.read_to
            example(f"unread: {topic}-{partition} read to offset {read.read_to} of "
                    f"{read.end_offset}")
        decided = decide(read.batches)
        if read.start_offset > 0:
            keys = [k for b in read.batches for _, v in b.records if (k := _parse(v))]
            judged_from[partition] = min(keys)[0] if keys else len(txns)
        counts.open_records += len(decided.open)
        last: tuple[int, int] | None = None
        for offset, value in decided.committed:
            counts.committed_records += 1
            where = f"{topic}-{partition}@{offset} {value.decode(errors='replace')!r}"
            key = _parse(value)
            txn = told.get(key[0]) if key is not None else None
            if key is None or txn is None or key[1] >= txn.sent or \
                    key[1] % PARTITIONS != partition:
                counts.unexpected += 1
                example(f"unexpected: {where}")
                continue
            seen[value] += 1
            if seen[value] > 1:
                counts.duplicated += 1
                example(f"duplicated: {where}")
                continue
            if txn.outcome in ("aborted", "failed"):
                counts.aborted_read += 1
                example(f"aborted-read: {where} (the application was told {txn.outcome}"
                        + (f": {txn.note}" if txn.note else "") + ")")
            if last is not None and key < last:
                counts.out_of_order += 1
                example(f"out-of-order: {where} after {last[0]}/{last[1]}")
            last = max(key, last) if last is not None else key
            committed_of.setdefault(key[0], set()).add(key[1])
    for txn in txns:
        got = committed_of.get(txn.n, set())
        judged = {i for i in range(txn.sent) if txn.n >= judged_from.get(i % PARTITIONS, 0)}
        if len(judged) < txn.sent and txn.outcome in ("committed", "unknown"):
            counts.pruned += 1
        if txn.outcome == "committed" and not judged <= got:
            missing = sorted(judged - got)
            counts.lost += len(missing)
            example(f"lost: transaction {txn.n} (began t={txn.began:.2f}s, committed in "
                    f"{txn.commit_seconds or 0:.2f} s): records {missing} not committed")
        elif txn.outcome == "unknown" and len(judged) == txn.sent and 0 < len(got) < txn.sent:
            counts.partial += 1
            example(f"partial: transaction {txn.n} of unknown outcome: {len(got)} of "
                    f"{txn.sent} records committed")
    return counts


@dataclass
class ClusterNemesisResult:
    """What one run did and found (see :meth:`problems`)."""

    client: str
    schedule: Schedule
    txns: list[Txn] = field(default_factory=list)
    wedges: list[Wedge] = field(default_factory=list)
    recreated: int = 0  # producers made after the first
    loop_seconds: float = 0.0
    seconds: float = 0.0  # the whole run: cluster, init, loop, close, read
    events: list[str] = field(default_factory=list)  # the steps as played
    log_lines: list[str] = field(default_factory=list)  # DEBUG lines, schedule clock
    # The requests the mock's brokers read during windows() (a little either side), and how
    # many of each API they read in the whole run.
    request_lines: list[str] = field(default_factory=list)
    requests_by_api: dict[str, int] = field(default_factory=dict)
    counts: Counts | None = None
    error: str = ""  # the run itself failed (could not init, could not read)
    give_up: float = GIVE_UP
    call_timeout: float = CALL_TIMEOUT

    @property
    def seed(self) -> int:
        return self.schedule.seed

    def outcomes(self) -> Counter[str]:
        """Transactions by what the application was told."""
        return Counter(t.outcome for t in self.txns)

    @property
    def committed(self) -> int:
        return self.outcomes()["committed"]

    @property
    def rate(self) -> float:
        """Committed transactions per second of the loop."""
        return self.committed / self.loop_seconds if self.loop_seconds > 0 else 0.0

    def slowest_commit(self) -> Txn | None:
        """The transaction whose commit took longest (retries included), if any was called."""
        timed = [t for t in self.txns if t.commit_seconds is not None]
        return max(timed, key=lambda t: t.commit_seconds or 0.0) if timed else None

    def problems(self) -> list[str]:
        """Everything wrong with the run (empty: it passed)."""
        found: list[str] = []
        if self.error:
            found.append(f"run failed: {self.error}")
        if self.counts is None:
            found.append("the log was not judged")
        else:
            found += [f"{kind.replace('_', '-')}: {n}" for kind, n in self.counts.bad().items()]
        found += [f"wedged: {w}" for w in self.wedges]
        slowest = self.slowest_commit()
        if slowest is not None and (slowest.commit_seconds or 0.0) > SLOWEST_COMMIT_LIMIT:
            found.append(f"slowest commit {slowest.commit_seconds:.1f} s > "
                         f"{SLOWEST_COMMIT_LIMIT:g} s (transaction {slowest.n}, began "
                         f"t={slowest.began:.1f}s)")
        if not self.committed and not self.error:
            found.append("no transaction committed")
        return found

    def stall(self) -> tuple[float, float] | None:
        """The schedule-clock window of the worst stall: the first wedge, else the slowest
        commit over the limit (None: no stall)."""
        if self.wedges:
            w = self.wedges[0]
            return w.at, w.at + w.seconds
        slowest = self.slowest_commit()
        if slowest is not None and (slowest.commit_seconds or 0.0) > SLOWEST_COMMIT_LIMIT:
            return slowest.began, slowest.began + (slowest.commit_seconds or 0.0) + 1.0
        return None

    def windows(self) -> list[tuple[float, float]]:
        """The schedule-clock windows worth evidence: every wedge, and the slowest commit."""
        out = [(w.at, w.at + w.seconds) for w in self.wedges]
        slowest = self.slowest_commit()
        if slowest is not None:
            out.append((slowest.began, slowest.began + (slowest.commit_seconds or 0.0)))
        return out

    def lines_around(self, window: tuple[float, float], around: float = _AROUND) -> list[str]:
        """The captured log lines within ``around`` seconds of ``window``, with the requests
        the mock's brokers read during it, in time order."""
        low, high = window[0] - around, window[1] + around
        return sorted((line for line in [*self.log_lines, *self.request_lines]
                       if low <= time_of(line) <= high), key=time_of)

    def replay(self) -> str:
        """The command that replays this run's schedule for this client."""
        return (f"python -m eosclient.testing.cluster_nemesis --seeds {self.seed} "
                f"--duration {self.schedule.duration:g} --clients {self.client}")

    def summary(self, *, max_log_lines: int = 200) -> str:
        """Seed, verdict, problems, examples, the schedule as played, the log around the stall
        and the replay command: what a failure message needs."""
        problems = self.problems()
        lines = [f"cluster nemesis, {self.client}, seed {self.seed}: "
                 + ("OK" if not problems else "PROBLEMS"), *(f"  {p}" for p in problems)]
        if self.counts is not None and self.counts.examples:
            lines += ["examples:", *(f"  {e}" for e in self.counts.examples)]
        lines += [str(self.schedule), "as played:", *(f"  {e}" for e in self.events)]
        if self.requests_by_api:
            lines.append("requests the brokers read: " + ", ".join(
                f"{api} {n}" for api, n in self.requests_by_api.items()))
        window = self.stall()
        if window is not None:
            lines += self.evidence(window, max_log_lines)
        lines.append(f"replay: {self.replay()}")
        return "\n".join(lines)

    def evidence(self, window: tuple[float, float], max_lines: int = 200) -> list[str]:
        """The log lines and mock requests around ``window``, headed."""
        around = self.lines_around(window)
        cut = f", the last {max_lines}" if len(around) > max_lines else ""
        return [f"log and requests from t={window[0] - _AROUND:.1f}s to "
                f"t={window[1] + _AROUND:.1f}s ({len(around)} lines{cut}):",
                *(f"  {line}" for line in around[-max_lines:])]


def time_of(line: str) -> float:
    """The schedule-clock time a captured line starts with (``t=1.234s ...``)."""
    try:
        return float(line.split("s ", 1)[0].removeprefix("t="))
    except ValueError:
        return -1.0
