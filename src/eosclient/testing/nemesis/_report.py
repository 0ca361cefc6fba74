"""The nemesis report: one self-contained HTML page per run, charts drawn as inline SVG.

A person should see at a glance what the schedule did and what it cost. The page holds, top
to bottom: the verdict and the checker's counts; the problems (liveness, anomalies with
examples) and the replay command; **workers**, a lane per worker and extra member with its
committed input records per second (from its progress lines) over time, its processes' lives
(a bar per process, a cross where one died unexpectedly) and the faults on it as bands
(killed: red, paused: amber, zombie stopped / resumed: purple, not a member: grey hatching),
proxy faults (cuts, lost answers) as dashed lines across every lane; **group progress**, the
group's committed offsets summed against the input written; **who wrote each input
partition**, a lane per input partition with a mark per output batch, coloured by the worker
whose producer wrote it (hollow: its transaction aborted); then the schedule as drawn, the
steps as played, and every process. No script, no external file: it opens from disk anywhere.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from eosclient.testing.checker import KINDS
from eosclient.testing.nemesis._result import Event, Instance, NemesisResult, Sample

__all__ = ["render", "write_report"]

_WIDTH: Final = 1100
_LEFT: Final = 70  # room for lane labels
_RIGHT: Final = 20
_LANE: Final = 56
_PALETTE: Final = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                   "#bcbd22", "#7f7f7f", "#ff7f0e", "#393b79")
_BANDS: Final = {"killed": "#f4a6a6", "paused": "#ffd27f", "zombie": "#c9a3e6",
                 "zombie-resumed": "#e8d5f5"}
_CSS: Final = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1140px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 6px}
.ok{color:#1a7f37;font-weight:600} .bad{color:#c62828;font-weight:600}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #ddd;padding:2px 8px;
text-align:left} th{background:#f4f4f4} td.n{text-align:right}
pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
.legend span{display:inline-block;margin-right:14px} .sw{display:inline-block;width:12px;
height:12px;vertical-align:middle;margin-right:4px;border:1px solid #999}
svg text{font:11px system-ui,sans-serif}
"""


