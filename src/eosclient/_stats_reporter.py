"""Calls a client's ``stats_cb`` every ``statistics.interval.ms``.

The sync clients: on a thread of its own (:class:`StatsReporter`), so a slow exporter (an HTTP
push, say) never holds up the I/O thread or the application's; the snapshot is taken under the
client's lock and the callback runs outside it. The asyncio clients: from the event loop's
timer (:class:`LoopStatsReporter`), no thread; a callback that returns an awaitable (a
coroutine function) has it run as a task, so a slow export does not hold the loop.
Either way, a callback that raises is logged with its traceback and called again at the next
interval.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

from eosclient.stats import ClientStats

__all__ = ["LoopStatsReporter", "StatsReporter"]

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


class LoopStatsReporter:
    """:class:`StatsReporter` for the asyncio front: a timer of the running loop."""

    def __init__(self, interval: float, snapshot: Callable[[], ClientStats],
                 callback: Callable[[ClientStats], object]) -> None:
        self._interval = interval
        self._snapshot = snapshot
        self._callback = callback
        self._loop = asyncio.get_running_loop()
        self._stopped = False
        self._tasks: set[asyncio.Task[Any]] = set()  # (held: the loop keeps weak references)
        self._handle = self._loop.call_later(interval, self._tick)

    def stop(self) -> None:
        """No callback starts after this returns (a task under way finishes)."""
        self._stopped = True
        self._handle.cancel()

    def _tick(self) -> None:
        if self._stopped:
            return
        try:
            stats = self._snapshot()
        except Exception:  # a closed client: nothing more to report
            return
        try:
            result = self._callback(stats)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._done)
        except Exception:
            log.exception("stats_cb raised; it is called again in %.3g s", self._interval)
        self._handle = self._loop.call_later(self._interval, self._tick)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("stats_cb raised; it is called again in %.3g s", self._interval,
                      exc_info=task.exception())
