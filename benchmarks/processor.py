"""The processor benchmark: an exactly-once copy loop, eosclient beside confluent-kafka and
kafka-python, in one run.

Run: ``.venv/bin/python benchmarks/processor.py [--quick] [--repeat 1] [--json out.json]``.

Method (noida-db): one input topic of 4 partitions holds ``--records`` 100-byte records, written
untimed in committed transactions. Each client copies the whole topic to a fresh output topic of
4 partitions with a fresh group and transactional.id, in transactions of ``--per-transaction``
input records: consume (read_committed) -> begin -> produce each record with an ``eos.src``
header naming its input -> send the consumer's positions to the transaction (KIP-447 group
metadata) -> commit. records/s = input records / seconds from the start of the copy (group join
included: ~0.4 s on noida-db for every client) to the return of the last commit.

The clients: eosclient :class:`~eosclient.ExactlyOnceProcessor` (``run(max_records=N)``) and
its asyncio twin :class:`~eosclient.aio.AsyncExactlyOnceProcessor` (the same, awaited); a
confluent-kafka loop (``consume(500)``, ``produce``, ``send_offsets_to_transaction``), the shape
of Kafka's own transactional copier; the same loop with kafka-python. Afterwards (untimed) every
copy is checked with :func:`eosclient.testing.checker.check`: each input record exactly once in
the output, nothing lost, nothing aborted read; a copy that fails the check has no number.
Repeats are interleaved over ``--repeat``.

Caveat: broker, clients and the checker share the machine's cores; compare ratios from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.metadata
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import _harness
import _report as report
import confluent_kafka as ck
import kafka
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KpTopicPartition

import eosclient
from eosclient import ExactlyOnceProcessor
from eosclient.aio import AsyncExactlyOnceProcessor
from eosclient.processor import SOURCE_HEADER
from eosclient.testing.brokers import RunningBroker, start_broker
from eosclient.testing.checker import check
from eosclient.testing.topics import create_topic

PARTITIONS = 4  # the source's and the sink's; --partitions sets it once, before anything runs
VALUE_SIZE: Final = 100
POLL_RECORDS: Final = 500
RUN_TIMEOUT: Final = 600.0
DEFAULTS: Final = {"records": 200_000, "per_transaction": 500, "repeat": 1}
QUICK: Final = {"records": 20_000, "per_transaction": 500, "repeat": 1}

Copier = Callable[[str, str, str, int, int], None]


def fill(broker: RunningBroker, topic: str, records: int) -> None:
    """``records`` committed 100-byte records over the partitions (untimed)."""
    create_topic(broker, topic, PARTITIONS)
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5,
                            "transactional.id": f"{topic}-writer"})
    producer.init_transactions(30)
    for start in range(0, records, 10_000):
        producer.begin_transaction()
        for n in range(start, min(records, start + 10_000)):
            producer.produce(topic, b"%09d" % n + b"x" * (VALUE_SIZE - 9), partition=n % PARTITIONS)
            if n % 10_000 == 9_999:
                producer.poll(0)
        producer.commit_transaction(60)


def source_of(topic: str, partition: int, offset: int) -> bytes:
    return f"{topic}/{partition}/{offset}".encode()


# --- the copiers: (servers, source, sink, records, per transaction) ---------------------------


def copy_eosclient(servers: str, source: str, sink: str, records: int, per_txn: int) -> None:
    processor = ExactlyOnceProcessor(
        bootstrap_servers=servers, input_topics=[source], output_topic=sink,
        group_id=f"{sink}-g", transactional_id=f"{sink}-t", max_records_per_transaction=per_txn,
        commit_interval_ms=10_000, producer_config={"linger.ms": 5})
    stats = processor.run(max_records=records, timeout=RUN_TIMEOUT)
    if stats.records_in != records:
        raise _harness.BenchmarkError(f"copied {stats.records_in} of {records}")


def copy_eosclient_aio(servers: str, source: str, sink: str, records: int, per_txn: int) -> None:
    processor = AsyncExactlyOnceProcessor(
        bootstrap_servers=servers, input_topics=[source], output_topic=sink,
        group_id=f"{sink}-g", transactional_id=f"{sink}-t", max_records_per_transaction=per_txn,
        commit_interval_ms=10_000, producer_config={"linger.ms": 5})
    stats = asyncio.run(processor.run(max_records=records, timeout=RUN_TIMEOUT))
    if stats.records_in != records:
        raise _harness.BenchmarkError(f"copied {stats.records_in} of {records}")


def copy_confluent(servers: str, source: str, sink: str, records: int, per_txn: int) -> None:
    consumer = ck.Consumer({"bootstrap.servers": servers, "group.id": f"{sink}-g",
                            "isolation.level": "read_committed", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"})
    producer = ck.Producer({"bootstrap.servers": servers, "transactional.id": f"{sink}-t",
                            "linger.ms": 5})
    producer.init_transactions(30)
    consumer.subscribe([source])
    done = in_txn = 0
    try:
        while done < records:
            messages = consumer.consume(min(POLL_RECORDS, records - done - in_txn) or 1, 1.0)
            for m in messages:
                if m.error() is not None:
                    raise _harness.BenchmarkError(str(m.error()))
                if not in_txn:
                    producer.begin_transaction()
                producer.produce(sink, m.value(), m.key(), headers=[
                    (SOURCE_HEADER, source_of(m.topic(), m.partition(), m.offset()))])
                in_txn += 1
            if in_txn and (in_txn >= per_txn or done + in_txn >= records):
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                    30)
                producer.commit_transaction(30)
                done, in_txn = done + in_txn, 0
    finally:
        consumer.close()
        producer.flush(10)


def copy_kafka_python(servers: str, source: str, sink: str, records: int, per_txn: int) -> None:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=servers, group_id=f"{sink}-g", isolation_level="read_committed",
        enable_auto_commit=False, auto_offset_reset="earliest")
    producer = kafka.KafkaProducer(bootstrap_servers=servers, transactional_id=f"{sink}-t",
                                   linger_ms=5)
    producer.init_transactions()
    consumer.subscribe([source])
    done = in_txn = 0
    try:
        while done < records:
            limit = min(POLL_RECORDS, records - done - in_txn) or 1
            for tp_records in consumer.poll(1000, max_records=limit).values():
                for m in tp_records:
                    if not in_txn:
                        producer.begin_transaction()
                    producer.send(sink, m.value, m.key, headers=[
                        (SOURCE_HEADER, source_of(m.topic, m.partition, m.offset))])
                    in_txn += 1
            if in_txn and (in_txn >= per_txn or done + in_txn >= records):
                offsets = {KpTopicPartition(tp.topic, tp.partition):
                           OffsetAndMetadata(consumer.position(tp), "", -1)
                           for tp in consumer.assignment()}
                producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                producer.commit_transaction()
                done, in_txn = done + in_txn, 0
    finally:
        consumer.close()
        producer.close(10)


COPIERS: Final[list[tuple[str, str, str, Copier]]] = [
    ("eos", "eosclient", "eosclient ExactlyOnceProcessor", copy_eosclient),
    ("eos-aio", "eosclient", "eosclient.aio AsyncExactlyOnceProcessor", copy_eosclient_aio),
    ("ck", "confluent-kafka", "confluent-kafka copy loop", copy_confluent),
    ("kp", "kafka-python", "kafka-python copy loop", copy_kafka_python),
]


def copies(broker: RunningBroker, args: argparse.Namespace) -> list[report.Outcome]:
    """Every copier over one input topic, ``--repeat`` times, interleaved."""
    source = f"bench-in-{uuid.uuid4().hex[:8]}"
    _harness.progress(f"writing {args.records} input records")
    fill(broker, source, args.records)
    outcomes = [report.Outcome("copy", report.THROUGHPUT, "records/s", key, family, label)
                for key, family, label, _ in COPIERS]
    for repeat in range(args.repeat):
        for outcome, (key, _, label, copier) in zip(outcomes, COPIERS, strict=True):
            if key not in args.client:
                continue
            _harness.progress(f"copy: {label} (repeat {repeat + 1}/{args.repeat})")
            sink = f"bench-out-{key}-{uuid.uuid4().hex[:8]}"
            create_topic(broker, sink, PARTITIONS)
            try:
                with _harness.watchdog(RUN_TIMEOUT):
                    started = time.perf_counter()
                    copier(broker.bootstrap_servers, source, sink, args.records,
                           args.per_transaction)
                    elapsed = time.perf_counter() - started
                checked = check(broker.bootstrap_servers, source, sink, timeout=120)
                if checked.ok:
                    outcome.runs.append(args.records / elapsed)
                else:
                    outcome.errors.append(f"checker: {checked.totals}"[:160])
            except Exception as exc:
                outcome.errors.append(f"failed: {type(exc).__name__}: {exc}"[:160])
            gc.collect()
    return [o for o in outcomes if o.key in args.client]


def render(outcomes: list[report.Outcome], ratios: list[report.Ratio],
           args: argparse.Namespace) -> str:
    versions = {"eosclient": eosclient.__version__,
                "confluent-kafka": importlib.metadata.version("confluent-kafka"),
                "kafka-python": kafka.__version__,
                "noida-db": importlib.metadata.version("noida-db")}
    rows = [[o.scenario, o.label, report.format_outcome(o, 1.0)] for o in outcomes]
    return "\n".join([
        "", "versions: " + "; ".join(f"{k} {v}" for k, v in versions.items()),
        f"settings: {args.records} records of {VALUE_SIZE} B, {PARTITIONS} partitions, "
        f"{args.per_transaction} input records per transaction", "",
        report.table(rows, ["scenario", "client", "result"]), "",
        report.table([report.format_ratio(r) for r in ratios],
                     ["scenario", "ratio", "value", "target", "verdict"]), ""])


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, help="input records to copy")
    parser.add_argument("--per-transaction", type=int, help="input records per transaction")
    parser.add_argument("--repeat", type=int, help="copies per client, interleaved")
    parser.add_argument("--client", action="append", choices=[k for k, *_ in COPIERS],
                        help="only these clients (default: all)")
    parser.add_argument("--partitions", type=int, default=4,
                        help="partitions of the source and of the sink (the scale figures: "
                        "4, 100, 1000)")
    parser.add_argument("--quick", action="store_true", help="a small run")
    parser.add_argument("--json", help="also write the results here as JSON")
    args = parser.parse_args(argv)
    _harness.fill_defaults(args, QUICK if args.quick else DEFAULTS)
    global PARTITIONS  # noqa: PLW0603 - one setting read by every copier, set before they run
    PARTITIONS = args.partitions
    args.client = args.client or [k for k, *_ in COPIERS]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    with start_broker("noida") as noida:
        outcomes = copies(noida, args)
    specs = [report.RatioSpec("copy", "eos", "ck", 0.9, note="(issue 14)"),
             report.RatioSpec("copy", "eos", "kp"),
             report.RatioSpec("copy", "eos-aio", "eos", 0.9, note="(async / sync eosclient)")]
    ratios = report.compute_ratios(outcomes, specs, {})
    print(render(outcomes, ratios, args))
    print(f"(whole run: {time.monotonic() - started:.0f} s)")
    if args.json:
        with contextlib.suppress(OSError):
            report.write_json(Path(args.json), {
                "copy": [report.outcome_json(o, 1.0) for o in outcomes],
                "ratios": [report.ratio_json(r) for r in ratios]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
