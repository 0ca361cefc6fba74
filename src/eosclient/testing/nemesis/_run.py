"""One nemesis run: the run's topics and proxy, the feeder writing the input, the workers
started, stopped and signalled as the schedule's steps say, the sampler, and at the end the
checker and who wrote what (:mod:`eosclient.testing.nemesis` has the theory of operation).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from eosclient._core.decode import ControlType
from eosclient._core.types import TopicPartition
from eosclient.errors import EosError
from eosclient.producer import TransactionalProducer
from eosclient.testing._scenario_run import Run
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import SOURCE_HEADER
from eosclient.testing.nemesis._report import write_report
from eosclient.testing.nemesis._result import Event, Instance, NemesisResult, Sample, Write
from eosclient.testing.nemesis._schedule import (
    DROP_APIS,
    SESSION_TIMEOUT_MS,
    Schedule,
    Step,
    make_schedule,
    steps,
)
from eosclient.testing.proxy import DropResponse, Rule
from eosclient.testing.reader import read_raw_batches

__all__ = ["run_nemesis"]

log = logging.getLogger("eosclient.testing.nemesis")

_SAMPLE: Final = 0.5
_TICK: Final = 0.25  # the feeder writes a transaction this often
_ZOMBIE_EXIT: Final = 30.0  # a resumed zombie must have exited this long after the run
_PRODUCER_CONFIG: Final = {"request.timeout.ms": 2000, "retry.backoff.ms": 20}
# Seconds to wait for the first commit, to drain, and for the probe, by broker (Tansu holds
# each group join for about half the session timeout and a rebalance may take several joins,
# and a fault late in the window may cost one more).
_WARMUP: Final = {"noida": 20.0, "tansu": 60.0}
_DRAIN: Final = {"noida": 45.0, "tansu": 120.0}


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
    """One run in progress: the workers, the clock, the sampler (see
    :mod:`eosclient.testing.nemesis`)."""

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
        self.run.consumer_config.update({"session.timeout.ms": SESSION_TIMEOUT_MS,
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

    def do(self, step: Step) -> None:
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
            for step in steps(self.schedule):
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
