"""What ``send()`` and ``send_batch()`` give back: a future of where the records were written.

The sans-IO accumulator settles a :class:`~eosclient._core.records.DeliveryHandle` in the I/O
thread, under the producer's lock. A :class:`DeliveryFuture` is told so (it only appends itself to
a list then) and is resolved after the lock is released, so callbacks the application attached to
the future run without the lock and may call the producer.

One future per record is the hot path's largest cost after encoding, so a
:class:`DeliveryFuture` makes the ``threading.Condition`` of ``concurrent.futures.Future`` only
when something waits on it, adds a callback or puts it in ``wait()``/``as_completed()`` (every
one of those goes through ``self._condition``). A future nobody touched before it settled is
finished without locking or notifying anyone. This relies on ``Future``'s private attributes
(``_condition``, ``_state``, ``_result``, ``_exception``, ``_waiters``, ``_done_callbacks``),
unchanged from Python 3.2 to 3.13 and checked by ``tests/unit/test_producer_futures.py``.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, PENDING
from typing import Any, Generic, NamedTuple, TypeVar

from eosclient._core.records import Delivered, DeliveryHandle

__all__ = ["DeliveryFuture", "RecordMetadata"]

_T = TypeVar("_T")
_MAKING = threading.Lock()  # guards making a future's Condition against settling it unlocked


class RecordMetadata(NamedTuple):
    """Where a record was written.

    Attributes:
        topic: The topic.
        partition: The partition.
        offset: The record's offset; -1 if the broker did not say (a resend it already had).
        timestamp_ms: The broker's LogAppendTime if the topic uses it, else the CreateTime.
        record_count: 1 for ``send()``; for ``send_batch()``, how many consecutive records
            start at ``offset`` (one entry per run of records written together).
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    record_count: int = 1


def _metadata(delivered: Delivered) -> RecordMetadata:
    tp = delivered.tp
    return RecordMetadata(tp.topic, tp.partition, delivered.offset, delivered.timestamp_ms,
                          delivered.record_count)


class DeliveryFuture(Future[_T], Generic[_T]):
    """A ``concurrent.futures.Future`` fed by a delivery handle. It cannot be cancelled.

    Args:
        handle: The accumulator's handle for the records.
        sink: Where to put this future once the handle settles (the I/O thread resolves it
            from there, outside the lock).
        single: Resolve to one :class:`RecordMetadata` (``send``) or a list (``send_batch``).
    """

    def __init__(self, handle: DeliveryHandle, sink: list[DeliveryFuture[object]],
                 single: bool) -> None:
        # Future.__init__ minus the Condition, which __getattr__ makes on first use.
        self._state = PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Any] = []
        self._handle = handle
        self._sink = sink
        self._single = single

    def __getattr__(self, name: str) -> Any:
        if name != "_condition":
            raise AttributeError(name)
        with _MAKING:
            condition = self.__dict__.get("_condition")
            if condition is None:
                condition = self.__dict__["_condition"] = threading.Condition()
        return condition

    def cancel(self) -> bool:
        """Records handed to the producer cannot be taken back: always False."""
        return False

    def watch(self) -> None:
        """Put this future in its sink when the handle settles (call under the lock)."""
        self._handle.add_done_callback(self._settled)

    def _settled(self, handle: DeliveryHandle) -> None:
        self._sink.append(self)  # type: ignore[arg-type]

    def resolve(self) -> None:
        """Set the result or exception from the settled handle (call outside the lock)."""
        error = self._handle.exception()
        result: Any = None
        if error is None:
            delivered = self._handle.result()
            result = _metadata(delivered[0]) if self._single else [
                _metadata(d) for d in delivered]
        with _MAKING:
            if "_condition" not in self.__dict__:  # nobody waits, listens or holds a waiter
                self._result, self._exception, self._state = result, error, FINISHED
                return
        if error is not None:
            self.set_exception(error)
        else:
            self.set_result(result)
