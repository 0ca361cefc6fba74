"""The consumer benchmark: eosclient beside confluent-kafka and kafka-python, in one run.

Run: ``.venv/bin/python benchmarks/consumer.py [--quick] [--repeat 1] [--tls] [--json out.json]``.

Method
------
**throughput** (noida-db): one topic of 4 partitions holds ``--transactions`` transactions of
``--records`` 100-byte records each (spread over the partitions), written by one confluent-kafka
transactional producer; every other transaction is aborted. Each client reads the whole topic
read_committed from offset 0 with ``assign()`` (no group), 500 records per poll, until it holds
every committed record; records/s = committed records / seconds from the first poll to the last
record (the headline); the *steady* rows time the same reads from the first records delivered
to the last (records after the first poll / that time), leaving out the first Fetch's wait: on
noida-db it takes 60-80 ms from offset 0 whichever client asks (aiokafka's too), most of the
timed window at the default size, so the headline ratios between fast readers are bounded by it;
the steady ones show each client's own cost. The *cpu* rows: the process's CPU seconds over
the headline window per million committed records (every thread of the process, so
librdkafka's too; the broker runs elsewhere). The clients: eosclient ``poll()`` and
``poll_batch()`` twice, its values taken as one buffer per partition (``values_buffer()``:
Arrow's binary layout, no object per record; the check makes them bytes after the clock stops)
and as lists of bytes (``.values``), confluent-kafka ``consume(500)``,
kafka-python ``poll(max_records=500)``, and the asyncio readers: eosclient.aio ``await poll()``,
``await getmany()`` and ``await poll_batch()`` (the batch path: the target's row) and aiokafka
``await getmany(max_records=500)``, each on a fresh event loop. Whether eosclient's codec runs
compiled or pure Python is printed (``EOSCLIENT_PURE_PYTHON=1`` forces pure). Afterwards
(untimed) every client's records are checked: exactly the committed set, no aborted record, none
twice. Runs are interleaved over ``--repeat``. And a floor: one connection Fetching every
partition read_committed until the LSO, nothing decoded (batch headers walked for the next
offset), the broker's own part of the time of any reader that asks for all its partitions in
each Fetch, as every client here does; ``floor / confluent-kafka`` is the most such a reader
could reach against it in that run (it has no steady row; see benchmarks/README.md).
With ``--tls`` every reader goes through one TLS front (`KafkaProxy` with a throwaway CA's
certificate, in a process of its own) with the same settings: ``security.protocol=SSL``,
``ssl.ca.location`` = the CA, host name checked (one dict for eosclient and confluent-kafka,
kafka-python's keywords for the same); the topic is written straight to the broker. The front
decrypts in Python on the same two cores, so it bounds every reader alike: read the ratios.
Only the throughput scenario runs over TLS.

**modes** (noida-db and Tansu): what marker-first filtering costs. Two confluent-kafka
producers share one partition: B writes ``--mode-records`` records, C begins a transaction and
writes one record, B commits, C commits ``--hold-ms`` later. B's COMMIT marker then lies past the
LSO (C is open) until C commits: a consumer in *marker mode* holds B's records until then; one in
*index mode* (the broker has proved its aborted-transactions index) releases them at once, since
they are below the LSO and not listed as aborted. Measured per round: the delivery latency (B's
``commit_transaction`` returning -> eosclient ``poll()`` returning B's last record), and the peak
of the filters' ``held_bytes``/``held_records`` (read from the consumer's partition states: the
memory marker mode costs). Three rows: noida-db with one aborted transaction written first (it
proves its index: index mode), noida-db without one (never proven: marker mode), and Tansu (no
index: marker mode always). The consumer runs with ``fetch.max.wait.ms`` 10, so that a broker
holding an empty Fetch does not dominate the latency. Tansu 0.6.0 keeps the LSO at B's first
offset while C is open, even after B committed (Kafka and noida-db move it to C's first offset),
so there no client sees B's records before C commits, in either mode: its row shows the broker.

Caveats: two cores shared by broker, producers and consumers; compare ratios from one run. noida-
db leaves aborted data out of read_committed Fetch answers, so every client receives only
committed data and markers there; the difference between the clients is their own cost per record.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.metadata
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final

import _harness
import _report as report
import aiokafka
import confluent_kafka as ck
import kafka

import eosclient
from eosclient import BinaryColumn, ReadCommittedConsumer, TopicPartition
from eosclient.aio import AsyncReadCommittedConsumer
from eosclient.testing.brokers import RunningBroker, start_broker
from eosclient.testing.topics import create_topic

PARTITIONS = 4  # the topic's; --partitions sets it once, before anything runs
VALUE_SIZE: Final = 100
POLL_RECORDS: Final = 500
RUN_TIMEOUT: Final = 300.0
DEFAULTS: Final = {"transactions": 400, "records": 1000, "rounds": 40, "repeat": 1}
QUICK: Final = {"transactions": 60, "records": 1000, "rounds": 10, "repeat": 1}

Reader = Callable[[str, str, int, "_harness.Tls | None"], tuple[list[bytes], float]]


def value(committed: bool, n: int) -> bytes:
    """A 100-byte value that says whether it was committed, and which one it is."""
    return (b"c" if committed else b"a") + b"%09d" % n + b"x" * (VALUE_SIZE - 10)


def write_topic(broker: RunningBroker, topic: str, transactions: int, records: int) -> int:
    """Half the transactions committed, half aborted; returns the committed record count."""
    create_topic(broker, topic, PARTITIONS)
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5,
                            "transactional.id": f"{topic}-writer"})
    producer.init_transactions(30)
    n = 0
    for t in range(transactions):
        producer.begin_transaction()
        for i in range(records):
            producer.produce(topic, value(t % 2 == 0, n), partition=i % PARTITIONS)
            n += 1
            if i % 10_000 == 9_999:
                producer.poll(0)
        if t % 2:
            # Delivered first: abort purges what is still queued, and at 1,000 partitions
            # (one record per partition per batch) the purged sequence numbers left a gap that
            # failed the next commit (OUT_OF_ORDER_SEQUENCE_NUMBER); and aborted data that was
            # never written would test nothing.
            producer.flush(60)
        (producer.commit_transaction if t % 2 == 0 else producer.abort_transaction)(60)
    return (transactions + 1) // 2 * records


# --- the readers: everything read_committed from offset 0, timed from the first poll ----------


class Timing:
    """A read's clock: from the first poll to the last record (the headline rate), and from
    the first records to the last (``steady``: the first Fetch's wait left out; on noida-db it
    takes 60-80 ms from offset 0 whoever asks, most of the window at the default size)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.cpu_start = time.process_time()  # every thread of the process: librdkafka's too
        self.first_at = 0.0
        self.first_count = 0
        self.elapsed = self.steady = self.cpu = 0.0

    def saw(self, count: int) -> None:
        """Before each poll: ``count`` records held so far."""
        if count and not self.first_count:
            self.first_at, self.first_count = time.perf_counter(), count

    def stop(self, count: int) -> None:
        end = time.perf_counter()
        self.elapsed = end - self.start
        self.cpu = time.process_time() - self.cpu_start
        if self.first_count and end > self.first_at:
            self.steady = (count - self.first_count) / (end - self.first_at)



