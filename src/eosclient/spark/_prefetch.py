"""Read an iterator ahead on a thread, so that waiting for Spark overlaps with sending.

Atomic mode's driver does two things per chunk: wait for Spark to deliver it (a socket read
that releases the GIL while the JVM and the executors work) and encode and queue its records
(pure Python). Done in turn, the waits add up; with the reading on a thread of its own, the
driver encodes one chunk while the next is on its way.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

__all__ = ["prefetched"]

T = TypeVar("T")
_POLL = 0.1  # seconds between checks of the stop flag while the consumer is slow


class _End:
    """The iterator's end, or the exception it raised."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class _Reader(Generic[T]):
    def __init__(self, items: Iterable[T], depth: int) -> None:
        self.items = items
        self.queue: queue.Queue[T | _End] = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="eosclient-spark-prefetch",
                                       daemon=True)

    def run(self) -> None:
        end = _End(None)
        try:
            for item in self.items:
                if not self.put(item):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            end = _End(exc)
        self.put(end)

    def put(self, item: T | _End) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False


def prefetched(items: Iterable[T], *, depth: int) -> Iterator[T]:
    """``items`` in order, read up to ``depth`` ahead on a thread.

    There is no deadline on an item: how long Spark computes a partition is Spark's business
    (its own failure detection ends a job that cannot finish). The wait checks in slices that
    the reading thread is alive, so it cannot outlive that thread.

    Raises:
        Whatever iterating ``items`` raised, when the consumer reaches that point.
    """
    reader = _Reader(items, depth)
    reader.thread.start()
    try:
        while True:
            item = _next(reader)
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                return
            yield item
    finally:
        reader.stop.set()


def _next(reader: _Reader[T]) -> T | _End:
    while True:
        try:
            return reader.queue.get(timeout=_POLL)
        except queue.Empty:
            if not reader.thread.is_alive() and reader.queue.empty():
                return _End(RuntimeError("the thread reading Spark's rows ended without a word"))
