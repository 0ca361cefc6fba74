"""The cluster nemesis's Markdown tables: a row per producer run (:func:`format_table`, with
the medians the command prints under it) and a row per front run (:func:`format_front_table`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Final

from eosclient.testing.cluster_nemesis._front_verdict import FrontNemesisResult
from eosclient.testing.cluster_nemesis._verdict import ClusterNemesisResult

__all__ = ["format_front_row", "format_front_table", "format_row", "format_table", "medians"]

_HEADINGS: Final = ("client", "seed", "faults", "committed", "aborted", "unknown", "txn/s",
                    "slowest commit s", "lost", "dup", "ab-read", "order", "partial", "unexp",
                    "wedged", "pruned", "ok")


def format_row(result: ClusterNemesisResult) -> str:
    """One Markdown table row for ``result``."""
    outcomes = result.outcomes()
    counts = result.counts
    slowest = result.slowest_commit()

    def count(kind: str) -> str:
        return str(getattr(counts, kind)) if counts is not None else "-"

    cells = [result.client, str(result.seed), str(len(result.schedule.faults)),
             str(outcomes["committed"]), str(outcomes["aborted"] + outcomes["failed"]),
             str(outcomes["unknown"]), f"{result.rate:.1f}",
             f"{slowest.commit_seconds:.2f}" if slowest is not None and
             slowest.commit_seconds is not None else "-",
             *(count(k) for k in ("lost", "duplicated", "aborted_read", "out_of_order",
                                  "partial", "unexpected")),
             str(len(result.wedges)), count("pruned"), "yes" if not result.problems() else "NO"]
    return "| " + " | ".join(cells) + " |"


def format_table(results: Sequence[ClusterNemesisResult]) -> str:
    """A Markdown table of ``results``, one row each."""
    head = "| " + " | ".join(_HEADINGS) + " |"
    rule = "|" + "|".join("---" for _ in _HEADINGS) + "|"
    return "\n".join([head, rule, *(format_row(r) for r in results)])


def medians(results: Sequence[ClusterNemesisResult]) -> dict[str, float]:
    """Client -> median committed transactions per second over its runs."""
    rates: dict[str, list[float]] = {}
    for r in results:
        rates.setdefault(r.client, []).append(r.rate)
    return {client: statistics.median(values) for client, values in rates.items()}


_FRONT_HEADINGS: Final = ("target", "front", "broker", "seed", "faults", "txns committed",
                          "records", "lost", "dup", "ab-read", "order", "unexp", "slowest s",
                          "longest poll s", "re-created", "liveness", "s", "ok")


def format_front_row(result: FrontNemesisResult) -> str:
    """One Markdown table row for ``result``: ``records`` are the committed records read
    (consumer) or the input records copied (processor); ``slowest`` the slowest read (from a
    commit returning) or the slowest processor commit."""
    counts: Mapping[str, int] | None
    if result.target == "consumer":
        counts = dataclasses.asdict(result.reads) if result.reads is not None else None
        slowest, poll = result.slowest_read, f"{result.longest_poll:.2f}"
    else:
        counts = dataclasses.asdict(result.report.totals) if result.report is not None \
            else None
        slowest, poll = result.slowest_commit, "-"

    def count(kind: str) -> str:
        return str(counts[kind]) if counts is not None else "-"

    liveness = len(result.liveness) + len(result.feed.wedges)
    cells = [result.target, "asyncio" if result.asyncio else "sync", result.broker,
             str(result.seed), str(len(result.schedule.faults)), str(result.feed.committed),
             str(result.records_read),
             *(count(k) for k in ("lost", "duplicated", "aborted_read", "out_of_order",
                                  "unexpected")),
             f"{slowest:.2f}", poll, str(result.recreated),
             "ok" if not liveness and not result.error else str(liveness or "error"),
             f"{result.seconds:.0f}", "yes" if not result.problems() else "NO"]
    return "| " + " | ".join(cells) + " |"


def format_front_table(results: Sequence[FrontNemesisResult]) -> str:
    """A Markdown table of ``results``, one row each."""
    head = "| " + " | ".join(_FRONT_HEADINGS) + " |"
    rule = "|" + "|".join("---" for _ in _FRONT_HEADINGS) + "|"
    return "\n".join([head, rule, *(format_front_row(r) for r in results)])
