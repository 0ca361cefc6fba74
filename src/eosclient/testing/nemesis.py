"""The nemesis: several ``eosclient copy`` processes in one group under a seeded random
schedule of composed faults, then an independent check of the output and of liveness.

Theory of operation. :func:`make_schedule` turns a seed into a :class:`Schedule`: faults at
times (seconds into the fault window) drawn from ``random.Random(seed)`` alone, so the same
seed gives the same schedule on every machine and broker. A fault is one of

* ``kill``: SIGKILL a worker, start it again ``hold`` seconds later (never for good: see
  below);
* ``pause``: SIGSTOP a worker for ``hold`` seconds, longer than the session timeout, then
  SIGCONT (a GC pause or a frozen VM: the group moves on without it);
* ``zombie``: SIGSTOP a worker, start a replacement under the same ``group.instance.id`` and
  transactional.id, SIGCONT the old one ``hold`` seconds later: the old one must end fenced
  and exit, the replacement must live;
* ``join``: an extra member (a transactional.id of its own, a dynamic member: no
  ``group.instance.id``) joins, and leaves (SIGTERM: LeaveGroup) ``hold`` seconds later
  (None: it stays);
* ``cut``: the proxy cuts every connection; ``drop``: the proxy loses the broker's answer to
  the next request of one API (the broker acted, the client never hears).

:func:`run_nemesis` builds a :class:`~eosclient.testing._scenario_run.Run` (input topic
pre-filled with part of the records, empty output topic, the proxy every worker talks
through), starts ``workers`` ``eosclient copy`` processes (worker ``wN`` has transactional.id
and ``group.instance.id`` ``<group>-wN``, as docs/processor.md recommends), keeps writing the
rest of the input in committed transactions at a steady pace, and plays the schedule once the
group has committed its first records (Tansu holds each join for about half the session
timeout). Then it stops the faults, lets the survivors drain, writes one probe record per
input partition and waits until the group commits past it (every partition owned by a live
worker and progressing), stops the workers and runs the checker on both topics, straight from
the broker. A sampler records each worker's committed records and the group's committed
offsets twice a second; the output log itself (producer id per batch) says which worker wrote
each input partition's records when.
:func:`~eosclient.testing._nemesis_report.write_report` draws all of it on one HTML page.

Why no worker is killed for good, and extra members are dynamic: neither broker here aborts a
transaction that outlives ``transaction.timeout.ms``, so a transactional.id that never comes
back holds the last stable offset of every output partition it wrote to for ever; and neither
removed a static member that stopped heartbeating within 45 s of a 6 s session timeout, so its
partitions stay assigned to nobody alive. Both are for the coordinator to do, not the client; a
real deployment's supervisor restarts what dies, and so does the nemesis.

What fails a run (:meth:`NemesisResult.problems`): any checker count, a worker that died
without the schedule killing it (or a zombie's replacement, fenced by its zombie), a zombie
that did not end fenced, a partition whose committed offset did not reach the input's end, a
probe record not committed by a live worker.

From a shell (starts its own broker; one row per seed, a report per seed)::

    python -m eosclient.testing.nemesis --broker noida --seeds 1-20 --duration 60 \\
        --records 20000 --report-dir nemesis-reports
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from eosclient._core.decode import ControlType
from eosclient._core.types import TopicPartition
from eosclient.errors import ApiKey, EosError
from eosclient.producer import TransactionalProducer
from eosclient.testing._scenario_run import Child, Run
from eosclient.testing.brokers import BROKER_KINDS, RunningBroker, start_broker
from eosclient.testing.checker import KINDS, SOURCE_HEADER, CheckReport
from eosclient.testing.proxy import DropResponse, Rule
from eosclient.testing.reader import read_raw_batches

__all__ = ["FAULT_KINDS", "Fault", "NemesisResult", "Sample", "Schedule", "Write",
           "format_table", "main", "make_schedule", "run_nemesis"]

log = logging.getLogger("eosclient.testing.nemesis")

FaultKind = Literal["kill", "pause", "zombie", "join", "cut", "drop"]
FAULT_KINDS: Final[tuple[FaultKind, ...]] = ("kill", "pause", "zombie", "join", "cut", "drop")
_WEIGHTS: Final = (4, 3, 3, 2, 3, 4)
#: APIs whose answers ``drop`` loses: the transaction's and the group's.
DROP_APIS: Final = (ApiKey.PRODUCE, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT,
                    ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.ADD_PARTITIONS_TO_TXN,
                    ApiKey.OFFSET_FETCH, ApiKey.HEARTBEAT, ApiKey.SYNC_GROUP)
_SETTLE: Final = 3.0  # seconds a worker is left alone after a fault on it ends
_MAX_EXTRAS: Final = 2  # extra members alive at once
_SESSION_TIMEOUT_MS: Final = 6_000  # noida-db's smallest
_SAMPLE: Final = 0.5
_TICK: Final = 0.25  # the feeder writes a transaction this often
_REPLACE_AFTER: Final = 0.5  # a zombie's replacement starts this long after the SIGSTOP
_ZOMBIE_EXIT: Final = 30.0  # a resumed zombie must have exited this long after the run
_PRODUCER_CONFIG: Final = {"request.timeout.ms": 2000, "retry.backoff.ms": 20}
# Seconds to wait for the first commit, to drain, and for the probe, by broker (Tansu holds
# each group join for about half the session timeout and a rebalance may take several joins,
# and a fault late in the window may cost one more).
_WARMUP: Final = {"noida": 20.0, "tansu": 60.0}
_DRAIN: Final = {"noida": 45.0, "tansu": 120.0}
_FENCED_WORDS: Final = ("Fenced", "FENCED", "INVALID_PRODUCER_EPOCH")


# -- the schedule ----------------------------------------------------------------------------------

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
                  session_timeout: float = _SESSION_TIMEOUT_MS / 1000,
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
class _Step:
    """One thing the runner does at ``at``: a fault expands into one to three steps."""

    at: float
    order: int
    action: str
    target: str
    fault: Fault = field(compare=False)


def _steps(schedule: Schedule) -> list[_Step]:
    steps: list[_Step] = []

    def add(at: float, action: str, fault: Fault) -> None:
        steps.append(_Step(round(at, 3), len(steps), action, fault.target, fault))

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
    return sorted(steps)


# -- what a run records ----------------------------------------------------------------------------

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


# -- the run ---------------------------------------------------------------------------------------

class _Feeder(threading.Thread):
    """Writes ``count`` input records in committed transactions, paced over ``seconds``."""

    def __init__(self, run: Run, count: int, seconds: float, partitions: int) -> None:
        super().__init__(name="nemesis-feeder", daemon=True)
        self._run = run
        self._count = count
        self._seconds = max(seconds, _TICK)
        self._partitions = partitions
        self._producer = TransactionalProducer(run.broker.bootstrap_servers, linger_ms=5,
                                               transactional_id=f"{run.transactional_id}-feed")
        self._producer.init_transactions(30)
        self._written = 0
        self.error: BaseException | None = None
        self._lock = threading.Lock()

    def run(self) -> None:
        started = time.monotonic()
        try:
            while self._written < self._count:
                due = min(self._count, math.ceil(
                    self._count * (time.monotonic() - started) / self._seconds))
                if due > self._written:
                    self.write(due - self._written)
                time.sleep(_TICK)
        except BaseException as exc:  # the main thread reports it
            self.error = exc

    def write(self, n: int, *, tag: str = "feed") -> None:
        """One transaction of ``n`` records spread over the partitions; ends updated."""
        with self._lock:
            producer = self._producer
            producer.begin_transaction()
            futures = []
            for p in range(self._partitions):
                values = [f"{self._run.seed}:{tag}:{i}".encode()
                          for i in range(self._written + p, self._written + n, self._partitions)]
                if values:
                    futures.append(producer.send_batch(self._run.input_topic, values, partition=p))
            producer.commit_transaction(30)
            for future in futures:
                for md in future.result(0):
                    tp = TopicPartition(md.topic, md.partition)
                    self._run.ends[tp] = max(self._run.ends.get(tp, 0), md.offset + md.record_count)
            self._written += n

    def close(self) -> None:
        """Close the producer (after :meth:`join`)."""
        self._producer.close(5)


class _Nemesis:
    """One run in progress: the workers, the clock, the sampler (see the module docstring)."""

    def __init__(self, broker: RunningBroker, schedule: Schedule, *, records: int,
                 partitions: int, max_records_per_transaction: int, asyncio: bool) -> None:
        self.result = NemesisResult(broker.kind, schedule.seed, schedule, records, partitions,
                                    asyncio=asyncio)
        self.schedule = schedule
        self.kind = broker.kind
        prefill = min(records, max(partitions, records // 4))
        self.run = Run(broker, name="nemesis", seed=schedule.seed, records=prefill,
                       partitions=partitions,
                       max_records_per_transaction=max_records_per_transaction,
                       producer_config=_PRODUCER_CONFIG)
        self.run.consumer_config.update({"session.timeout.ms": _SESSION_TIMEOUT_MS,
                                         "heartbeat.interval.ms": 500})
        self.result.input_topic, self.result.output_topic = (self.run.input_topic,
                                                             self.run.output_topic)
        self.partitions = partitions
        self.feed = records - prefill
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.current: dict[str, Instance] = {}
        self.zombies: list[Instance] = []
        self._stop_sampling = threading.Event()
        self._producer_ids: dict[int, str] = {}
        self.drops: list[Rule] = []

    def now(self) -> float:
        return time.monotonic() - self.started

    def event(self, action: str, target: str = "", note: str = "") -> None:
        self.result.events.append(Event(round(self.now(), 2), action, target, note))
        log.info("t=%.1f %s %s %s", self.now(), action, target, note)

    def txn_id(self, slot: str) -> str:
        return f"{self.run.group}-{slot}"

    # -- processes --------------------------------------------------------------------------

    def start(self, slot: str, role: str) -> Instance:
        txn = self.txn_id(slot)
        member = None if role == "extra" else txn  # an extra member is dynamic (module doc)
        child = self.run.child(transactional_id=txn,
                               consumer_config={"group.instance.id": member or ""},
                               log_level="info", asyncio=self.result.asyncio)
        instance = Instance(slot, role, round(self.now(), 2), child)
        self.result.instances.append(instance)
        self.current[slot] = instance
        return instance

    def reap(self, instance: Instance) -> None:
        """Note how ``instance`` ended, once its process has exited."""
        child = instance.child
        if child is None or instance.ended is not None or child.alive:
            return
        child.kill()  # collects the exited process (no signal is sent)
        instance.ended = round(self.now(), 2)
        instance.returncode = child.returncode
        instance.last_lines = child.notable(8)

    def reap_all(self) -> None:
        for instance in self.result.instances:
            self.reap(instance)

    # -- the schedule's steps ---------------------------------------------------------------

    def do(self, step: _Step) -> None:
        slot, instance = step.target, self.current.get(step.target)
        action = step.action
        if action in ("sigkill", "sigstop", "sigcont", "leave") and (
                instance is None or instance.ended is not None):
            self.event(action, slot, "skipped: not running")
            return
        if action == "sigkill" and instance is not None:
            instance.expect = "killed"
            assert instance.child is not None
            instance.child.kill()
            self.reap(instance)
            del self.current[slot]
        elif action == "restart":
            self.start(slot, "worker")
        elif action in ("sigstop", "sigcont") and instance is not None:
            assert instance.child is not None
            (instance.child.pause if action == "sigstop" else instance.child.resume)()
        elif action == "replace" and instance is not None:
            instance.expect = "fenced"
            self.zombies.append(instance)
            self.start(slot, "replacement")
        elif action == "resume-zombie":
            for zombie in self.zombies:
                if zombie.slot == slot and zombie.child is not None:
                    zombie.child.resume()
        elif action == "join":
            self.start(slot, "extra")
        elif action == "leave" and instance is not None:
            instance.expect = "left"
            assert instance.child is not None
            instance.child.stop()
            self.reap(instance)
            del self.current[slot]
        elif action == "cut":
            self.event(action, "", f"{self.run.proxy.cut_all()} connections")
            self.result.faults_injected += 1
            return
        elif action == "drop":
            api = next(a for a in DROP_APIS if a.label == slot)
            self.drops.append(self.run.proxy.add_rule(Rule(api_key=api, action=DropResponse())))
        if action in ("sigkill", "sigstop", "join"):
            self.result.faults_injected += 1
        self.event(action, slot, step.fault.kind)

    # -- the sampler ------------------------------------------------------------------------

    def sample_forever(self) -> None:
        committed: dict[int, int] = {}
        while not self._stop_sampling.wait(_SAMPLE):
            try:
                committed = {tp.partition: o for tp, o in self.run.committed(2.0).items()}
            except EosError as exc:
                log.debug("committed offsets not read: %r", exc)
            self.result.samples.append(self.sample(committed))

    def sample(self, committed: dict[int, int]) -> Sample:
        per_slot: dict[str, int] = {}
        for instance in list(self.result.instances):
            per_slot[instance.slot] = per_slot.get(instance.slot, 0) + instance.records_in
        alive = tuple(sorted(s for s, i in dict(self.current).items()
                             if i.child is not None and i.child.alive))
        ends = {tp.partition: end for tp, end in dict(self.run.ends).items()}
        return Sample(round(self.now(), 2), per_slot, dict(committed), ends, alive)

    def latest_committed(self) -> dict[int, int]:
        samples = self.result.samples
        return samples[-1].committed if samples else {}

    def short(self) -> dict[int, int]:
        """Input partition -> records not yet committed by the group (from the last sample)."""
        committed = self.latest_committed()
        return {tp.partition: end - committed.get(tp.partition, 0)
                for tp, end in dict(self.run.ends).items()
                if committed.get(tp.partition, 0) < end}

    def wait_until(self, done: Callable[[], bool], deadline: float) -> bool:
        while time.monotonic() < deadline:
            self.reap_all()
            if done():
                return True
            time.sleep(_SAMPLE)
        return bool(done())

    # -- the phases -------------------------------------------------------------------------

    def play(self) -> None:
        run, result = self.run, self.result
        self.register_producer_ids()
        for n in range(self.schedule.workers):
            self.start(f"w{n}", "worker")
        sampler = threading.Thread(target=self.sample_forever, name="nemesis-sampler",
                                   daemon=True)
        sampler.start()
        feeder = _Feeder(run, self.feed, 0.8 * self.schedule.duration, self.partitions)
        try:
            self.wait_until(lambda: sum(self.latest_committed().values()) > 0,
                            time.monotonic() + _WARMUP.get(self.kind, 60.0))
            result.fault_start = round(self.now(), 2)
            self.event("faults start")
            feeder.start()
            clock = time.monotonic()
            for step in _steps(self.schedule):
                self.wait_until(lambda: False, clock + step.at)
                self.do(step)
            self.wait_until(lambda: False, clock + self.schedule.duration)
            run.proxy.clear_rules()
            fired = sum(rule.fired for rule in self.drops)
            self.result.faults_injected += fired
            self.event("drops", "", f"{fired} of {len(self.drops)} lost answers happened")
            for zombie in self.zombies:  # a late SIGCONT the window cut short
                if zombie.child is not None:
                    zombie.child.resume()
            result.fault_end = round(self.now(), 2)
            self.event("faults end")
            feeder.join()
            if feeder.error is not None:
                raise feeder.error
            self.finish(feeder)
        finally:
            self._stop_sampling.set()
            sampler.join(10)
            feeder.close()
            self.stop_all()

    def finish(self, feeder: _Feeder) -> None:
        """Drain, probe every partition, judge liveness."""
        result = self.result
        drain = _DRAIN.get(self.kind, 60.0)
        if not self.wait_until(lambda: not self.short(), time.monotonic() + drain):
            result.liveness.append(f"the group did not commit the input within {drain:.0f} s "
                                   f"of the faults' end: {self.short()} records short "
                                   "(partition: records)")
            return
        self.event("drained")
        feeder.write(self.partitions, tag="probe")
        self.event("probe", "", "one record per partition")
        if not self.wait_until(lambda: not self.short(), time.monotonic() + drain):
            result.liveness.append(f"the probe records were not committed within {drain:.0f} s: "
                                   f"{self.short()} short (partition: records)")
        self.event("probed")
        self.wait_until(lambda: all(z.ended is not None for z in self.zombies),
                        time.monotonic() + _ZOMBIE_EXIT)

    def stop_all(self) -> None:
        for instance in list(self.result.instances):
            child = instance.child
            if child is not None and instance.ended is None:
                child.resume()
                if instance.expect == "fenced" and child.alive:
                    child.kill()  # never fenced: Instance.problem says so (returncode None)
                    continue
                child.stop()
                self.reap(instance)
        self.run.close()

    # -- who wrote what ---------------------------------------------------------------------

    def register_producer_ids(self) -> None:
        """Learn each slot's producer id (kept across re-inits on both brokers) by one
        committed record per slot on a topic of the run's own."""
        slots = [f"w{n}" for n in range(self.schedule.workers)] + [
            f.target for f in self.schedule.faults if f.kind == "join"]
        topic = f"{self.run.output_topic}-ids"
        from eosclient.testing.topics import create_topic  # noqa: PLC0415

        create_topic(self.run.broker, topic, 1)
        for slot in slots:
            with TransactionalProducer(self.run.broker.bootstrap_servers,
                                       transactional_id=self.txn_id(slot)) as producer:
                producer.init_transactions(30)
                with producer.transaction():
                    producer.send(topic, slot.encode(), partition=0)
        for batch in read_raw_batches(self.run.broker.bootstrap_servers, topic, 0):
            if not batch.is_control:
                for record in batch.records():
                    self._producer_ids[batch.producer_id] = (record.value or b"").decode()

    def read_writes(self) -> None:
        """Every output batch: when, which slot's producer, which input partitions, and
        whether its transaction committed (the next marker of its producer says)."""
        servers = self.run.broker.bootstrap_servers
        lines = self.result.batch_lines
        for p in range(self.partitions):
            batches = read_raw_batches(servers, self.run.output_topic, p, timeout=60)
            open_: dict[int, list[tuple[float, dict[int, int]]]] = {}
            sources: dict[int, int]
            for batch in batches:
                slot = self._producer_ids.get(batch.producer_id, f"pid {batch.producer_id}")
                head = (f"{self.run.output_topic}/{p}@{batch.base_offset} {slot} "
                        f"pid {batch.producer_id} epoch {batch.producer_epoch}")
                if batch.is_control:
                    committed = batch.control_type is ControlType.COMMIT
                    lines.append(f"{head} {'COMMIT' if committed else 'ABORT'}")
                    for t, sources in open_.pop(batch.producer_id, []):
                        self.result.writes.append(Write(t, slot, sources, committed))
                    continue
                records = batch.records()
                if not records:
                    continue
                first = (dict(records[0].headers).get(SOURCE_HEADER) or b"-").decode()
                lines.append(f"{head} {len(records)} records from {first}")
                sources = {}
                for record in records:
                    src = dict(record.headers).get(SOURCE_HEADER)
                    if src is None:  # not a copy (the processor's fence probe, aborted)
                        continue
                    part = int(src.decode().rsplit("/", 2)[1])
                    sources[part] = sources.get(part, 0) + 1
                t = records[0].timestamp_ms / 1000 - self.started_wall
                open_.setdefault(batch.producer_id, []).append((round(t, 2), sources))


