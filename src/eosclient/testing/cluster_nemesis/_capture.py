"""The evidence of a cluster nemesis run: the clients' DEBUG lines, stamped on the schedule's
clock, so that what a client logged can be read beside the faults played.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Final

__all__ = ["Capture", "restamp"]

_MAX_LOG_LINES: Final = 200_000


class Capture(logging.Handler):
    """Keeps the DEBUG lines of the client's loggers, stamped on the schedule's clock."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(logging.DEBUG)
        self.clock = time.monotonic()
        self.lines: deque[str] = deque(maxlen=_MAX_LOG_LINES)
        self._loggers = [logging.getLogger(n) for n in names]
        self._levels = [lg.level for lg in self._loggers]

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            t = record.created - time.time() + time.monotonic() - self.clock
            self.lines.append(f"t={t:.3f}s {record.threadName} {record.name} "
                              f"{record.levelname} {record.getMessage()}")

    def __enter__(self) -> Capture:
        for lg in self._loggers:
            lg.addHandler(self)
            lg.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for lg, level in zip(self._loggers, self._levels, strict=True):
            lg.removeHandler(self)
            lg.setLevel(level)


def restamp(capture: Capture, clock: float) -> None:
    """Move ``capture`` to the schedule's clock, ``clock``: the warm-up's lines kept so far
    get negative times, on that clock too."""
    shift = clock - capture.clock
    old, capture.lines = capture.lines, deque(maxlen=capture.lines.maxlen)
    capture.clock = clock
    restamped = []
    for line in old:
        stamp, _, rest = line.partition("s ")
        restamped.append(f"t={float(stamp.removeprefix('t=')) - shift:.3f}s {rest}")
    capture.lines.extendleft(reversed(restamped))
