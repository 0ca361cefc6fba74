"""The harness behind :mod:`eosclient.testing.scenarios`: one copy run, its processors and its end.

Theory of operation. A :class:`Run` owns everything one scenario touches: an input topic filled
with ``records`` committed records spread over ``partitions`` partitions, an empty output topic,
one consumer group and one transactional.id (every processor of the run shares them, so each is
the restart or the zombie of the one before), a :class:`~eosclient.testing.proxy.KafkaProxy` in
front of the broker where faults are injected, and a seeded :class:`random.Random` that decides
which request a fault hits.

Processors run in one of two ways:

* :class:`Worker`: a thread that calls ``ExactlyOnceProcessor.run()`` and, as a supervisor
  would, builds a new processor with the same ids when one fails (fenced, timed out); each
  failure is kept in :attr:`Worker.failures`, and a scenario decides whether any is allowed.
* :class:`Child`: ``python -m eosclient.cli copy`` in a process of its own, for the faults
  that need a process to die (SIGKILL); its transaction counts come from its progress lines.

The run is done when the group's committed offsets (read with ``require_stable``, straight from
the broker, past the proxy) have reached the end of every input partition: then every input
record's effect is committed, whatever the processors believe. :meth:`Run.check` then reads both
topics directly from the broker with the checker.
"""

from __future__ import annotations

import logging
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from eosclient._core.types import TopicPartition
from eosclient._process import killed_with_parent
from eosclient.consumer import ReadCommittedConsumer
from eosclient.errors import EosError
from eosclient.processor import BatchTransform, ExactlyOnceProcessor, ProcessorStats
from eosclient.producer import TransactionalProducer
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import CheckReport, check
from eosclient.testing.proxy import KafkaProxy
from eosclient.testing.topics import create_topic

__all__ = ["Child", "Run", "Tally", "Worker"]

log = logging.getLogger("eosclient.testing.scenarios")

FILL_CHUNK: Final = 5_000  # input records per fill transaction
_POLL: Final = 0.2
_JOIN: Final = 30.0
# A copy told to stop hands its partitions over first: it may wait up to the processor's
# handoff bound (30 s) for its committed offsets to show (Tansu applies them late), then closes.
_EXIT: Final = 60.0
_STATS_LINE: Final = re.compile(
    r"records in (\d+), out (\d+), transactions committed (\d+), aborted (\d+)")
# A log line below WARNING in the CLI's format (the nemesis runs its workers at INFO).
_CHATTER: Final = re.compile(r"^\S+ \S+ (?:INFO|DEBUG) ")


@dataclass
class Tally:
    """What the processors of a run reported, summed over every instance."""

    instances: int = 0
    committed: int = 0
    aborted: int = 0
    failures: list[str] = field(default_factory=list)

    def add(self, committed: int, aborted: int) -> None:
        """One instance's transaction counts."""
        self.instances += 1
        self.committed += committed
        self.aborted += aborted