def run_nemesis(broker: RunningBroker, *, seed: int, duration: float = 60.0,
                records: int = 20_000, workers: int = 3, partitions: int = 6,
                max_records_per_transaction: int = 200, report_dir: Path | None = None,
                schedule: Schedule | None = None, asyncio: bool = False) -> NemesisResult:
    """Run the nemesis once on ``broker`` (shared is fine: the run's names are its own).

    Args:
        broker: The broker (not restarted).
        seed: Draws the schedule (:func:`make_schedule`) unless ``schedule`` is given.
        duration: Seconds of faults (the warm-up, the drain and the check come on top).
        records: Input records: a quarter before the workers start, the rest written during
            the first 80 % of the fault window.
        workers: ``eosclient copy`` processes in the group (extra members come on top).
        partitions: Partitions of the input and output topics.
        max_records_per_transaction: Each worker's transaction size.
        report_dir: Where the HTML report goes (``nemesis-<broker>-seed<N>.html``); None: none.
        schedule: Play this schedule instead of drawing one.
        asyncio: The workers run ``eosclient copy --asyncio`` (eosclient.aio's processor).

    Returns:
        The result; a run that could not be played at all has ``error`` set.
    """
    schedule = schedule or make_schedule(seed, duration=duration, workers=workers)
    print(schedule, flush=True)
    started = time.monotonic()
    nemesis = _Nemesis(broker, schedule, records=records, partitions=partitions,
                       max_records_per_transaction=max_records_per_transaction,
                       asyncio=asyncio)
    result = nemesis.result
    try:
        nemesis.play()
    except (EosError, OSError, TimeoutError) as exc:
        result.error = repr(exc)
    result.liveness += [p for i in result.instances if (p := i.problem()) is not None]
    if not result.error:
        try:
            result.report = nemesis.run.check(timeout=max(60.0, records / 500))
            nemesis.read_writes()
            result.liveness += _last_writers(result)
        except EosError as exc:
            result.error = f"checking: {exc!r}"
    result.seconds = round(time.monotonic() - started, 1)
    if report_dir is not None:
        from eosclient.testing._nemesis_report import write_report  # noqa: PLC0415

        result.report_path = write_report(result, report_dir)
        result.report_path.with_suffix(".log").write_text(_logs(result), encoding="utf-8")
        result.report_path.with_suffix(".batches.txt").write_text(
            "".join(line + "\n" for line in result.batch_lines), encoding="utf-8")
    return result