def read_eosclient(servers: str, topic: str, expected: int,
                   tls: _harness.Tls | None = None) -> tuple[list[bytes], Timing]:
    consumer = ReadCommittedConsumer(servers, config={"auto.offset.reset": "earliest",
                                                      **(tls.settings if tls else {})})
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    got: list[Any] = []
    timing = Timing()
    while len(got) < expected:
        timing.saw(len(got))
        got += [r.value for r in consumer.poll(5.0, max_records=POLL_RECORDS)]
    timing.stop(len(got))
    consumer.close()
    return got, timing


def read_eosclient_batch(servers: str, topic: str, expected: int,
                         tls: _harness.Tls | None = None) -> tuple[list[bytes], Timing]:
    """poll_batch(), each partition's values taken as one buffer and offsets (Arrow's layout:
    no object per record); made into bytes objects for the check after the clock stops."""
    consumer = ReadCommittedConsumer(servers, config={"auto.offset.reset": "earliest",
                                                      **(tls.settings if tls else {})})
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    buffers: list[BinaryColumn] = []
    count = 0
    timing = Timing()
    while count < expected:
        timing.saw(count)
        for columns in consumer.poll_batch(5.0, max_records=POLL_RECORDS).values():
            buffers.append(columns.values_buffer())
            count += len(columns)
    timing.stop(count)
    consumer.close()
    return [v for column in buffers for v in column if v is not None], timing


