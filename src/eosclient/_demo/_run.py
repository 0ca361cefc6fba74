"""The demo's run, phase by phase (see :mod:`eosclient._demo`)."""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from eosclient._core.types import TopicPartition
from eosclient._demo._copier import CopierCounts, CopierProcess
from eosclient._demo._data import committed_offsets, write_input
from eosclient._demo._plan import Fault, kill_trigger, plan
from eosclient._demo._progress import Screen
from eosclient._demo._report import DemoResult, FaultOutcome
from eosclient.errors import EosError
from eosclient.testing.brokers import BrokerError, BrokerKind, RunningBroker, start_broker
from eosclient.testing.checker import check
from eosclient.testing.proxy import KafkaProxy
from eosclient.testing.topics import create_topic

__all__ = ["DemoOptions", "run"]

_BROKER_NAMES: Final = {"noida": "noida-db", "tansu": "Tansu"}
_TICK: Final = 0.05  # seconds between two looks at the processors (the bar's refresh)
_KILL_WAIT: Final = 30.0  # seconds for processor 1 to send its next EndTxn
_OFFSETS_EVERY: Final = 0.25  # seconds between two reads of the group's committed offsets
_INPUT, _OUTPUT, _GROUP, _TXN_ID = "demo-input", "demo-output", "demo-copier", "demo-copier-1"
# Settings of the processor: a request lost by the proxy is given up after 1.5 s (not 30 s), a
# group join waits for nobody (one member), the session outlasts the restart (static member).
_PRODUCER: Final = {"request.timeout.ms": 1500}
_CONSUMER: Final = {"session.timeout.ms": 30000, "heartbeat.interval.ms": 1000,
                    "fetch.max.wait.ms": 100, "request.timeout.ms": 5000}


