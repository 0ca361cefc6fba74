"""What the demo shows while it runs: phase lines and one progress bar (stdlib only).

On a terminal the bar is redrawn in place with ``\\r`` (at most ten times a second) and a phase
line first clears it, prints, and lets the next update draw it again below. Anywhere else (a
pipe, a CI log) there is no ``\\r``: the bar becomes a plain line at every tenth of the way, so
a log shows the progress without thousands of redraws. ``quiet`` shows nothing; the caller
prints the report.
"""

from __future__ import annotations

import time
from typing import Final, TextIO

__all__ = ["Screen"]

_WIDTH: Final = 30
_REDRAW: Final = 0.1  # seconds between two redraws on a terminal
_STEPS: Final = 10  # lines per bar when not on a terminal


class Screen:
    """Phase lines and a progress bar on ``stream``.

    Args:
        stream: Where to write (stdout, usually).
        quiet: Write nothing at all.
        tty: Redraw in place; by default, whether ``stream`` is a terminal.
    """

    def __init__(self, stream: TextIO, *, quiet: bool = False, tty: bool | None = None) -> None:
        self._stream = stream
        self._quiet = quiet
        self._tty = stream.isatty() if tty is None else tty
        self._drawn = ""  # the bar as it is on the terminal now ("" if none)
        self._last_draw = 0.0
        self._last_step = -1

    def say(self, text: str) -> None:
        """Print one phase line (above the bar, if one is shown)."""
        if self._quiet:
            return
        self._clear()
        self._stream.write(text + "\n")
        self._stream.flush()

    def progress(self, done: int, total: int, note: str = "") -> None:
        """Show ``done`` of ``total`` records; cheap to call often (redraws are throttled)."""
        if self._quiet or total <= 0:
            return
        done = max(0, min(done, total))
        bar = render_bar(done, total, note)
        if self._tty:
            now = time.monotonic()
            if bar != self._drawn and (now - self._last_draw >= _REDRAW or done == total):
                self._stream.write("\r" + bar.ljust(len(self._drawn)))
                self._stream.flush()
                self._drawn, self._last_draw = bar, now
            return
        step = done * _STEPS // total
        if step > self._last_step:
            self._last_step = step
            self._stream.write(bar + "\n")
            self._stream.flush()

    def end_bar(self) -> None:
        """Leave the bar as it is and start a new line under it; the next bar starts afresh."""
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = ""
        self._last_step = -1

    def _clear(self) -> None:
        if self._drawn:
            self._stream.write("\r" + " " * len(self._drawn) + "\r")
            self._drawn = ""


def render_bar(done: int, total: int, note: str = "") -> str:
    """``[#########.....................]  30%  15,000/50,000 records  note``"""
    filled = done * _WIDTH // total if total else _WIDTH
    percent = done * 100 // total if total else 100
    text = f"[{'#' * filled}{'.' * (_WIDTH - filled)}] {percent:3d}%  {done:,}/{total:,} records"
    return f"{text}  {note}" if note else text