def read_eosclient_batch_lists(servers: str, topic: str, expected: int,
                               tls: _harness.Tls | None = None) -> tuple[list[bytes], Timing]:
    """poll_batch(), each partition's values taken as a list of bytes (one object each)."""
    consumer = ReadCommittedConsumer(servers, config={"auto.offset.reset": "earliest",
                                                      **(tls.settings if tls else {})})
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    got: list[Any] = []
    timing = Timing()
    while len(got) < expected:
        timing.saw(len(got))
        for columns in consumer.poll_batch(5.0, max_records=POLL_RECORDS).values():
            got += columns.values
    timing.stop(len(got))
    consumer.close()
    return got, timing


def read_confluent(servers: str, topic: str, expected: int,
                   tls: _harness.Tls | None = None) -> tuple[list[bytes], Timing]:
    consumer = ck.Consumer({"bootstrap.servers": servers, "group.id": f"{topic}-ck",
                            "isolation.level": "read_committed", "enable.auto.commit": False,
                            **(tls.settings if tls else {})})
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[Any] = []
    timing = Timing()
    while len(got) < expected:
        timing.saw(len(got))
        got += [m.value() for m in consumer.consume(POLL_RECORDS, 5.0) if m.error() is None]
    timing.stop(len(got))
    consumer.close()
    return got, timing


