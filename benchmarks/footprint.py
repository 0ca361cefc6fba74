"""Many clients in one process: what each one costs while it lives, and what it leaves behind.

A Spark executor, a web worker or a test harness may hold many clients at once (issue 29: "100
transactional producers in one process"). For each client kind, ``--count`` clients (100) are
made one after another in a fresh Python process, so one library's memory does not count
against another's, on a broker started for the run:

- **producers**: ``init_transactions``, then one transaction of one record each (so every
  producer has a connection to its partition's leader and to its coordinator, and its buffers);
- **consumers**: a read_committed consumer each, assigned the topic's partition and polled
  until its one record came (a connection for metadata and one for fetching).

Printed per client kind: the time to make them all ready, and per client the resident memory
(RSS), threads and open file descriptors they add; then, after ``close()`` of every client and a
moment to settle, the threads and descriptors left over beyond the process's own before the
first client (a client that leaks them shows here). eosclient beside confluent-kafka and
kafka-python (producers) in one run.

    .venv/bin/python benchmarks/footprint.py                 # 100 of each, ~1-2 minutes
    .venv/bin/python benchmarks/footprint.py --count 20      # a quick run
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final

import _harness
import _report
import confluent_kafka as ck
import kafka

from eosclient import ReadCommittedConsumer, TopicPartition, TransactionalProducer
from eosclient.testing.brokers import start_broker
from eosclient.testing.topics import create_topic

KINDS: Final = {
    "eos-producer": "eosclient TransactionalProducer",
    "ck-producer": "confluent-kafka Producer (transactional)",
    "kp-producer": "kafka-python KafkaProducer (transactional)",
    "eos-consumer": "eosclient ReadCommittedConsumer",
    "ck-consumer": "confluent-kafka Consumer (read_committed)",
}
_SETTLE: Final = 2.0  # seconds after the last close() before the leftovers are counted
_TIMEOUT: Final = 30.0


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise _harness.BenchmarkError("no VmRSS in /proc/self/status")


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))  # native threads too (librdkafka's)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _snapshot() -> dict[str, int]:
    gc.collect()
    return {"rss_kib": _rss_kib(), "threads": _threads(), "fds": _fds()}


# --- the children: one kind each, in a process of its own ------------------------------------


def _eos_producer(servers: str, topic: str, n: int) -> tuple[Any, Callable[[], None]]:
    producer = TransactionalProducer(servers, transactional_id=f"{topic}-eos-{n}")
    producer.init_transactions(_TIMEOUT)
    with producer.transaction(timeout=_TIMEOUT):
        producer.send(topic, b"x", partition=0)
    return producer, lambda: producer.close(_TIMEOUT)


def _ck_producer(servers: str, topic: str, n: int) -> tuple[Any, Callable[[], None]]:
    producer = ck.Producer({"bootstrap.servers": servers, "transactional.id": f"{topic}-ck-{n}"})
    producer.init_transactions(_TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    producer.commit_transaction(_TIMEOUT)

    def close() -> None:  # confluent-kafka's producer has no close(): freed when dropped
        producer.flush(_TIMEOUT)
    return producer, close


def _kp_producer(servers: str, topic: str, n: int) -> tuple[Any, Callable[[], None]]:
    producer = kafka.KafkaProducer(bootstrap_servers=servers, transactional_id=f"{topic}-kp-{n}")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"x", partition=0)
    producer.commit_transaction()
    return producer, lambda: producer.close(_TIMEOUT)


def _eos_consumer(servers: str, topic: str, n: int) -> tuple[Any, Callable[[], None]]:
    consumer: ReadCommittedConsumer = ReadCommittedConsumer(
        servers, config={"auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0)])
    deadline = time.monotonic() + _TIMEOUT
    while not consumer.poll(0.5) and time.monotonic() < deadline:
        pass
    return consumer, lambda: consumer.close(_TIMEOUT)


def _ck_consumer(servers: str, topic: str, n: int) -> tuple[Any, Callable[[], None]]:
    consumer = ck.Consumer({"bootstrap.servers": servers, "group.id": f"{topic}-ck-{n}",
                            "isolation.level": "read_committed", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"})
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    deadline = time.monotonic() + _TIMEOUT
    while consumer.poll(0.5) is None and time.monotonic() < deadline:
        pass
    return consumer, consumer.close


_MAKERS: Final[dict[str, Callable[[str, str, int], tuple[Any, Callable[[], None]]]]] = {
    "eos-producer": _eos_producer, "ck-producer": _ck_producer, "kp-producer": _kp_producer,
    "eos-consumer": _eos_consumer, "ck-consumer": _ck_consumer,
}


def child(kind: str, servers: str, topic: str, count: int) -> dict[str, Any]:
    """Make ``count`` clients of ``kind``, measure, close them all, measure the leftovers."""
    make = _MAKERS[kind]
    make(servers, topic, -1)[1]()  # the library's imports and first-use costs, not counted
    time.sleep(_SETTLE)
    before = _snapshot()
    started = time.perf_counter()
    clients = [make(servers, topic, n) for n in range(count)]
    ready = time.perf_counter() - started
    alive = _snapshot()
    started = time.perf_counter()
    for _, close in clients:
        close()
    closing = time.perf_counter() - started
    clients.clear()
    time.sleep(_SETTLE)
    after = _snapshot()
    after["left"] = sorted(t.name for t in threading.enumerate()
                           if t is not threading.main_thread())  # type: ignore[assignment]
    return {"kind": kind, "count": count, "ready_s": ready, "close_s": closing,
            "before": before, "alive": alive, "after": after}


# --- the parent ------------------------------------------------------------------------------


def run_child(kind: str, servers: str, topic: str, count: int) -> dict[str, Any]:
    _harness.progress(f"{count} x {KINDS[kind]}")
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--servers", servers, "--topic", topic,
         "--count", str(count)], capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise _harness.BenchmarkError(f"{kind}: {done.stderr.strip()[-400:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def render(results: list[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        n, before, alive, after = r["count"], r["before"], r["alive"], r["after"]
        rows.append([
            KINDS[r["kind"]], str(n), f"{r['ready_s']:.2f} s", f"{r['ready_s'] / n * 1e3:.1f} ms",
            f"{(alive['rss_kib'] - before['rss_kib']) / n / 1024:.2f} MiB",
            f"{(alive['threads'] - before['threads']) / n:.1f}",
            f"{(alive['fds'] - before['fds']) / n:.1f}",
            f"{r['close_s']:.2f} s",
            f"{after['threads'] - before['threads']}", f"{after['fds'] - before['fds']}",
            f"{(after['rss_kib'] - before['rss_kib']) / 1024:.1f} MiB"])
    return _report.table(rows, ["client", "n", "ready, all", "ready, each", "RSS each",
                                "threads each", "fds each", "close, all", "threads left",
                                "fds left", "RSS kept"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=100, help="clients of each kind (100)")
    parser.add_argument("--kind", action="append", choices=list(KINDS),
                        help="only these kinds (repeatable; default: all)")
    parser.add_argument("--child", choices=list(KINDS), help=argparse.SUPPRESS)
    parser.add_argument("--servers", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.servers, args.topic, args.count)))
        return 0
    kinds = args.kind or list(KINDS)
    with start_broker("noida") as broker:
        topic = f"footprint-{uuid.uuid4().hex[:8]}"
        create_topic(broker, topic, 1)
        results = [run_child(kind, broker.bootstrap_servers, topic, args.count)
                   for kind in kinds]
    print(f"load average at the end {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}")
    print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