class Run:
    """One scenario's topics, ids, proxy and random source (see the module docstring).

    Args:
        broker: The broker; only scenarios that say so stop or restart it.
        name: The scenario's name (part of every topic and id made here).
        seed: Seeds :attr:`rng`.
        records: Input records to copy.
        partitions: Partitions of the input and output topics.
        max_records_per_transaction: Each processor's transaction size.
        producer_config: Producer settings every processor of the run gets.
    """

    def __init__(self, broker: RunningBroker, *, name: str, seed: int, records: int,
                 partitions: int, max_records_per_transaction: int,
                 producer_config: Mapping[str, object]) -> None:
        self.broker = broker
        self.seed = seed
        self.records = records
        self.rng = random.Random(seed)
        tag = f"{name}-{seed}-{uuid.uuid4().hex[:8]}"
        self.input_topic = create_topic(broker, f"scn-in-{tag}", partitions)
        self.output_topic = create_topic(broker, f"scn-out-{tag}", partitions)
        self.group = f"scn-group-{tag}"
        self.transactional_id = f"scn-txn-{tag}"
        self.max_records_per_transaction = max_records_per_transaction
        self.producer_config = dict(producer_config)
        # Tansu holds a group's JoinGroup for about half the session timeout, on every join
        # (a restarted copy's too): 6 s, noida-db's smallest, keeps each join near 3 s.
        self.consumer_config: dict[str, object] = {
            "fetch.max.wait.ms": 100, "session.timeout.ms": 6_000,
            "heartbeat.interval.ms": 1_000}
        self.tally = Tally()
        self.completed = False  # set once the group committed the whole input (never undone)
        self.faults = 0
        self.fault_kinds: dict[str, int] = {}
        self.ends = self._fill(partitions)
        self._monitor: ReadCommittedConsumer | None = None
        self.proxy = KafkaProxy(broker.host, broker.port).start()

    def close(self) -> None:
        """Close the proxy and the offset reader (processors are the scenario's to stop)."""
        self.proxy.close()
        if self._monitor is not None:
            self._monitor.close()
            self._monitor = None

    def fault(self, kind: str, count: int = 1) -> None:
        """Count ``count`` faults of ``kind`` as injected."""
        self.faults += count
        self.fault_kinds[kind] = self.fault_kinds.get(kind, 0) + count

    # -- input --------------------------------------------------------------------------------

    def _fill(self, partitions: int) -> dict[TopicPartition, int]:
        """Write the input; return each partition's offset after its last record."""
        ends: dict[TopicPartition, int] = {}
        with TransactionalProducer(self.broker.bootstrap_servers, linger_ms=5,
                                   transactional_id=f"{self.transactional_id}-fill") as producer:
            producer.init_transactions(30)
            for start in range(0, self.records, FILL_CHUNK):
                producer.begin_transaction()
                futures = []
                for p in range(partitions):
                    values = [f"{self.seed}:{i}".encode() for i in
                              range(start + p, min(start + FILL_CHUNK, self.records), partitions)]
                    if values:
                        futures.append(producer.send_batch(self.input_topic, values, partition=p))
                producer.commit_transaction(60)
                for future in futures:
                    for md in future.result(0):
                        tp = TopicPartition(md.topic, md.partition)
                        ends[tp] = max(ends.get(tp, 0), md.offset + md.record_count)
        return ends

    # -- processors ---------------------------------------------------------------------------

    def processor(self, *, direct: bool = False, transactional_id: str | None = None,
                  producer_config: Mapping[str, object] | None = None,
                  consumer_config: Mapping[str, object] | None = None,
                  batch_fn: BatchTransform | None = None) -> ExactlyOnceProcessor:
        """A processor of this run, through the proxy unless ``direct``; the configs add to
        the run's."""
        servers = self.broker.bootstrap_servers if direct else self.proxy.bootstrap_servers
        return ExactlyOnceProcessor(
            bootstrap_servers=servers, input_topics=[self.input_topic],
            output_topic=self.output_topic, group_id=self.group,
            transactional_id=transactional_id or self.transactional_id,
            max_records_per_transaction=self.max_records_per_transaction,
            commit_interval_ms=100, batch_fn=batch_fn,
            producer_config={**self.producer_config, **(producer_config or {})},
            consumer_config={**self.consumer_config, **(consumer_config or {})})

    def worker(self, *, direct: bool = False, restart: bool = True,
               transactional_id: str | None = None,
               consumer_config: Mapping[str, object] | None = None,
               batch_fn: BatchTransform | None = None) -> Worker:
        """Start a :class:`Worker` whose processors this run builds (another instance of the
        group when given its own ``transactional_id``)."""
        return Worker(lambda: self.processor(direct=direct, transactional_id=transactional_id,
                                             consumer_config=consumer_config,
                                             batch_fn=batch_fn),
                      self.tally, restart=restart)

    def child(self, *, transactional_id: str | None = None,
              consumer_config: Mapping[str, object] | None = None,
              log_level: str = "warning", asyncio: bool = False) -> Child:
        """Start ``eosclient copy`` for this run, through the proxy (another instance of the
        group when given its own ``transactional_id``; the configs add to the run's;
        ``asyncio``: ``copy --asyncio``)."""
        command = [sys.executable, "-m", "eosclient.cli", "copy", "--input", self.input_topic,
                   "--output", self.output_topic, "--group", self.group,
                   "--transactional-id", transactional_id or self.transactional_id,
                   "--bootstrap-servers", self.proxy.bootstrap_servers,
                   "--max-records-per-transaction", str(self.max_records_per_transaction),
                   "--progress-interval", "0.2", "--log-level", log_level]
        if asyncio:
            command.append("--asyncio")
        for key, value in {**self.consumer_config, **(consumer_config or {})}.items():
            command += ["--consumer-property", f"{key}={value}"]
        for key, value in self.producer_config.items():
            command += ["--producer-property", f"{key}={value}"]
        return Child(command, self.tally)

    # -- the end ------------------------------------------------------------------------------

    def committed(self, timeout: float = 5.0) -> dict[TopicPartition, int]:
        """The group's committed offsets now (0 where none), read past the proxy.

        Raises:
            EosError: not read within ``timeout`` (the next call starts a new reader).
        """
        if self._monitor is None:
            self._monitor = ReadCommittedConsumer(self.broker.bootstrap_servers,
                                                  group_id=self.group)
        try:
            found = self._monitor.committed(list(self.ends), timeout)
        except EosError:
            self._monitor.close()
            self._monitor = None
            raise
        return {tp: offset or 0 for tp, offset in found.items()}

    def progress(self) -> float:
        """The committed fraction of the input, 0..1 (0 when it cannot be read now; 1 once it
        was 1: committed offsets never go back)."""
        if self.completed:
            return 1.0
        try:
            committed = self.committed(5.0)
        except EosError as exc:
            log.debug("committed offsets not read: %r", exc)
            return 0.0
        total = sum(self.ends.values())
        done = sum(min(committed[tp], end) for tp, end in self.ends.items()) / max(total, 1)
        self.completed = done >= 1.0
        return done

    def wait_progress(self, fraction: float, deadline: float,
                      alive: Callable[[], bool] = lambda: True) -> bool:
        """Wait until :meth:`progress` reaches ``fraction``; False at ``deadline`` or when
        ``alive()`` turns False."""
        while time.monotonic() < deadline and alive():
            if self.progress() >= fraction:
                return True
            time.sleep(_POLL)
        return self.progress() >= fraction

    def check(self, timeout: float = 120.0) -> CheckReport:
        """Run the checker on both topics, straight from the broker."""
        return check(self.broker.bootstrap_servers, self.input_topic, self.output_topic,
                     timeout=timeout)


