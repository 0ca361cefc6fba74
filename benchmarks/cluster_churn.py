"""The cluster-churn benchmark: eosclient beside confluent-kafka on librdkafka's three-broker mock
while leaders and the transaction coordinator move, brokers bounce and retriable errors come back.

Run: ``.venv/bin/python benchmarks/cluster_churn.py [--quick] [--seeds 1-6] [--duration 30]
[--json out.json]``.

Method: :mod:`eosclient.testing.cluster_nemesis` does the work. Per seed, each client runs on a
fresh mock cluster of its own, one after the other, under the same seeded schedule of faults
(a fault every 0.3-1.2 s), transactions of 20 records over 6 partitions for ``--duration``
seconds; then the log is read back and judged by its control markers. transactions/s =
transactions committed / seconds of the loop; the headline is the median over seeds. A run whose
verdict fails (lost, duplicated, aborted-read, out-of-order, partial, unread, wedged, a commit
slower than 15 s) gets no number: the failure is printed instead, with the run's row.

The ratio eosclient / confluent-kafka has a target of 1.0x: eosclient is not to be slower
under churn. The slowest commit of each run is printed beside it (how long an application
waited at worst).

Caveat: the mock cluster runs in this process (C threads), beside the client under test; both
clients share the two cores with it alike. Compare ratios from one run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import _harness
import _report as report

import eosclient
from eosclient.testing.cluster_nemesis import (
    ClusterNemesisResult,
    format_table,
    make_schedule,
    run_cluster_nemesis,
)

CLIENTS: Final = (("eos", "eosclient", "eosclient TransactionalProducer"),
                  ("ck", "confluent-kafka", "confluent-kafka Producer"))
DEFAULTS: Final = {"seeds": "1-6", "duration": 30.0}
QUICK: Final = {"seeds": "1-2", "duration": 8.0}
RUN_TIMEOUT: Final = 600.0


def _seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        seeds += range(int(low), int(high or low) + 1)
    return seeds


def churn(args: argparse.Namespace) -> tuple[list[report.Outcome], list[ClusterNemesisResult]]:
    """Every seed, each client in turn on the seed's schedule."""
    outcomes = {key: report.Outcome("churn", report.THROUGHPUT, "transactions/s", key, family,
                                    label) for key, family, label in CLIENTS}
    results = []
    for seed in _seeds(args.seeds):
        schedule = make_schedule(seed, duration=args.duration)
        for key, family, _ in CLIENTS:
            _harness.progress(f"seed {seed}: {family} ({len(schedule.faults)} faults, "
                              f"{args.duration:g} s)")
            try:
                with _harness.watchdog(RUN_TIMEOUT):
                    result = run_cluster_nemesis(family, schedule=schedule)
            except _harness.RunTimeoutError as exc:
                outcomes[key].errors.append(f"seed {seed}: {exc}")
                continue
            results.append(result)
            problems = result.problems()
            if problems:
                outcomes[key].errors.append(f"seed {seed}: {'; '.join(problems)}"[:160])
                print(result.summary(max_log_lines=60), file=sys.stderr, flush=True)
            else:
                outcomes[key].runs.append(result.rate)
    return list(outcomes.values()), results


def render(outcomes: list[report.Outcome], ratios: list[report.Ratio],
           results: list[ClusterNemesisResult], args: argparse.Namespace) -> str:
    versions = {"eosclient": eosclient.__version__,
                "confluent-kafka": importlib.metadata.version("confluent-kafka")}
    slowest = {family: [s.commit_seconds or 0.0 for r in results if r.client == family
                        and (s := r.slowest_commit()) is not None]
               for _, family, _ in CLIENTS}
    rows = [[o.scenario, o.label, report.format_outcome(o, 1.0),
             f"{statistics.median(slowest[o.family]):.2f} s" if slowest[o.family] else "-"]
            for o in outcomes]
    return "\n".join([
        "", "versions: " + "; ".join(f"{k} {v}" for k, v in versions.items()),
        f"settings: seeds {args.seeds}, {args.duration:g} s each, 3 brokers, 6 partitions, "
        "20 records a transaction, linger.ms 5", "",
        format_table(results), "",
        report.table(rows, ["scenario", "client", "result (median over seeds)",
                            "slowest commit (median)"]), "",
        report.table([report.format_ratio(r) for r in ratios],
                     ["scenario", "ratio", "value", "target", "verdict"]), ""])


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", help="e.g. 1-6 or 3,7 (1-6; --quick: 1-2)")
    parser.add_argument("--duration", type=float, help="seconds per run (30; --quick: 8)")
    parser.add_argument("--quick", action="store_true", help="a small run")
    parser.add_argument("--json", help="also write the results here as JSON")
    args = parser.parse_args(argv)
    _harness.fill_defaults(args, QUICK if args.quick else DEFAULTS)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    outcomes, results = churn(args)
    specs = [report.RatioSpec("churn", "eos", "ck", 1.0, note="(not slower under churn)")]
    ratios = report.compute_ratios(outcomes, specs, {})
    print(render(outcomes, ratios, results, args))
    print(f"(whole run: {time.monotonic() - started:.0f} s)")
    if args.json:
        with contextlib.suppress(OSError):
            report.write_json(Path(args.json), {
                "churn": [report.outcome_json(o, 1.0) for o in outcomes],
                "ratios": [report.ratio_json(r) for r in ratios],
                "runs": [{"client": r.client, "seed": r.seed, "rate": r.rate,
                          "problems": r.problems(),
                          "slowest_commit": (s.commit_seconds if (s := r.slowest_commit())
                                             else None)} for r in results]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
