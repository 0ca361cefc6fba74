"""What a worker joining costs the workers already there: eager against cooperative rebalancing,
side by side in one run (eosclient's ExactlyOnceProcessor, on noida-db or Tansu).

Run: ``.venv/bin/python benchmarks/rebalance.py [--broker noida|tansu] [--repeat 2]
[--json out.json]`` (about 25 s a repeat on noida-db, 40 s on Tansu).

Method: a producer writes 24 records every 20 ms to a 12-partition input topic, 2 to each
partition, in committed transactions, for the whole run. Two processors of one group copy it
(transactions of at most 50 records or 50 ms, session 6 s, heartbeats every 200 ms); after
``--before`` seconds a third joins, and the run goes on for ``--after`` seconds. A sampler
logging handler takes the time of each worker's commits as its thread logs them (the
processor's DEBUG line after a commit returns). Reported per
group kind: the longest stretch any of the two first workers went without committing a
transaction from one second before the join to the end (what a rebalance costs them), the same
before the join (the normal rhythm, for scale), and the group's records/s over the window after
the join. Every run is then checked (untimed) with :func:`eosclient.testing.checker.check`:
every record copied exactly once, or the run has no number. ``eager``: ``partition.assignment.
strategy=sticky`` (the same assignment, every partition revoked at each rebalance);
``cooperative``: ``cooperative-sticky`` (KIP-429). Repeats are interleaved.

Caveats: broker, clients, producer and sampler share the machine's cores; the figures are
wall-clock stretches, so read them beside the load. confluent-kafka's cooperative group is not
beside them yet (issue 30).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import statistics
import threading
import time
import uuid
from pathlib import Path

import _harness
import _report as report

from eosclient import ExactlyOnceProcessor, TransactionalProducer
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker, start_broker
from eosclient.testing.checker import check

PARTITIONS = 12
KINDS = {"eager": "sticky", "cooperative": "cooperative-sticky"}


def produce(broker: RunningBroker, topic: str, stop: threading.Event, produced: list[int],
            ) -> None:
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=f"fill-{uuid.uuid4()}",
                               linger_ms=5) as producer:
        producer.init_transactions(15)
        while not stop.wait(0.02):
            producer.begin_transaction()
            for p in range(PARTITIONS):
                producer.send_batch(topic, [b"x", b"y"], partition=p)
            producer.commit_transaction(15)
            produced[0] += 2 * PARTITIONS


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest stretch in [start, end] with no time in ``times``."""
    marks = [start, *(t for t in times if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(marks))


class _Commits(logging.Handler):
    """The monotonic time of every commit, per worker thread (by its name)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.index = {name: i for i, name in enumerate(names)}
        self.times: list[list[float]] = [[] for _ in names]

    def emit(self, record: logging.LogRecord) -> None:
        i = self.index.get(record.threadName or "")
        if i is not None and record.msg == "committed %d in, %d out":
            self.times[i].append(time.monotonic())


def one_run(broker: RunningBroker, kind: str, before: float, after: float) -> dict[str, float]:
    run_id = uuid.uuid4().hex[:8]
    source, sink = f"rb-in-{run_id}", f"rb-out-{run_id}"
    topics.create_topic(broker, source, PARTITIONS)
    topics.create_topic(broker, sink, PARTITIONS)
    group = f"rb-{kind}-{run_id}"
    copiers = [ExactlyOnceProcessor(
        bootstrap_servers=broker.bootstrap_servers, input_topics=[source], output_topic=sink,
        group_id=group, transactional_id=f"{group}-{n}", max_records_per_transaction=50,
        commit_interval_ms=50, consumer_config={
            "partition.assignment.strategy": KINDS[kind], "fetch.max.wait.ms": 100,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 200}) for n in range(3)]
    stop = threading.Event()
    names = [f"{group}-worker-{n}" for n in range(3)]
    commits = _Commits(names)
    log = logging.getLogger("eosclient.processor")
    log.addHandler(commits)
    log.setLevel(logging.DEBUG)
    produced = [0]
    producer = threading.Thread(target=produce, args=(broker, source, stop, produced))
    workers = [threading.Thread(target=c.run, name=name) for c, name in zip(copiers, names,
                                                                             strict=True)]
    producer.start()
    workers[0].start()
    workers[1].start()
    try:
        deadline = time.monotonic() + 60
        while not all(c.stats.transactions_committed for c in copiers[:2]):
            if time.monotonic() > deadline:
                raise _harness.BenchmarkError("the first two workers never committed")
            time.sleep(0.05)
        started = time.monotonic()
        time.sleep(before)
        joined = time.monotonic()
        copied = sum(c.stats.records_in for c in copiers)
        workers[2].start()
        time.sleep(after)
        ended = time.monotonic()
        copied = sum(c.stats.records_in for c in copiers) - copied
    finally:
        stop.set()
        producer.join(30)
        deadline = time.monotonic() + 60  # the workers copy what is left
        while (sum(c.stats.records_in for c in copiers) < produced[0]
               and time.monotonic() < deadline):
            time.sleep(0.1)
        for copier in copiers:
            copier.stop()
        for worker in workers:
            worker.join(60)
        log.removeHandler(commits)
    verdict = check(broker.bootstrap_servers, source, sink)
    if not verdict.ok:
        raise _harness.BenchmarkError(f"{kind}: not exactly once: {verdict}")
    return {
        "longest_gap_s": max(longest_gap(commits.times[i], joined - 1.0, ended)
                             for i in (0, 1)),
        "longest_gap_before_s": max(longest_gap(commits.times[i], started, joined - 1.0)
                                    for i in (0, 1)),
        "records_per_s_after": copied / (ended - joined),
        "aborted": float(sum(c.stats.transactions_aborted for c in copiers)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=("noida", "tansu"), default="noida")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--before", type=float, default=3.0, help="seconds before the join")
    parser.add_argument("--after", type=float, help="seconds after the join (default: 6 on "
                        "noida-db, 12 on Tansu, which holds each join about 3 s)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    _harness.fill_defaults(args, {"after": 6.0 if args.broker == "noida" else 12.0})
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    broker = start_broker(args.broker)
    try:
        for n in range(args.repeat):
            for kind in KINDS:
                _harness.progress(f"{kind}, repeat {n + 1}")
                with _harness.watchdog(180):
                    results[kind].append(one_run(broker, kind, args.before, args.after))
    finally:
        broker.stop()
    rows = []
    for kind, runs in results.items():
        gaps = [r["longest_gap_s"] for r in runs]
        rows.append([kind, f"{max(gaps) * 1000:.0f} ({', '.join(f'{g * 1000:.0f}' for g in gaps)})",
                     f"{max(r['longest_gap_before_s'] for r in runs) * 1000:.0f}",
                     f"{statistics.median(r['records_per_s_after'] for r in runs):,.0f}",
                     f"{sum(r['aborted'] for r in runs):.0f}"])
    print(report.table(rows, ["group", "longest stop after a join, ms (each run)",
                              "longest stop before, ms", "records/s after", "aborted"]))
    eager = max(r["longest_gap_s"] for r in results["eager"])
    coop = max(r["longest_gap_s"] for r in results["cooperative"])
    print(f"\neager / cooperative, longest stop of a worker that keeps partitions: "
          f"{eager / coop:.1f}x")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
