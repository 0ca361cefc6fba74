"""What ``send()`` and ``send_batch()`` give back: futures of where the records were written.

Both are real ``concurrent.futures.Future`` subclasses; every way of observing a Future works
(``result``, ``exception``, ``done``, ``add_done_callback``, ``wait()``, ``as_completed()``), and
callbacks run without the producer's lock, so they may call the producer. They run on the I/O
thread, though, which is what completes every future: a callback's ``result()`` of a future
not yet done would wait for itself, so it raises IllegalStateError at once instead
(:func:`~eosclient._net.io_thread.refuse_to_block`).

**One future per record was the hot path's largest cost after encoding**, so a
:class:`RecordFuture` (``send()``) is made in ~0.15 us: three slots, no ``threading.Condition``
and no ``Future.__init__``. It reads its result from its batch's
:class:`~eosclient._core.delivery.BatchOutcome`, which settles once for the whole batch; the
I/O thread then *publishes* the outcome (:func:`publish`, after releasing the producer's lock),
one step per batch, not per record. Only a future that something waits on, adds a callback to or
puts in ``wait()``/``as_completed()`` becomes a full Future: the first access to one of
``Future``'s private attributes (``_condition``, ``_state``, ``_result``, ``_exception``,
``_waiters``, ``_done_callbacks``, unchanged from Python 3.2 to 3.13 and checked by
``tests/unit/test_producer_futures.py``) runs ``Future.__init__`` and registers the future with
its outcome, which publishing then finishes the ordinary way (waking waiters, running
callbacks). ``done()``, ``result()`` and ``exception()`` of a published outcome are answered
from it directly.

A :class:`DeliveryFuture` (``send_batch()``, one per call) is fed by a
:class:`~eosclient._core.delivery.DeliveryHandle` the same way: settled under the lock, resolved
after it; its Condition too is made only when needed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, PENDING
from typing import Any, Generic, NamedTuple, TypeVar

from eosclient._core.delivery import BatchOutcome, Delivered, DeliveryHandle
from eosclient._net.io_thread import refuse_to_block

__all__ = ["DeliveryFuture", "RecordFuture", "RecordMetadata", "publish"]

_T = TypeVar("_T")
# Guards making a future's Condition (and registering it with its outcome) against the I/O
# thread settling or publishing it unlocked.
_MAKING = threading.Lock()
_FUTURE_FIELDS = frozenset({"_condition", "_state", "_result", "_exception", "_waiters",
                            "_done_callbacks"})


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


def publish(outcomes: Iterable[BatchOutcome]) -> None:
    """Make settled outcomes visible to their records' futures (I/O thread, without the lock).

    Futures nobody looked at need nothing; the ones made into full Futures are finished.
    """
    finished: list[RecordFuture] = []
    with _MAKING:
        for outcome in outcomes:
            if not outcome.published:
                outcome.published = True
                finished += outcome.watchers
                outcome.watchers = []
    for future in finished:
        future._finish()


class RecordFuture(Future[RecordMetadata]):
    """The future of one ``send()``: a ``concurrent.futures.Future`` of :class:`RecordMetadata`.

    Made cheaply and completed per batch (see the module docstring); it cannot be cancelled,
    and only the producer completes it.
    """

    __slots__ = ("_delta", "_outcome", "_stamp")

    def __init__(self, outcome: BatchOutcome, offset_delta: int, timestamp_ms: int) -> None:
        # Future.__init__ is deliberately not called: __getattr__ runs it on first need.
        self._outcome = outcome
        self._delta = offset_delta
        self._stamp = timestamp_ms

    def __getattr__(self, name: str) -> Any:
        if name not in _FUTURE_FIELDS:
            raise AttributeError(name)
        self._make()
        return self.__dict__[name]

    def _make(self) -> None:
        """Become a full Future: pending and watched, or finished if already published."""
        with _MAKING:
            if "_condition" in self.__dict__:
                return
            Future.__init__(self)
            if not self._outcome.published:
                self._outcome.watchers.append(self)
                return
        self._finish()  # nobody can wait on it yet: its Condition was just made, by us

    def _finish(self) -> None:
        error = self._outcome.error
        if error is not None:
            self.set_exception(error)
        else:
            self.set_result(self._metadata())

    def _metadata(self) -> RecordMetadata:
        outcome = self._outcome
        tp, base, appended = outcome.tp, outcome.base_offset, outcome.log_append_time_ms
        return RecordMetadata(tp.topic, tp.partition, base + self._delta if base >= 0 else -1,
                              appended if appended >= 0 else self._stamp, 1)

    def done(self) -> bool:
        """Whether the record was written or failed."""
        return self._outcome.published

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Where the record was written, waiting up to ``timeout`` seconds (None: forever).

        Raises:
            TimeoutError: not done in time.
            EosError: the error the record failed with.
            IllegalStateError: not done, and called on the producer's I/O thread (in a
                delivery callback), where waiting would deadlock.
        """
        outcome = self._outcome
        if not outcome.published:
            refuse_to_block("Future.result() of a record not yet delivered", timeout)
            self._make()
            return super().result(timeout)
        if outcome.error is not None:
            raise outcome.error
        return self._metadata()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error the record failed with (None: written), waiting up to ``timeout``."""
        if not self._outcome.published:
            refuse_to_block("Future.exception() of a record not yet delivered", timeout)
            self._make()
            return super().exception(timeout)
        return self._outcome.error

    def cancel(self) -> bool:
        """Records handed to the producer cannot be taken back: always False."""
        return False

    def cancelled(self) -> bool:
        """Always False."""
        return False

    def running(self) -> bool:
        """Always False (a queued record is pending, then done)."""
        return False


class DeliveryFuture(Future[_T], Generic[_T]):
    """The future of one ``send_batch()``, fed by a delivery handle. It cannot be cancelled.

    Args:
        handle: The accumulator's handle for the records.
        sink: Where to put this future once the handle settles (the I/O thread resolves it
            from there, outside the lock).
        single: Resolve to one :class:`RecordMetadata`, or a list (``send_batch``).
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

    def result(self, timeout: float | None = None) -> _T:
        """As ``Future.result``; a wait on the producer's I/O thread raises IllegalStateError
        (see :meth:`RecordFuture.result`)."""
        if self._state == PENDING:
            refuse_to_block("Future.result() of records not yet delivered", timeout)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """As ``Future.exception``; a wait on the I/O thread raises IllegalStateError."""
        if self._state == PENDING:
            refuse_to_block("Future.exception() of records not yet delivered", timeout)
        return super().exception(timeout)

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
