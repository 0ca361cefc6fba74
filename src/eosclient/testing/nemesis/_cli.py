"""The nemesis's command line, and the Markdown table it prints (a row per run)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from eosclient.testing.brokers import BROKER_KINDS, start_broker
from eosclient.testing.nemesis._result import NemesisResult
from eosclient.testing.nemesis._run import run_nemesis

__all__ = ["format_row", "format_table", "main"]

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