class DemoFailedError(Exception):
    """The run cannot go on (a processor died, a wait timed out); the message says why."""


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What ``eosclient demo`` was asked for.

    Attributes:
        records: Input records to copy.
        partitions: Partitions of the input and output topics.
        broker: ``"noida"`` or ``"tansu"``.
        seed: Seeds where the faults strike and when the kill comes (None: a random one).
        per_transaction: Input records per processor transaction at most; by default about
            1/250 of ``records`` (10 to 500), so that every run has the transactions the
            faults are placed in.
        timeout: Seconds the whole run may take.
    """

    records: int = 50_000
    partitions: int = 4
    broker: BrokerKind = "noida"
    seed: int | None = None
    per_transaction: int | None = None
    timeout: float = 300.0


def run(options: DemoOptions, screen: Screen) -> DemoResult:
    """Run the demo; every process it started is stopped when this returns or raises.

    Returns the result, failed or not. KeyboardInterrupt passes through (after the clean-up).
    """
    seed = options.seed if options.seed is not None else random.randrange(1, 10_000)
    result = DemoResult(_BROKER_NAMES[options.broker], seed)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="eosclient-demo-"))
    try:
        with ExitStack() as stack:
            _Run(options, screen, result, work, stack).go(random.Random(seed))
    except (DemoFailedError, BrokerError, EosError, OSError) as exc:
        result.error = str(exc) or type(exc).__name__
    except BaseException:  # Ctrl-C: everything is stopped by now; leave nothing behind either
        shutil.rmtree(work, ignore_errors=True)
        raise
    result.elapsed = time.monotonic() - started
    if result.ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        result.work_dir = str(work)  # the logs, for whoever looks into the failure
    return result


class _Run:
    """One run's state: the broker, the proxy, the processors, the result being filled in."""

    def __init__(self, options: DemoOptions, screen: Screen, result: DemoResult, work: Path,
                 stack: ExitStack) -> None:
        self.options, self.screen, self.result = options, screen, result
        self.work, self.stack = work, stack
        self.deadline = time.monotonic() + options.timeout
        self.copiers: list[CopierProcess] = []
        self.inputs = [TopicPartition(_INPUT, p) for p in range(options.partitions)]
        self.per_transaction = options.per_transaction or min(500, max(10, options.records // 250))
        self.aborted_ids: list[str] = []
        self.ends: dict[TopicPartition, int] = {}

    def go(self, rng: random.Random) -> None:
        first, second = plan(rng)
        try:
            self.phases(rng, first, second)
        finally:
            self.result.faults = [FaultOutcome(f.label, f.rule.fired > 0)
                                  for f in first + second]

    def phases(self, rng: random.Random, first: list[Fault], second: list[Fault]) -> None:
        broker, proxy = self.start_broker()
        self.write(broker)
        kill_at = rng.uniform(0.45, 0.65)
        self.screen.say(f"[3/5] processor 1 copies through the proxy, meeting faults; "
                        f"SIGKILL at ~{kill_at:.0%}")
        self.arm(proxy, first)
        one = self.start_copier(proxy)
        self.follow(lambda: self.copied() >= kill_at * self.result.records
                    and all(f.rule.fired for f in first), first, broker)
        self.kill(proxy, one)
        self.screen.say("[4/5] processor 2 restarts with the same transactional.id and "
                        "group.instance.id")
        self.arm(proxy, second)
        self.restart(proxy)
        self.follow(lambda: False, first + second, broker, until_copied=True)
        self.stop_copiers()
        self.verify(broker)

    # -- phases ---------------------------------------------------------------------------------

    def start_broker(self) -> tuple[RunningBroker, KafkaProxy]:
        """Phase 1: the broker, the proxy in front of it; both stopped with the stack."""
        kind = self.options.broker
        self.screen.say(f"[1/5] starting {self.result.broker} and a fault-injecting proxy")
        broker = self.stack.enter_context(start_broker(kind, log_dir=self.work))
        proxy = self.stack.enter_context(KafkaProxy(broker.host, broker.port))
        self.stack.callback(self.kill_copiers)  # runs first: the copiers go before the broker
        self.screen.say(f"      broker {broker.bootstrap_servers} (pid {broker.pid}), "
                        f"proxy {proxy.bootstrap_servers}")
        return broker, proxy

    def write(self, broker: RunningBroker) -> None:
        """Phase 2: both topics, and the input (straight to the broker, no faults)."""
        n, partitions = self.options.records, self.options.partitions
        self.screen.say(f"[2/5] writing {n:,} input records to {partitions} partitions, "
                        "with aborted transactions between the committed ones")
        for topic in (_INPUT, _OUTPUT):
            create_topic(broker, topic, partitions)
        written = write_input(broker, _INPUT, partitions, n,
                              progress=lambda done: self.screen.progress(done, n, "written"))
        self.screen.end_bar()
        self.result.records, self.result.aborted_input = written.records, len(written.aborted_ids)
        self.aborted_ids, self.ends = written.aborted_ids, written.next_offsets
        self.screen.say(f"      {written.records:,} committed in {written.transactions} "
                        f"transactions, {len(written.aborted_ids)} in aborted ones")

    def arm(self, proxy: KafkaProxy, faults: list[Fault]) -> None:
        for fault in faults:
            proxy.add_rule(fault.rule)

    def start_copier(self, proxy: KafkaProxy) -> CopierProcess:
        """A new ``eosclient copy`` process through the proxy, the same ids every time."""
        number = len(self.copiers) + 1
        arguments = ["--input", _INPUT, "--output", _OUTPUT, "--group", _GROUP,
                     "--transactional-id", _TXN_ID, "--bootstrap-servers",
                     proxy.bootstrap_servers, "--max-records-per-transaction",
                     str(self.per_transaction), "--progress-interval", "3600"]
        for flag, settings in (("--producer-property", _PRODUCER),
                               ("--consumer-property", _CONSUMER)):
            for key, value in settings.items():
                arguments += [flag, f"{key}={value}"]
        copier = CopierProcess(arguments, self.work / f"processor-{number}.log")
        self.copiers.append(copier)
        self.result.processors.append(copier.counts())
        self.screen.say(f"      processor {number}: pid {copier.pid}")
        return copier

    def kill(self, proxy: KafkaProxy, copier: CopierProcess) -> None:
        """SIGKILL ``copier`` while the proxy holds its next EndTxn (records in the log)."""
        trigger = proxy.add_rule(kill_trigger())
        if not proxy.wait_fired(trigger, max(0.0, min(self.left(), _KILL_WAIT))):
            raise DemoFailedError("processor 1 sent no EndTxn request to be killed at")
        copier.kill()
        self.screen.end_bar()
        self.result.killed_open += 1
        counts = self.sync_counts()[-1]
        self.screen.say(f"      SIGKILL with a transaction's records in the log, its commit held, "
                        f"after {counts.committed} commits ({counts.records_in:,} records)")

    def restart(self, proxy: KafkaProxy) -> None:
        """Phase 4: a new process with the same ids; return once it has committed."""
        started = time.monotonic()
        copier = self.start_copier(proxy)
        while not copier.first_commit.wait(_TICK):
            self.check_alive(copier)
            if self.left() <= 0:
                raise DemoFailedError("the restarted processor committed nothing in time")
        self.result.takeover = time.monotonic() - started
        self.screen.say(f"      it fenced the old one and took over: first commit after "
                        f"{self.result.takeover:.1f} s")

    def follow(self, done: Callable[[], bool], faults: list[Fault], broker: RunningBroker, *,
               until_copied: bool = False) -> None:
        """Show progress and the faults as they fire, until ``done()`` or, with
        ``until_copied``, until the group's committed offsets reach the input's ends."""
        announced = {id(f) for f in faults if f.rule.fired}
        next_look = 0.0
        while not done():
            if not until_copied and self.copied() >= self.result.records:
                raise DemoFailedError("processor 1 copied everything before the faults were all "
                                      "injected: give the demo more --records")
            for fault in faults:
                if fault.rule.fired and id(fault) not in announced:
                    announced.add(id(fault))
                    self.screen.say(f"      fault: {fault.label} -> {fault.expect}")
            self.screen.progress(self.copied(), self.result.records, "copied, committed")
            self.check_alive(self.copiers[-1])
            if until_copied and time.monotonic() >= next_look:
                next_look = time.monotonic() + _OFFSETS_EVERY
                if committed_offsets(broker, _GROUP, self.inputs) == self.ends:
                    break
            if self.left() <= 0:
                raise DemoFailedError(f"the copy did not finish in {self.options.timeout:.0f} s")
            time.sleep(_TICK)  # a display refresh, not a synchronisation
        self.screen.progress(self.copied(), self.result.records, "copied, committed")

    def stop_copiers(self) -> None:
        """SIGTERM the live processor (it commits what is open); any status but 0 fails."""
        for number, copier in enumerate(self.copiers, 1):
            status = copier.stop()
            if status not in (0, -9):
                raise DemoFailedError(f"processor {number} exited with status {status}")
        self.screen.end_bar()
        self.sync_counts()

    def verify(self, broker: RunningBroker) -> None:
        """Phase 5: the checker reads both topics from the broker itself, not the proxy."""
        self.screen.say("[5/5] checking: both topics read back with read_committed")
        self.result.check = check(broker.bootstrap_servers, _INPUT, _OUTPUT,
                                  aborted=self.aborted_ids, timeout=max(10.0, self.left()))

    # -- helpers --------------------------------------------------------------------------------

    def copied(self) -> int:
        """Input records whose transactions committed, as the processors reported them."""
        return sum(c.records_in for c in self.sync_counts())

    def sync_counts(self) -> list[CopierCounts]:
        self.result.processors = [c.counts() for c in self.copiers]
        return self.result.processors

    def check_alive(self, copier: CopierProcess) -> None:
        if copier.returncode is not None:
            last = copier.last_line()
            raise DemoFailedError(f"processor {len(self.copiers)} exited with status "
                                  f"{copier.returncode}: {last}")

    def kill_copiers(self) -> None:
        for copier in self.copiers:
            copier.kill()

    def left(self) -> float:
        return self.deadline - time.monotonic()