def write_report(result: NemesisResult, directory: Path) -> Path:
    """Write ``result``'s page as ``nemesis-<broker>-seed<N>.html`` in ``directory`` (made if
    missing); return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    front = "-asyncio" if result.asyncio else ""
    path = directory / f"nemesis-{result.broker}{front}-seed{result.seed}.html"
    path.write_text(render(result), encoding="utf-8")
    return path.resolve()


def render(result: NemesisResult) -> str:
    """The whole page for ``result``."""
    end = max([result.seconds, *(s.t for s in result.samples), *(e.t for e in result.events),
               *(w.t for w in result.writes), 1.0])
    scale = _Scale(end)
    colours = _colours(result)
    problems = result.problems()
    verdict = ('<span class="ok">OK</span>' if not problems
               else f'<span class="bad">{len(problems)} PROBLEM(S)</span>')
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>nemesis {_e(result.broker)} seed {result.seed}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>nemesis on {_e(result.broker)}{' (asyncio)' if result.asyncio else ''}, "
        f"seed {result.seed}: {verdict}</h1>",
        f"<div>{result.records:,} records over {result.partitions} partitions, "
        f"{result.schedule.workers} workers, {len(result.schedule.faults)} faults drawn, "
        f"{result.faults_injected} injected, {len(result.instances)} processes, "
        f"{result.seconds:.0f} s. Topics {_e(result.input_topic)} &rarr; "
        f"{_e(result.output_topic)}.</div>",
        _counts(result),
        _problems(result),
        "<h2>Workers: committed input records per second, and the faults on each</h2>",
        _legend(),
        _workers_svg(result, scale, colours),
        "<h2>Group progress: committed offsets (summed) against the input written</h2>",
        _progress_svg(result, scale),
        "<h2>Who wrote each input partition's records (one mark per output batch; hollow: "
        "aborted)</h2>",
        _owners_svg(result, scale, colours),
        "<h2>Schedule (as drawn from the seed; times from the faults' start)</h2>",
        f"<pre>{_e(str(result.schedule))}</pre>",
        "<h2>Steps played (seconds since the run began)</h2>",
        _events_table(result.events),
        "<h2>Processes</h2>",
        _instances_table(result.instances),
        "</body></html>",
    ]
    return "\n".join(parts)


# -- text parts ----------------------------------------------------------------------------------

def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _counts(result: NemesisResult) -> str:
    heads = "".join(f"<th>{k.replace('_', '-')}</th>" for k in KINDS)
    cells = "".join(f"<td class='n'>{result.count(k)}</td>" for k in KINDS)
    out = (result.report.output_records if result.report is not None else "-")
    live = "ok" if not result.liveness and not result.error else (
        f"{len(result.liveness)} problem(s)" if result.liveness else "error")
    return (f"<h2>Checker (read_committed, straight from the broker) and liveness</h2>"
            f"<table><tr><th>output records</th>{heads}<th>liveness</th></tr>"
            f"<tr><td class='n'>{out}</td>{cells}<td>{_e(live)}</td></tr></table>")


def _problems(result: NemesisResult) -> str:
    items = [f"<li>{_e(p)}</li>" for p in result.problems()]
    body = f"<ul>{''.join(items)}</ul>" if items else "<p>None.</p>"
    if result.report is not None and not result.report.ok:
        body += f"<pre>{_e(str(result.report))}</pre>"
    return (f"<h2>Problems</h2>{body}<p>Replay: <code>{_e(result.replay())}</code></p>")


def _legend() -> str:
    swatches = [(_BANDS["killed"], "killed (SIGKILL until restart)"),
                (_BANDS["paused"], "paused (SIGSTOP)"),
                (_BANDS["zombie"], "zombie: stopped, replacement started"),
                (_BANDS["zombie-resumed"], "zombie resumed, until it exits"),
                ("#eeeeee", "not a member (extra worker)")]
    spans = "".join(f"<span><i class='sw' style='background:{c}'></i>{_e(t)}</span>"
                    for c, t in swatches)
    return (f"<div class='legend'>{spans}<span>&#x2717; died unexpectedly</span>"
            "<span>dashed: proxy fault</span></div>")


def _events_table(events: Sequence[Event]) -> str:
    rows = "".join(f"<tr><td class='n'>{e.t:.1f}</td><td>{_e(e.action)}</td><td>{_e(e.target)}"
                   f"</td><td>{_e(e.note)}</td></tr>" for e in events)
    return f"<table><tr><th>t (s)</th><th>step</th><th>on</th><th>note</th></tr>{rows}</table>"


def _instances_table(instances: Sequence[Instance]) -> str:
    rows = []
    for i in instances:
        problem = i.problem()
        ended = f"{i.ended:.1f}" if i.ended is not None else "-"
        rows.append(f"<tr><td>{_e(i.slot)}</td><td>{_e(i.role)}</td><td class='n'>"
                    f"{i.started:.1f}</td><td class='n'>{ended}</td><td class='n'>"
                    f"{_e(i.returncode)}</td><td>{_e(i.expect)}</td><td class='n'>"
                    f"{i.records_in}</td><td>{'' if problem is None else _e(problem)}</td></tr>")
    return ("<table><tr><th>slot</th><th>role</th><th>started</th><th>ended</th><th>exit</th>"
            "<th>expected</th><th>records in</th><th>problem</th></tr>"
            f"{''.join(rows)}</table>")


# -- charts ----------------------------------------------------------------------------------------

class _Scale:
    """Seconds since the run began -> x pixels."""

    def __init__(self, end: float) -> None:
        self.end = end

    def x(self, t: float) -> float:
        span = _WIDTH - _LEFT - _RIGHT
        return round(_LEFT + span * max(0.0, min(t, self.end)) / self.end, 1)

    def axis(self, top: float, bottom: float) -> str:
        step = next(s for s in (1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 1e9)
                    if self.end / s <= 12)
        marks = []
        t = 0.0
        while t <= self.end:
            x = self.x(t)
            marks.append(f"<line x1='{x}' y1='{top}' x2='{x}' y2='{bottom}' stroke='#eee'/>"
                         f"<text x='{x}' y='{bottom + 13}' text-anchor='middle' fill='#666'>"
                         f"{t:.0f}s</text>")
            t += step
        return "".join(marks)


def _colours(result: NemesisResult) -> dict[str, str]:
    slots = _slots(result)
    return {slot: _PALETTE[n % len(_PALETTE)] for n, slot in enumerate(slots)}


def _slots(result: NemesisResult) -> list[str]:
    seen: dict[str, None] = {f"w{n}": None for n in range(result.schedule.workers)}
    for instance in result.instances:
        seen.setdefault(instance.slot, None)
    for write in result.writes:
        seen.setdefault(write.slot, None)
    return list(seen)


def _window(result: NemesisResult, scale: _Scale, height: float) -> str:
    """The warm-up and drain phases shaded, with labels."""
    out = []
    if result.fault_start > 0:
        out.append(_rect(scale.x(0), 0, scale.x(result.fault_start) - scale.x(0), height,
                         "#f6f6f6") + _label(scale.x(0) + 3, 10, "warm-up", "#999"))
    if result.fault_end > 0:
        out.append(_rect(scale.x(result.fault_end), 0,
                         scale.x(scale.end) - scale.x(result.fault_end), height, "#eef5fb")
                   + _label(scale.x(result.fault_end) + 3, 10, "drain, probe, check", "#789"))
    return "".join(out)


def _proxy_lines(result: NemesisResult, scale: _Scale, height: float) -> str:
    out = []
    for e in result.events:
        if e.action in ("cut", "drop"):
            x = scale.x(e.t)
            text = "cut" if e.action == "cut" else f"drop {e.target}"
            out.append(f"<line x1='{x}' y1='14' x2='{x}' y2='{height}' stroke='#d62728' "
                       f"stroke-dasharray='3,3' stroke-width='1'><title>{_e(e.t)} s: "
                       f"{_e(text)}</title></line>"
                       f"<text x='{x + 2}' y='22' fill='#d62728' font-size='9'>{_e(text)}</text>")
    return "".join(out)


def _bands(result: NemesisResult, slot: str, end: float) -> list[tuple[float, float, str]]:
    """(start, end, kind) intervals of faults on ``slot``, from the steps played."""
    bands: list[tuple[float, float, str]] = []
    opened: dict[str, float] = {}
    for e in result.events:
        if e.target != slot:
            continue
        if e.action == "sigkill":
            opened["killed"] = e.t
        elif e.action == "restart" and "killed" in opened:
            bands.append((opened.pop("killed"), e.t, "killed"))
        elif e.action == "sigstop":
            opened["paused" if e.note == "pause" else "zombie"] = e.t
        elif e.action == "sigcont" and "paused" in opened:
            bands.append((opened.pop("paused"), e.t, "paused"))
        elif e.action == "resume-zombie" and "zombie" in opened:
            bands.append((opened.pop("zombie"), e.t, "zombie"))
            zombie_end = min([i.ended or end for i in result.instances
                              if i.slot == slot and i.expect == "fenced"
                              and i.started < e.t] or [end])
            bands.append((e.t, max(e.t, zombie_end), "zombie-resumed"))
    bands += [(start, end, kind) for kind, start in opened.items()]
    return bands


def _membership(result: NemesisResult, slot: str, end: float) -> list[tuple[float, float]]:
    """For an extra member: the times it was not in the group (before joining, after
    leaving)."""
    joins = [e.t for e in result.events if e.target == slot and e.action == "join"]
    leaves = [e.t for e in result.events if e.target == slot and e.action == "leave"]
    if not joins:
        return [(0.0, end)]
    out = [(0.0, joins[0])]
    if leaves:
        out.append((leaves[0], end))
    return out


def _rates(samples: Sequence[Sample], slot: str) -> list[tuple[float, float]]:
    """(t, committed records per second) for ``slot``, over ~1 s windows."""
    points: list[tuple[float, float]] = []
    previous: Sample | None = None
    for sample in samples:
        if previous is not None and sample.t - previous.t >= 0.9:
            done = sample.records_in.get(slot, 0) - previous.records_in.get(slot, 0)
            points.append((sample.t, max(0.0, done / (sample.t - previous.t))))
            previous = sample
        elif previous is None:
            previous = sample
    return points


def _workers_svg(result: NemesisResult, scale: _Scale, colours: dict[str, str]) -> str:
    slots = _slots(result)
    slots = [s for s in slots if not s.startswith("pid ")]
    top = 28
    height = top + _LANE * len(slots) + 20
    peak = _top([r for s in slots for _, r in _rates(result.samples, s)])
    parts = [_svg_open(height), _window(result, scale, height - 20),
             scale.axis(top, height - 20)]
    for n, slot in enumerate(slots):
        y0 = top + n * _LANE
        parts.append(_lane(result, scale, slot, y0=y0, peak=peak, colour=colours[slot]))
    parts.append(_proxy_lines(result, scale, height - 20))
    parts.append(f"<text x='{_WIDTH - _RIGHT}' y='12' text-anchor='end' fill='#666'>lane top = "
                 f"{peak:,.0f} records/s (higher clipped)</text></svg>")
    return "".join(parts)


def _top(rates: Sequence[float]) -> float:
    """The lanes' full scale: above the 95th percentile (a burst on the pre-filled input
    would flatten everything else; higher points are clipped)."""
    ordered = sorted(r for r in rates if r > 0)
    if not ordered:
        return 1.0
    return max(1.0, 1.2 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))])


def _lane(result: NemesisResult, scale: _Scale, slot: str, *, y0: float, peak: float,
          colour: str) -> str:
    plot = _LANE - 16  # rate area; the process bars go below it
    parts = [f"<line x1='{_LEFT}' y1='{y0 + _LANE - 2}' x2='{_WIDTH - _RIGHT}' "
             f"y2='{y0 + _LANE - 2}' stroke='#ccc'/>",
             _label(4, y0 + plot / 2 + 4, slot, colour, bold=True)]
    if slot.startswith("x"):
        for start, stop in _membership(result, slot, scale.end):
            parts.append(_rect(scale.x(start), y0, scale.x(stop) - scale.x(start), _LANE - 2,
                               "#eeeeee"))
    for start, stop, kind in _bands(result, slot, scale.end):
        parts.append(_rect(scale.x(start), y0, max(1.0, scale.x(stop) - scale.x(start)), plot,
                           _BANDS[kind], title=f"{kind} {start:.1f}-{stop:.1f} s"))
    points = _rates(result.samples, slot)
    if points:
        path = " ".join(f"{scale.x(t)},{round(y0 + plot - plot * min(r, peak) / peak, 1)}"
                        for t, r in points)
        first, last = scale.x(points[0][0]), scale.x(points[-1][0])
        parts.append(f"<polygon points='{first},{y0 + plot} {path} {last},{y0 + plot}' "
                     f"fill='{colour}' fill-opacity='0.25' stroke='none'/>"
                     f"<polyline points='{path}' fill='none' stroke='{colour}' "
                     "stroke-width='1.5'/>")
    for row, instance in enumerate(i for i in result.instances if i.slot == slot):
        parts.append(_process_bar(instance, scale, y0 + plot + 3 + (row % 2) * 5, colour))
    return "".join(parts)


def _process_bar(instance: Instance, scale: _Scale, y: float, colour: str) -> str:
    stop = instance.ended if instance.ended is not None else scale.end
    x0, x1 = scale.x(instance.started), scale.x(stop)
    dash = " stroke-dasharray='4,2'" if instance.role == "replacement" else ""
    title = (f"{instance.slot} {instance.role}: {instance.started:.1f}-{stop:.1f} s, exit "
             f"{instance.returncode}, expected {instance.expect}")
    out = (f"<line x1='{x0}' y1='{y}' x2='{max(x1, x0 + 1)}' y2='{y}' stroke='{colour}' "
           f"stroke-width='3'{dash}><title>{_e(title)}</title></line>")
    if instance.problem() is not None:
        out += (f"<text x='{x1}' y='{y + 4}' text-anchor='middle' fill='#c62828' "
                f"font-size='13' font-weight='bold'>&#x2717;<title>{_e(instance.problem())}"
                "</title></text>")
    return out


def _progress_svg(result: NemesisResult, scale: _Scale) -> str:
    height, top, bottom = 180, 16, 160
    samples = result.samples
    peak = max([sum(s.ends.values()) for s in samples] + [1])

    def line(values: Iterable[tuple[float, int]], colour: str, dash: str = "") -> str:
        pts = " ".join(f"{scale.x(t)},{round(bottom - (bottom - top) * v / peak, 1)}"
                       for t, v in values)
        return (f"<polyline points='{pts}' fill='none' stroke='{colour}' stroke-width='2'"
                f"{dash}/>")

    parts = [_svg_open(height), _window(result, scale, bottom), scale.axis(top, bottom),
             line(((s.t, sum(s.ends.values())) for s in samples), "#999",
                  " stroke-dasharray='5,3'"),
             line(((s.t, sum(min(s.committed.get(p, 0), e) for p, e in s.ends.items()))
                   for s in samples), "#1a7f37"),
             _proxy_lines(result, scale, bottom),
             _label(_LEFT - 4, top + 4, f"{peak:,}", "#666", anchor="end"),
             _label(_LEFT - 4, bottom, "0", "#666", anchor="end"),
             _label(_LEFT + 8, bottom - 8, "input written (dashed), committed by the group "
                    "(green)", "#444"),
             "</svg>"]
    return "".join(parts)


def _owners_svg(result: NemesisResult, scale: _Scale, colours: dict[str, str]) -> str:
    lane = 22
    top = 28
    height = top + lane * result.partitions + 20
    parts = [_svg_open(height), _window(result, scale, height - 20),
             scale.axis(top, height - 20)]
    for p in range(result.partitions):
        y = top + p * lane
        parts.append(_label(4, y + 14, f"in/{p}", "#444"))
        parts.append(f"<line x1='{_LEFT}' y1='{y + lane - 1}' x2='{_WIDTH - _RIGHT}' "
                     f"y2='{y + lane - 1}' stroke='#eee'/>")
    for write in result.writes:
        colour = colours.get(write.slot, "#000")
        for p, count in write.sources.items():
            if not 0 <= p < result.partitions:
                continue
            y = top + p * lane + 3
            fill = (f"fill='{colour}'" if write.committed
                    else f"fill='white' stroke='{colour}'")
            parts.append(f"<rect x='{scale.x(write.t) - 1}' y='{y}' width='3' height='{lane - 7}'"
                         f" {fill}><title>{_e(write.slot)} at {write.t:.1f} s: {count} "
                         f"records from in/{p}{'' if write.committed else ' (aborted)'}"
                         "</title></rect>")
    parts.append(_proxy_lines(result, scale, height - 20))
    key = "".join(f"<tspan fill='{c}' font-weight='bold'>{_e(s)} </tspan>"
                  for s, c in colours.items())
    parts.append(f"<text x='{_WIDTH - _RIGHT}' y='12' text-anchor='end'>{key}</text></svg>")
    return "".join(parts)


def _svg_open(height: float) -> str:
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{_WIDTH}' height='{height}' "
            f"viewBox='0 0 {_WIDTH} {height}'>")


def _rect(x: float, y: float, w: float, h: float, fill: str, *, title: str = "") -> str:
    tip = f"<title>{_e(title)}</title>" if title else ""
    return (f"<rect x='{x}' y='{y}' width='{max(0.0, round(w, 1))}' height='{h}' "
            f"fill='{fill}'>{tip}</rect>")


def _label(x: float, y: float, text: str, colour: str, *, bold: bool = False,
           anchor: str = "start") -> str:
    weight = " font-weight='bold'" if bold else ""
    return (f"<text x='{x}' y='{y}' fill='{colour}' text-anchor='{anchor}'{weight}>"
            f"{_e(text)}</text>")
