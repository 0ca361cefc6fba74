"""Calls a client's ``stats_cb`` every ``statistics.interval.ms``, on a thread of its own.

Its own thread, so a slow exporter (an HTTP push, say) never holds up the I/O thread or the
application's; the snapshot is taken under the client's lock and the callback runs outside it.
A callback that raises is logged with its traceback and called again at the next interval.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from eosclient.stats import ClientStats

__all__ = ["StatsReporter"]

log = logging.getLogger("eosclient")


class StatsReporter:
    """Started at once; :meth:`stop` ends it (and returns without waiting for a callback)."""

    def __init__(self, interval: float, snapshot: Callable[[], ClientStats],
                 callback: Callable[[ClientStats], object], name: str) -> None:
        self._interval = interval
        self._snapshot = snapshot
        self._callback = callback
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """No callback starts after this returns (one under way finishes)."""
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                stats = self._snapshot()
            except Exception:  # a closed client: nothing more to report
                return
            if self._stopped.is_set():
                return
            try:
                self._callback(stats)
            except Exception:
                log.exception("stats_cb raised; it is called again in %.3g s", self._interval)