class Worker:
    """A thread running processors one after another until :meth:`stop` (see module doc)."""

    def __init__(self, make: Callable[[], ExactlyOnceProcessor], tally: Tally, *,
                 restart: bool = True) -> None:
        self._make = make
        self._tally = tally
        self._restart = restart
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._current: ExactlyOnceProcessor | None = None
        self.failures: list[BaseException] = []
        self._thread = threading.Thread(target=self._main, name="scenario-worker", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the thread still runs processors."""
        return self._thread.is_alive()

    @property
    def records_in(self) -> int:
        """Input records the current processor committed (0 before it has one)."""
        with self._lock:
            return self._current.stats.records_in if self._current is not None else 0

    def stop(self, timeout: float = _JOIN) -> None:
        """Stop the running processor (it commits what it holds) and join the thread."""
        self._stopping.set()
        with self._lock:
            if self._current is not None:
                self._current.stop()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"a processor did not stop within {timeout} s")

    def _main(self) -> None:
        while not self._stopping.is_set():
            processor = self._make()
            with self._lock:
                if self._stopping.is_set():
                    return
                self._current = processor
            try:
                processor.run()
            except Exception as exc:  # a supervisor's view: note it, start a new instance
                log.info("processor failed: %r", exc)
                self.failures.append(exc)
                self._tally.failures.append(repr(exc))
                if not self._restart:
                    self._stopping.set()
            finally:
                stats: ProcessorStats = processor.stats
                self._tally.add(stats.transactions_committed, stats.transactions_aborted)


class Child:
    """``eosclient copy`` as a child process, with its last progress line kept.

    Start it from a thread that outlives it (the main thread): it is SIGKILLed when that thread
    ends, stopped or not (:func:`~eosclient._process.killed_with_parent`).
    """

    def __init__(self, command: list[str], tally: Tally) -> None:
        self._tally = tally
        self.last: tuple[int, int] = (0, 0)  # (committed, aborted) from the last progress line
        self.records_in = 0  # input records committed, from the last progress line
        self.output: list[str] = []
        self.ready = threading.Event()  # set by the first progress line: signals are handled
        self._proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                      preexec_fn=killed_with_parent)  # noqa: PLW1509 - a prctl()
        self._reader = threading.Thread(target=self._read, name="scenario-child", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        """Whether the process runs."""
        return self._proc.poll() is None

    @property
    def pid(self) -> int:
        """The process id."""
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit status (minus the signal that ended it), None while it runs."""
        return self._proc.poll()

    def pause(self) -> None:
        """SIGSTOP: the process stops where it is (a GC pause, a frozen VM)."""
        if self.alive:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self.alive:
            self._proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL, as a crash would (for a process that already ended: collect it)."""
        self._finish(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM once the copy handles it: it commits what it holds and exits."""
        until = time.monotonic() + _JOIN
        while self.alive and not self.ready.wait(_POLL) and time.monotonic() < until:
            pass
        self._finish(signal.SIGTERM)

    def _finish(self, sig: signal.Signals) -> None:
        if self._proc.poll() is None:
            self._proc.send_signal(sig)
        try:
            self._proc.wait(_EXIT if sig is signal.SIGTERM else _JOIN)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(_JOIN)
        self._reader.join(_JOIN)
        if self._proc.returncode not in (0, -signal.SIGKILL):
            self._tally.failures.append(f"copy exited {self._proc.returncode}: "
                                        f"{self.notable(5)}")
        self._tally.add(*self.last)

    def notable(self, lines: int) -> str:
        """Its last ``lines`` lines of output, INFO and DEBUG log lines left out."""
        return "".join([line for line in self.output if not _CHATTER.match(line)][-lines:])

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            found = _STATS_LINE.search(line)
            if found:
                self.ready.set()
                self.records_in = int(found.group(1))
                self.last = (int(found.group(3)), int(found.group(4)))
            else:
                self.output.append(line)
