"""What the accumulator hands back for queued records: where they were written, or why not.

Sans-IO: nothing here locks, waits or reads a clock. Three shapes, chosen by cost:

* :class:`BatchOutcome`, one per batch, shared by every record of the batch. ``send()`` puts a
  record in a batch and gets back ``(outcome, offset delta)``; when the batch settles, one
  object changes, however many records it holds. Per-record results are computed only when
  someone asks (:meth:`BatchOutcome.delivered`).
* :class:`RecordDelivery`, that pair with the record's timestamp and the methods of a handle
  (``done``, ``exception``, ``result``); what :meth:`RecordAccumulator.append` returns.
* :class:`DeliveryHandle`, one per ``send_batch()`` call: its records may span several batches
  and partitions; it settles when all of them did, and fails as soon as one is lost.

A threaded caller (the producer facade) decides when other threads may see an outcome: it sets
:attr:`BatchOutcome.published` and keeps whatever must hear of it in :attr:`BatchOutcome.watchers`
(see :mod:`eosclient._producer.results`). The core only creates those two and never reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from eosclient._core.types import TopicPartition
from eosclient.errors import IllegalStateError

__all__ = ["PENDING", "BatchOutcome", "Delivered", "DeliveryHandle", "RecordDelivery"]

PENDING, SUCCEEDED, FAILED = 0, 1, 2
"""The states of an outcome or handle (ints: tested on the hot path)."""


class Delivered(NamedTuple):
    """Where records of one handle were written.

    Attributes:
        tp: The partition.
        offset: The first record's offset, or -1 if unknown (DUPLICATE_SEQUENCE_NUMBER:
            the broker already had the batch and does not say where).
        record_count: How many consecutive records of the handle start at ``offset``.
        timestamp_ms: The broker's LogAppendTime if the topic uses it, else the records'
            CreateTime.
    """

    tp: TopicPartition
    offset: int
    record_count: int
    timestamp_ms: int


class BatchOutcome:
    """How one batch ended, shared by its records. Settles once.

    Attributes:
        tp: The batch's partition.
        state: :data:`PENDING`, then ``SUCCEEDED`` or ``FAILED``.
        base_offset: The batch's first offset once written (-1: written, offset unknown).
        log_append_time_ms: The broker's LogAppendTime, or -1 for CreateTime.
        error: What its records failed with.
        published: Set by a threaded caller once other threads may read the outcome.
        watchers: Kept for that caller, to notify when it publishes.
    """

    __slots__ = ("base_offset", "error", "log_append_time_ms", "published", "state", "tp",
                 "watchers")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.state = PENDING
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: BaseException | None = None
        self.published = False
        self.watchers: list[Any] = []

    def succeed(self, base_offset: int, log_append_time_ms: int) -> None:
        """The batch is written at ``base_offset`` (-1: unknown); no-op once settled."""
        if self.state == PENDING:
            self.base_offset, self.log_append_time_ms = base_offset, log_append_time_ms
            self.state = SUCCEEDED

    def fail(self, error: BaseException) -> None:
        """The batch is lost with ``error``; no-op once settled."""
        if self.state == PENDING:
            self.error, self.state = error, FAILED

    def delivered(self, offset_delta: int, timestamp_ms: int, count: int = 1) -> Delivered:
        """Where ``count`` records starting at ``offset_delta`` in the batch were written."""
        base = self.base_offset
        stamp = self.log_append_time_ms if self.log_append_time_ms >= 0 else timestamp_ms
        return Delivered(self.tp, base + offset_delta if base >= 0 else -1, count, stamp)

    def __repr__(self) -> str:
        state = ("pending", "succeeded", "failed")[self.state]
        return f"<BatchOutcome {self.tp.topic}[{self.tp.partition}] {state}>"


class RecordDelivery(NamedTuple):
    """One record's place in a batch, read as a handle (sans-IO; never blocks).

    Attributes:
        outcome: Its batch's outcome.
        offset_delta: Its position in the batch.
        timestamp_ms: The CreateTime it was appended with.
    """

    outcome: BatchOutcome
    offset_delta: int
    timestamp_ms: int

    def done(self) -> bool:
        """Whether its batch has settled."""
        return self.outcome.state != PENDING

    def exception(self) -> BaseException | None:
        """The error it failed with; None if it was written.

        Raises:
            IllegalStateError: not settled yet.
        """
        if self.outcome.state == PENDING:
            raise IllegalStateError("the record is not delivered yet")
        return self.outcome.error

    def result(self) -> Delivered:
        """Where it was written.

        Raises:
            IllegalStateError: not settled yet.
            EosError: the error it failed with.
        """
        error = self.exception()
        if error is not None:
            raise error
        return self.outcome.delivered(self.offset_delta, self.timestamp_ms)


class DeliveryHandle:
    """The outcome of the records of one ``send_batch()`` call, sans-IO.

    It settles once: succeeded when every batch holding its records is written, failed as soon
    as one is lost. Callbacks run synchronously, in the thread that settles it; they must not
    raise.

    Attributes:
        record_count: How many records the handle covers.
        timestamp_ms: The CreateTime its records were appended with.
    """

    __slots__ = ("_callbacks", "_error", "_parts", "_results", "_state", "record_count",
                 "timestamp_ms")

    def __init__(self, timestamp_ms: int) -> None:
        self.record_count = 0
        self.timestamp_ms = timestamp_ms
        self._state = PENDING
        self._parts = 0
        self._results: list[Delivered | None] = []  # by part, in append order
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[DeliveryHandle], None]] = []

    def done(self) -> bool:
        """Whether the handle has settled (succeeded or failed)."""
        return self._state != PENDING

    def exception(self) -> BaseException | None:
        """The error it failed with; None if it succeeded.

        Raises:
            IllegalStateError: it has not settled yet.
        """
        self._check_done()
        return self._error

    def result(self) -> tuple[Delivered, ...]:
        """Where its records were written, one entry per batch, in append order.

        Raises:
            IllegalStateError: it has not settled yet.
            EosError: the error it failed with.
        """
        self._check_done()
        if self._error is not None:
            raise self._error
        return tuple(r for r in self._results if r is not None)

    def add_done_callback(self, callback: Callable[[DeliveryHandle], None]) -> None:
        """Call ``callback(handle)`` once settled; at once if it already is."""
        if self.done():
            callback(self)
        else:
            self._callbacks.append(callback)

    # -- driven by the accumulator ---------------------------------------------------------

    def _add_part(self, count: int) -> int:
        """Count ``count`` more records, in one batch; returns the part's number."""
        self._parts += 1
        self.record_count += count
        self._results.append(None)
        return len(self._results) - 1

    def _succeed_part(self, part: int, delivered: Delivered) -> None:
        if self._state != PENDING:
            return
        self._results[part] = delivered  # batches of other partitions may be answered first
        self._parts -= 1
        if self._parts == 0:
            self._settle(SUCCEEDED)

    def _succeed_if_empty(self) -> None:
        if self._parts == 0 and self._state == PENDING:
            self._settle(SUCCEEDED)

    def _fail(self, error: BaseException) -> None:
        if self._state == PENDING:
            self._error = error
            self._settle(FAILED)

    def _settle(self, state: int) -> None:
        self._state = state
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def _check_done(self) -> None:
        if self._state == PENDING:
            raise IllegalStateError("the records are not delivered yet")

    def __repr__(self) -> str:
        state = ("pending", "succeeded", "failed")[self._state]
        return f"<DeliveryHandle {state} records={self.record_count}>"
