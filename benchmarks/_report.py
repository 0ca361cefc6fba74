"""Outcomes, their summaries, the ratios against the issue's targets, the table and the JSON.

Throughput (records/s, transactions/s) is summarised by the median over repeats, with the
slowest and fastest repeat beside it. Latency pools every transaction of every repeat and gives
the median and the 99th percentile (nearest rank), in milliseconds and in round trips.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

THROUGHPUT: Final = "throughput"
LATENCY: Final = "latency"
RTT: Final = "RTT"  # a ratio's denominator: one nominal round trip (twice the added latency)
MEASURED_RTT: Final = "measured RTT"  # one ApiVersions round trip through the proxy, measured


def rtt_of(scenario: str) -> str:
    """A denominator: one nominal round trip of ``scenario``'s own proxy (the rtt scenarios)."""
    return f"{RTT} of {scenario}"


def measured_rtt_of(scenario: str) -> str:
    """A denominator: one ApiVersions round trip measured through ``scenario``'s own proxy."""
    return f"{MEASURED_RTT} of {scenario}"


def is_round_trip(denominator: str) -> bool:
    """Whether a ratio's denominator is a round trip (the ratio is then in RTT, not x)."""
    return denominator.startswith((RTT, MEASURED_RTT))


@dataclass(slots=True)
class Outcome:
    """Everything measured for one variant in one scenario."""

    scenario: str
    kind: str  # THROUGHPUT or LATENCY
    unit: str  # e.g. "records/s"
    key: str
    family: str
    label: str
    runs: list[float] = field(default_factory=list)  # one rate per repeat
    latencies: list[float] = field(default_factory=list)  # seconds, every timed transaction
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every repeat ran and checked out."""
        return not self.errors and bool(self.runs or self.latencies)

    def value(self) -> float | None:
        """The headline number: median rate, or median latency in seconds."""
        if not self.ok:
            return None
        return statistics.median(self.latencies if self.kind == LATENCY else self.runs)

    def p99(self) -> float | None:
        """The 99th percentile latency in seconds (latency outcomes only)."""
        if not self.ok or not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class RatioSpec:
    """One comparison: `numerator` over `denominator` in `scenario`, against an optional target.

    `denominator` is a variant key, or `RTT` / `MEASURED_RTT` to express a latency in round
    trips. With
    `direction` ">=" higher is better (throughput); with "<=" lower is better (latency).
    """

    scenario: str
    numerator: str
    denominator: str
    target: float | None = None
    direction: str = ">="
    note: str = ""


@dataclass(frozen=True, slots=True)
class Ratio:
    """A computed comparison, or why it could not be computed."""

    spec: RatioSpec
    text: str
    value: float | None

    def verdict(self) -> str:
        """"met", "MISSED", or "-" when there is no target or no value."""
        target = self.spec.target
        if target is None or self.value is None:
            return "-"
        met = self.value >= target if self.spec.direction == ">=" else self.value <= target
        return "met" if met else "MISSED"


def compute_ratios(
    outcomes: Sequence[Outcome], specs: Sequence[RatioSpec], round_trips: Mapping[str, float]
) -> list[Ratio]:
    """Compute each ratio from the outcomes' headline values.

    `round_trips` maps `RTT`, `MEASURED_RTT` and the `rtt_of`/`measured_rtt_of` names to seconds.
    """
    by_key = {(o.scenario, o.key): o for o in outcomes}
    ratios = []
    for spec in specs:
        top = by_key.get((spec.scenario, spec.numerator))
        bottom = by_key.get((spec.scenario, spec.denominator))
        a = top.value() if top else None
        b = round_trips.get(spec.denominator) if is_round_trip(spec.denominator) else (
            bottom.value() if bottom else None)
        value = a / b if a is not None and b else None
        text = f"{_label(top, spec.numerator)} / {_label(bottom, spec.denominator)}"
        ratios.append(Ratio(spec, text, value))
    return ratios


def _label(outcome: Outcome | None, key: str) -> str:
    return outcome.label if outcome else key


# --- the table ----------------------------------------------------------------------------------


def format_outcome(outcome: Outcome, rtt: float) -> str:
    """One result cell: the headline number, or why there is none."""
    if outcome.errors:
        return outcome.errors[0]
    value = outcome.value()
    if value is None:
        return "no result"
    if outcome.kind == LATENCY:
        p99 = outcome.p99() or 0.0
        return (f"median {value * 1e3:6.2f} ms = {value / rtt:4.2f} RTT;"
                f"  p99 {p99 * 1e3:6.2f} ms = {p99 / rtt:4.2f} RTT")
    digits = 2 if value < 100 else 0  # CPU seconds per million records, say
    spread = ""
    if len(outcome.runs) > 1:
        spread = f"  (runs {min(outcome.runs):,.{digits}f} .. {max(outcome.runs):,.{digits}f})"
    return f"{value:>12,.{digits}f} {outcome.unit}{spread}"


def format_ratio(ratio: Ratio) -> list[str]:
    """The cells of one ratio row: scenario, comparison, value, target, verdict."""
    unit = " RTT" if is_round_trip(ratio.spec.denominator) else "x"
    value = "-" if ratio.value is None else f"{ratio.value:.2f}{unit}"
    target = ratio.spec.note
    if ratio.spec.target is not None:
        target = f"{ratio.spec.direction} {ratio.spec.target:g}{unit} {target}".rstrip()
    return [ratio.spec.scenario, ratio.text, value, target, ratio.verdict()]


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    """Left-aligned columns, two spaces apart, with a rule under the header."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# --- JSON ---------------------------------------------------------------------------------------


def outcome_json(outcome: Outcome, rtt: float) -> dict[str, Any]:
    """An outcome as plain data (latencies in milliseconds)."""
    data: dict[str, Any] = {
        "scenario": outcome.scenario, "client": outcome.family, "variant": outcome.label,
        "unit": outcome.unit, "errors": outcome.errors, "ok": outcome.ok,
    }
    if outcome.kind == LATENCY:
        median, p99 = outcome.value(), outcome.p99()
        data |= {
            "median_ms": None if median is None else median * 1e3,
            "p99_ms": None if p99 is None else p99 * 1e3,
            "median_rtt": None if median is None else median / rtt,
            "p99_rtt": None if p99 is None else p99 / rtt,
            "transactions": len(outcome.latencies),
            "latencies_ms": [round(t * 1e3, 4) for t in outcome.latencies],
        }
    else:
        data |= {"median": outcome.value(), "runs": outcome.runs}
    return data


def ratio_json(ratio: Ratio) -> dict[str, Any]:
    """A ratio as plain data."""
    return {
        "scenario": ratio.spec.scenario, "comparison": ratio.text, "value": ratio.value,
        "target": ratio.spec.target, "direction": ratio.spec.direction,
        "note": ratio.spec.note, "verdict": ratio.verdict(),
    }


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Write `document` to `path`, indented."""
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