def _logs(result: NemesisResult) -> str:
    """Every process's output (its INFO log: group generations, assignments, errors), one
    after another, each under a line saying which process it was and how it ended."""
    parts = []
    for instance in result.instances:
        ended = ("running at the end" if instance.ended is None
                 else f"ended at {instance.ended:.1f} s, exit {instance.returncode}")
        pid = instance.child.pid if instance.child is not None else "-"
        parts.append(f"===== {instance.slot} ({instance.role}, pid {pid}), started at "
                     f"{instance.started:.1f} s, {ended}, expected {instance.expect}\n")
        parts += instance.child.output if instance.child is not None else []
    return "".join(parts)


def _last_writers(result: NemesisResult) -> list[str]:
    """Each input partition's last committed output must come from a worker alive at the end
    (the probe record went through it)."""
    if not result.samples or result.liveness:
        return []  # the drain or the probe failed already: that is the problem to read
    alive = set(result.samples[-1].alive)
    last: dict[int, Write] = {}
    for write in sorted(result.writes, key=lambda w: w.t):
        if write.committed:
            last.update(dict.fromkeys(write.sources, write))
    return [f"input partition {p}: last written by {w.slot} at {w.t:.1f} s, not alive at the "
            "end" for p, w in sorted(last.items()) if w.slot not in alive]