def read_kafka_python(servers: str, topic: str, expected: int,
                      tls: _harness.Tls | None = None) -> tuple[list[bytes], Timing]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=servers, isolation_level="read_committed",
                                   enable_auto_commit=False, auto_offset_reset="earliest",
                                   **(tls.kafka_python if tls else {}))
    consumer.assign([kafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
    got: list[Any] = []
    timing = Timing()
    while len(got) < expected:
        timing.saw(len(got))
        for batch in consumer.poll(timeout_ms=5000, max_records=POLL_RECORDS).values():
            got += [r.value for r in batch]
    timing.stop(len(got))
    consumer.close()
    return got, timing


def _read_eosclient_aio(servers: str, topic: str, expected: int, tls: _harness.Tls | None,
                        take: Callable[[AsyncReadCommittedConsumer], Awaitable[list[Any]]],
                        ) -> tuple[list[bytes], Timing]:
    """Read ``expected`` values with eosclient.aio, each call of ``take`` giving the next ones."""
    async def read() -> tuple[list[bytes], Timing]:
        consumer = AsyncReadCommittedConsumer(servers, config={
            "auto.offset.reset": "earliest", **(tls.settings if tls else {})})
        await consumer.start()
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        got: list[Any] = []
        timing = Timing()
        while len(got) < expected:
            timing.saw(len(got))
            got += await take(consumer)
        timing.stop(len(got))
        await consumer.close()
        return got, timing

    return asyncio.run(read())


def read_eosclient_aio(servers: str, topic: str, expected: int,
                       tls: _harness.Tls | None = None) -> tuple[list[bytes], Timing]:
    async def take(consumer: AsyncReadCommittedConsumer) -> list[Any]:
        return [r.value for r in await consumer.poll(5.0, max_records=POLL_RECORDS)]

    return _read_eosclient_aio(servers, topic, expected, tls, take)


def read_eosclient_aio_batch(servers: str, topic: str, expected: int,
                             tls: _harness.Tls | None = None) -> tuple[list[bytes], Timing]:
    async def take(consumer: AsyncReadCommittedConsumer) -> list[Any]:
        got: list[Any] = []
        for columns in (await consumer.poll_batch(5.0, max_records=POLL_RECORDS)).values():
            got += columns.values
        return got

    return _read_eosclient_aio(servers, topic, expected, tls, take)


def read_eosclient_aio_getmany(servers: str, topic: str, expected: int,
                               tls: _harness.Tls | None = None) -> tuple[list[bytes], Timing]:
    async def take(consumer: AsyncReadCommittedConsumer) -> list[Any]:
        got: list[Any] = []
        for batch in (await consumer.getmany(5.0, max_records=POLL_RECORDS)).values():
            got += [r.value for r in batch]
        return got

    return _read_eosclient_aio(servers, topic, expected, tls, take)


def read_aiokafka(servers: str, topic: str, expected: int,
                  tls: _harness.Tls | None = None) -> tuple[list[bytes], Timing]:
    if tls is not None:
        raise RuntimeError("the aiokafka reader runs in plaintext only")

    async def read() -> tuple[list[bytes], Timing]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=servers, isolation_level="read_committed",
            enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        consumer.assign([aiokafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
        got: list[Any] = []
        timing = Timing()
        while len(got) < expected:
            timing.saw(len(got))
            batches = await consumer.getmany(timeout_ms=5000, max_records=POLL_RECORDS)
            for batch in batches.values():
                got += [r.value for r in batch]
        timing.stop(len(got))
        await consumer.stop()
        return got, timing

    return asyncio.run(read())


def read_floor(servers: str, topic: str, expected: int,
               tls: _harness.Tls | None = None) -> tuple[list[bytes], Timing]:
    """The broker's floor (``_harness.fetch_floor``): no client that fetches every partition
    in each request reads faster. Delivers no values (nothing is decoded), so it is not
    checked; it has no steady time."""
    if tls is not None:
        raise RuntimeError("the floor is measured in plaintext only")
    host, _, port = servers.rpartition(":")
    timing = Timing()
    _, timing.elapsed = _harness.fetch_floor(host, int(port), topic, PARTITIONS)
    return [], timing


READERS: Final = (("eos", "eosclient", "eosclient poll()", read_eosclient),
                  ("eosb", "eosclient", "eosclient poll_batch() values_buffer()",
                   read_eosclient_batch),
                  ("eosbl", "eosclient", "eosclient poll_batch() .values lists",
                   read_eosclient_batch_lists),
                  ("ck", "confluent-kafka", "confluent-kafka consume(500)", read_confluent),
                  ("kp", "kafka-python", "kafka-python poll(max_records=500)", read_kafka_python),
                  ("eos-aio", "eosclient", "eosclient.aio poll()", read_eosclient_aio),
                  ("eos-aio-g", "eosclient", "eosclient.aio getmany()",
                   read_eosclient_aio_getmany),
                  ("eos-aio-b", "eosclient", "eosclient.aio poll_batch()",
                   read_eosclient_aio_batch),
                  ("aiokafka", "aiokafka", "aiokafka getmany(max_records=500)", read_aiokafka),
                  ("floor", "broker", "floor: raw Fetch loop, nothing decoded", read_floor))


def check(values: list[bytes], expected: int) -> str | None:
    """What is wrong with what a client delivered, or None."""
    if any(v[:1] != b"c" for v in values):
        return f"{sum(v[:1] != b'c' for v in values)} aborted records delivered"
    if len(set(values)) != len(values):
        return f"{len(values) - len(set(values))} records delivered twice"
    if len(values) != expected:
        return f"{len(values)} records delivered, expected {expected}"
    return None


def throughput(broker: RunningBroker, args: argparse.Namespace, servers: str,
               tls: _harness.Tls | None) -> list[report.Outcome]:
    """Every reader over one topic, ``--repeat`` times, interleaved, through ``servers``."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    _harness.progress(f"writing {args.transactions} transactions of {args.records} records")
    expected = write_topic(broker, topic, args.transactions, args.records)
    readers = [r for r in READERS if not args.reader or r[0] in args.reader]
    outcomes = [report.Outcome("throughput", report.THROUGHPUT, "records/s", key, family, label)
                for key, family, label, _ in readers]
    steadies = [report.Outcome("steady", report.THROUGHPUT, "records/s", key, family, label)
                for key, family, label, _ in readers]
    cpus = [report.Outcome("cpu", report.THROUGHPUT, "CPU s per million records", key, family,
                           label) for key, family, label, _ in readers]
    for repeat in range(args.repeat):
        for outcome, steady, cpu, (_, _, label, read) in zip(outcomes, steadies, cpus, readers,
                                                             strict=True):
            _harness.progress(f"throughput: {label} (repeat {repeat + 1}/{args.repeat})")
            try:
                with _harness.watchdog(RUN_TIMEOUT):
                    values, timing = read(servers, topic, expected, tls)
                problem = None if read is read_floor else check(values, expected)
                if problem:
                    outcome.errors.append(problem)
                    steady.errors.append(problem)
                else:
                    outcome.runs.append(expected / timing.elapsed)
                    cpu.runs.append(timing.cpu / expected * 1e6)
                    if timing.steady:  # (the floor has none)
                        steady.runs.append(timing.steady)
            except Exception as exc:
                outcome.errors.append(f"failed: {type(exc).__name__}: {exc}"[:160])
                steady.errors.append(outcome.errors[-1])
                cpu.errors.append(outcome.errors[-1])
            gc.collect()
    return outcomes + steadies + cpus


# --- marker mode and index mode -------------------------------------------------------------


class Watcher:
    """An eosclient consumer polling on a thread: when each value arrived, and the peak of what
    its filters held back for markers."""

    def __init__(self, servers: str, topic: str) -> None:
        self.arrived: dict[bytes, float] = {}
        self.peak_bytes = self.peak_records = 0
        self.consumer = ReadCommittedConsumer(servers, config={
            "auto.offset.reset": "earliest", "fetch.max.wait.ms": 10})
        self.consumer.assign([TopicPartition(topic, 0)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()

    def proven(self) -> bool:
        return any(t.proven for t in self.consumer._session.fetcher._trust.values())

    def _run(self) -> None:
        states = self.consumer._session.assignment  # read only: the filters' own accounting
        while not self._stop.is_set():
            records = self.consumer.poll(0.05)
            now = time.perf_counter()
            for r in records:
                self.arrived[r.value or b""] = now
            held = [(s.filter.held_bytes, s.filter.held_records) for s in states]
            self.peak_bytes = max(self.peak_bytes, sum(b for b, _ in held))
            self.peak_records = max(self.peak_records, sum(n for _, n in held))


def modes_round(topic: str, b: ck.Producer, c: ck.Producer, *, n: int, records: int,
                hold: float) -> tuple[bytes, float]:
    """B writes, C opens, B commits, C commits ``hold`` later; B's last value and commit time."""
    b.begin_transaction()
    last = b""
    for i in range(records):
        last = value(True, n * records + i)
        b.produce(topic, last, partition=0)
    b.flush(10)
    c.begin_transaction()
    c.produce(topic, b"open", partition=0)
    c.flush(10)
    b.commit_transaction(10)
    committed = time.perf_counter()
    time.sleep(hold)
    c.commit_transaction(10)
    return last, committed


def modes(broker: RunningBroker, args: argparse.Namespace, prove: bool) -> dict[str, Any]:
    """One row of the modes scenario: latencies (s) and peak held memory."""
    topic = f"modes-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic, 1)
    make = lambda name: ck.Producer({"bootstrap.servers": broker.bootstrap_servers,  # noqa: E731
                                     "transactional.id": f"{topic}-{name}", "linger.ms": 0})
    b, c = make("b"), make("c")
    b.init_transactions(30)
    c.init_transactions(30)
    if prove:  # one aborted transaction: its ABORT marker confirms the broker's index
        b.begin_transaction()
        b.produce(topic, value(False, 0), partition=0)
        b.flush(10)
        b.abort_transaction(10)
    watcher = Watcher(broker.bootstrap_servers, topic)
    latencies = []
    try:
        with _harness.watchdog(RUN_TIMEOUT):
            for n in range(args.rounds):
                last, committed = modes_round(topic, b, c, n=n, records=args.mode_records,
                                              hold=args.hold_ms / 1e3)
                deadline = time.monotonic() + 10
                while last not in watcher.arrived and time.monotonic() < deadline:
                    time.sleep(0.001)
                latencies.append(watcher.arrived[last] - committed)
    finally:
        watcher.stop()
    return {"latencies": latencies, "peak_bytes": watcher.peak_bytes,
            "peak_records": watcher.peak_records, "index_proven": watcher.proven()}


def mode_row(name: str, result: dict[str, Any]) -> list[str]:
    lat = sorted(result["latencies"])
    p99 = lat[max(0, -(-99 * len(lat) // 100) - 1)]
    return [name, "index" if result["index_proven"] else "marker",
            f"{statistics.median(lat) * 1e3:.1f} ms", f"{p99 * 1e3:.1f} ms",
            f"{result['peak_bytes']:,} B", f"{result['peak_records']:,}"]


# --- the whole run ------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Throughput on noida-db, then the modes on noida-db (proven and not) and Tansu."""
    results: dict[str, Any] = {"outcomes": [], "modes": {}}
    with start_broker("noida") as noida, contextlib.ExitStack() as stack:
        servers, tls = noida.bootstrap_servers, None
        if args.tls:
            servers, tls = _harness.tls_front(stack, noida.host, noida.port)
        if "throughput" in args.scenario:
            results["outcomes"] = throughput(noida, args, servers, tls)
        if "modes" in args.scenario:
            for name, prove in (("noida-db, index proven", True), ("noida-db, no abort", False)):
                _harness.progress(f"modes: {name}")
                results["modes"][name] = modes(noida, args, prove)
    if "modes" in args.scenario:
        with start_broker("tansu") as tansu:
            _harness.progress("modes: Tansu")
            results["modes"]["Tansu"] = modes(tansu, args, True)
    return results


def render(results: dict[str, Any], ratios: list[report.Ratio], args: argparse.Namespace) -> str:
    versions = {"eosclient": eosclient.__version__
                + (" (compiled codec)" if eosclient.accelerated else " (pure-Python codec)"),
                "confluent-kafka": importlib.metadata.version("confluent-kafka"),
                "kafka-python": kafka.__version__, "aiokafka": aiokafka.__version__,
                "noida-db": importlib.metadata.version("noida-db")}
    lines = ["", "versions: " + "; ".join(f"{k} {v}" for k, v in versions.items()),
             f"settings: {args.transactions} transactions x {args.records} records (half "
             f"aborted), {PARTITIONS} partitions, {VALUE_SIZE} B values; modes: {args.rounds} "
             f"rounds of {args.mode_records} records, C held {args.hold_ms} ms"
             + ("; throughput through a TLS front, every client with the same TLS settings"
                if args.tls else ""), ""]
    if results["outcomes"]:
        rows = [[o.scenario, o.label, report.format_outcome(o, 1.0)] for o in results["outcomes"]]
        lines += [report.table(rows, ["scenario", "client", "result"]), ""]
        lines += [report.table([report.format_ratio(r) for r in ratios],
                               ["scenario", "ratio", "value", "target", "verdict"]), ""]
    if results["modes"]:
        rows = [mode_row(name, r) for name, r in results["modes"].items()]
        lines += [report.table(rows, ["broker", "mode", "latency median", "p99",
                                      "peak held", "held records"]), ""]
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--transactions", type=int, help="transactions written (half aborted)")
    parser.add_argument("--records", type=int, help="records per transaction")
    parser.add_argument("--rounds", type=int, help="rounds of the modes scenario")
    parser.add_argument("--mode-records", type=int, default=100, help="B's records per round")
    parser.add_argument("--hold-ms", type=int, default=50, help="how long C stays open")
    parser.add_argument("--repeat", type=int, help="throughput runs per client, interleaved")
    parser.add_argument("--scenario", action="append", choices=["throughput", "modes"])
    parser.add_argument("--partitions", type=int, default=4,
                        help="partitions of the throughput topic, every one assigned to each "
                        "reader (the scale figures: 4, 100, 1000)")
    parser.add_argument("--reader", action="append", choices=[key for key, *_ in READERS],
                        help="only this reader of the throughput scenario (repeatable; default "
                        "all)")
    parser.add_argument("--tls", action="store_true",
                        help="read through a TLS front, every client with the same TLS "
                        "settings (throughput only; needs the test extra)")
    parser.add_argument("--quick", action="store_true", help="a small run")
    parser.add_argument("--json", help="also write the results here as JSON")
    args = parser.parse_args(argv)
    _harness.fill_defaults(args, QUICK if args.quick else DEFAULTS)
    global PARTITIONS  # noqa: PLW0603 - one setting read by every reader, set before they run
    PARTITIONS = args.partitions
    args.scenario = args.scenario or (["throughput"] if args.tls else ["throughput", "modes"])
    if args.tls and "modes" in args.scenario:
        parser.error("--tls runs the throughput scenario only")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    results = run(args)
    specs = [report.RatioSpec("throughput", "eos", "ck", 1.2),  # issue 14: >= 1.2x
             report.RatioSpec("throughput", "eosb", "ck", 3.0),
             report.RatioSpec("throughput", "eosbl", "ck"),
             report.RatioSpec("throughput", "floor", "ck",
                              note="(the broker's floor: the most any reader could reach)"),
             report.RatioSpec("throughput", "eos", "kp"),
             report.RatioSpec("throughput", "eos-aio", "aiokafka"),
             report.RatioSpec("throughput", "eos-aio-g", "aiokafka"),
             report.RatioSpec("throughput", "eos-aio-b", "aiokafka", 2.0),
             report.RatioSpec("throughput", "eos-aio", "eos", 0.9,
                              note="(async / sync eosclient)"),
             report.RatioSpec("throughput", "eos-aio-b", "eosbl", 0.9,
                              note="(async / sync eosclient, values as lists)"),
             report.RatioSpec("steady", "eos-aio-b", "aiokafka"),
             report.RatioSpec("steady", "eos-aio", "aiokafka"),
             report.RatioSpec("steady", "eos-aio-b", "eosbl"),
             report.RatioSpec("steady", "eosb", "ck"),
             report.RatioSpec("steady", "eosbl", "ck")]
    ratios = report.compute_ratios(results["outcomes"], specs, {})
    print(render(results, ratios, args))
    print(f"(whole run: {time.monotonic() - started:.0f} s)")
    if args.json:
        with contextlib.suppress(OSError):
            report.write_json(Path(args.json), {
                "throughput": [report.outcome_json(o, 1.0) for o in results["outcomes"]],
                "ratios": [report.ratio_json(r) for r in ratios], "modes": results["modes"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
