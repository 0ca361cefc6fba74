"""The cluster nemesis's command line: every seed for every client (the producer target) or on
a broker it starts (the front targets), a table row per run, and the logs asked for.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from eosclient.testing.brokers import start_broker
from eosclient.testing.cluster_nemesis._front_run import run_front_nemesis
from eosclient.testing.cluster_nemesis._front_verdict import FrontNemesisResult
from eosclient.testing.cluster_nemesis._mock_run import run_cluster_nemesis
from eosclient.testing.cluster_nemesis._schedule import TARGETS, make_schedule
from eosclient.testing.cluster_nemesis._table import format_front_table, format_table, medians
from eosclient.testing.cluster_nemesis._verdict import CALL_TIMEOUT, GIVE_UP, ClusterNemesisResult
from eosclient.testing.cluster_nemesis._writer import CLIENTS

__all__ = ["main"]

_SLOW_NOTE: Final = 1.0  # --log-dir lists every transaction whose commit took longer
_RATIOS: Final = (("eosclient", "confluent-kafka"), ("eosclient-asyncio", "confluent-kafka"),
                  ("eosclient-asyncio", "eosclient"))  # median rates printed side by side


def _seeds(text: str) -> list[int]:
    """``"1-6"``, ``"7"`` or ``"1,4,9-12"`` as a list of seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        seeds += range(int(low), int(high or low) + 1)
    return seeds


def _clients(text: str) -> list[str]:
    names = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in names if c not in CLIENTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"clients are {', '.join(CLIENTS)}; not {unknown}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    """Run every seed for every client (the producer target) or on the broker asked for (the
    front targets), print a row each (and the producer's medians and ratio); exit 1 on any
    problem."""
    parser = argparse.ArgumentParser(
        prog="python -m eosclient.testing.cluster_nemesis",
        description="Seeded cluster faults (leaders and coordinators move, brokers bounce) "
        "against a transactional producer on librdkafka's 3-broker mock (--target producer, "
        "with retriable errors pushed, judged from the log's control markers), or against a "
        "read_committed consumer or ExactlyOnceProcessor workers through a three-node "
        "ClusterFront over a real broker (--target consumer|processor).")
    parser.add_argument("--target", choices=TARGETS, default="producer",
                        help="what the faults are played against (producer)")
    parser.add_argument("--broker", choices=("noida", "tansu"), default="noida",
                        help="the real broker behind the front (consumer and processor "
                        "targets; noida)")
    parser.add_argument("--asyncio", action="store_true",
                        help="eosclient.aio's consumer or processor; for the producer target, "
                        "the same as --clients eosclient-asyncio")
    parser.add_argument("--seeds", type=_seeds, default=[1], help="e.g. 1-6 or 3,7 (1)")
    parser.add_argument("--duration", type=float, default=30.0,
                        help="seconds of transactions and faults per run (30)")
    parser.add_argument("--clients", type=_clients,
                        help="the producer target's clients, comma-separated, run in this "
                        f"order per seed ({','.join(CLIENTS)})")
    parser.add_argument("--give-up", type=float, default=GIVE_UP,
                        help=f"seconds of retrying a commit or abort before it counts as "
                        f"wedged ({GIVE_UP:g})")
    parser.add_argument("--call-timeout", type=float, default=CALL_TIMEOUT,
                        help="each commit_transaction / abort_transaction call's timeout; "
                        f"one that times out is called again ({CALL_TIMEOUT:g})")
    parser.add_argument("--log-dir", type=Path,
                        help="write each run's summary and whole captured log here")
    args = parser.parse_args(argv)
    if args.target != "producer":
        return _main_front(args)
    if args.asyncio and args.clients is not None:
        parser.error("--asyncio is the producer target's client eosclient-asyncio: "
                     "name it in --clients instead")
    clients = ["eosclient-asyncio"] if args.asyncio else args.clients or list(CLIENTS)
    results: list[ClusterNemesisResult] = []
    for seed in args.seeds:
        schedule = make_schedule(seed, duration=args.duration)
        print(schedule, flush=True)
        for client in clients:
            result = run_cluster_nemesis(client, schedule=schedule, give_up=args.give_up,
                                         call_timeout=args.call_timeout)
            results.append(result)
            print(format_table([result]).splitlines()[-1], flush=True)
            if result.problems():
                print(result.summary(), flush=True)
            if args.log_dir is not None:
                print(f"log: {_write_log(result, args.log_dir)}", flush=True)
    print()
    print(format_table(results))
    rates = medians(results)
    print()
    for client, rate in rates.items():
        print(f"median {client}: {rate:.1f} transactions/s")
    for client, peer in _RATIOS:
        if client in rates and rates.get(peer):
            print(f"{client} / {peer}: {rates[client] / rates[peer]:.2f}x")
    return 1 if any(r.problems() for r in results) else 0


def _main_front(args: argparse.Namespace) -> int:
    """The consumer or processor target: every seed on one broker started here."""
    results = []
    with start_broker(args.broker) as broker:
        for seed in args.seeds:
            schedule = make_schedule(seed, duration=args.duration, target=args.target)
            print(schedule, flush=True)
            result = run_front_nemesis(args.target, broker, schedule=schedule,
                                       asyncio=args.asyncio)
            results.append(result)
            print(format_front_table([result]).splitlines()[-1], flush=True)
            if result.problems():
                print(result.summary(), flush=True)
            if args.log_dir is not None:
                print(f"log: {_write_front_log(result, args.log_dir)}", flush=True)
    print()
    print(format_front_table(results))
    return 1 if any(r.problems() for r in results) else 0


def _write_front_log(result: FrontNemesisResult, directory: Path) -> Path:
    """Write a front run's summary (with the evidence around its worst window) and its whole
    captured log as ``cluster-nemesis-<target>-<broker>[-asyncio]-seed<N>.log``."""
    directory.mkdir(parents=True, exist_ok=True)
    name = (f"cluster-nemesis-{result.target}-{result.broker}"
            f"{'-asyncio' if result.asyncio else ''}-seed{result.seed}.log")
    path = directory / name
    parts = [result.summary(max_log_lines=2_000), "", "log:", *result.feed.log_lines, ""]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path.resolve()


def _write_log(result: ClusterNemesisResult, directory: Path) -> Path:
    """Write ``result``'s summary, the evidence around its slowest commit, the transactions
    not committed at once, and its whole captured log, as
    ``cluster-nemesis-<client>-seed<N>.log`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"cluster-nemesis-{result.client}-seed{result.seed}.log"
    slow = [f"transaction {t.n} began t={t.began:.3f}s, {t.outcome}, {t.sent} sent, commit "
            f"{_seconds(t.commit_seconds)}, abort {_seconds(t.abort_seconds)} {t.note}".rstrip()
            for t in result.txns
            if t.outcome != "committed" or (t.commit_seconds or 0.0) > _SLOW_NOTE]
    parts = [result.summary(), ""]
    slowest = result.slowest_commit()
    if slowest is not None:
        parts += [f"the slowest commit: transaction {slowest.n}",
                  *result.evidence(result.windows()[-1], max_lines=2_000), ""]
    parts += [f"transactions not committed within {_SLOW_NOTE:g} s:", *slow, "",
              "log:", *result.log_lines, ""]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path.resolve()


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"