# -- the table and the command line ----------------------------------------------------------------

_HEADINGS: Final = ("broker", "seed", "lost", "dup", "ab-read", "order", "unexp", "liveness",
                    "faults", "inst", "s", "ok")


def format_row(result: NemesisResult) -> str:
    """One Markdown table row for ``result``."""
    cells = [result.broker, str(result.seed),
             *(str(result.count(k)) for k in ("lost", "duplicated", "aborted_read",
                                               "out_of_order", "unexpected")),
             "ok" if not result.liveness and not result.error else str(
                 len(result.liveness) or "error"),
             str(result.faults_injected), str(len(result.instances)), f"{result.seconds:.0f}",
             "yes" if not result.problems() else "NO"]
    return "| " + " | ".join(cells) + " |"


def format_table(results: Sequence[NemesisResult]) -> str:
    """A Markdown table of ``results``, one row each."""
    head = "| " + " | ".join(_HEADINGS) + " |"
    rule = "|" + "|".join("---" for _ in _HEADINGS) + "|"
    return "\n".join([head, rule, *(format_row(r) for r in results)])


def _seeds(text: str) -> list[int]:
    """``"1-20"``, ``"7"`` or ``"1,4,9-12"`` as a list of seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        seeds += range(int(low), int(high or low) + 1)
    return seeds


def main(argv: Sequence[str] | None = None) -> int:
    """Run seeds on a broker it starts, print a row per seed; exit 1 on any problem."""
    parser = argparse.ArgumentParser(prog="python -m eosclient.testing.nemesis",
                                     description="Composed faults against a group of "
                                     "`eosclient copy` processes, checked exactly once.")
    parser.add_argument("--broker", choices=BROKER_KINDS, default="noida")
    parser.add_argument("--seeds", type=_seeds, default=[1], help="e.g. 1-20 or 3,7 (1)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of faults (60)")
    parser.add_argument("--records", type=int, default=20_000, help="input records (20000)")
    parser.add_argument("--workers", type=int, default=3, help="copy processes (3)")
    parser.add_argument("--partitions", type=int, default=6, help="per topic (6)")
    parser.add_argument("--report-dir", type=Path, default=Path("nemesis-reports"),
                        help="where the HTML reports go (nemesis-reports)")
    parser.add_argument("--asyncio", action="store_true",
                        help="the workers run eosclient.aio's processor (copy --asyncio)")
    args = parser.parse_args(argv)
    results: list[NemesisResult] = []
    with start_broker(args.broker) as broker:
        for seed in args.seeds:
            result = run_nemesis(broker, seed=seed, duration=args.duration,
                                 records=args.records, workers=args.workers,
                                 partitions=args.partitions, report_dir=args.report_dir,
                                 asyncio=args.asyncio)
            results.append(result)
            print(format_table([result]).splitlines()[-1], flush=True)
            if result.problems():
                print(result.summary(), flush=True)
            print(f"report: {result.report_path}", flush=True)
    print()
    print(format_table(results))
    return 1 if any(r.problems() for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
