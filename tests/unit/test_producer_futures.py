"""The producer's futures: concurrent.futures.Future subclasses made cheaply.

RecordFuture (send()) reads a batch's shared outcome and becomes a full Future only when needed;
DeliveryFuture (send_batch()) is fed by a handle. Every way of observing a Future must still
work, whether it looks before or after the records settle: result(), exception(), done(),
add_done_callback(), wait() and as_completed().
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, as_completed, wait
from typing import Any

import pytest

from eosclient._core.delivery import BatchOutcome, Delivered, DeliveryHandle
from eosclient._core.types import TopicPartition
from eosclient._net.client import NetworkClient
from eosclient._net.io_thread import IoThread
from eosclient._producer.results import (
    _FUTURE_FIELDS,
    DeliveryFuture,
    RecordFuture,
    RecordMetadata,
    publish,
)
from eosclient.config import ClientConfig
from eosclient.errors import AbortableError, IllegalStateError

TP = TopicPartition("t", 3)
TS = 1_000


def settle(outcome: BatchOutcome, error: BaseException | None = None, base: int = 40) -> None:
    """What the I/O thread does: the outcome settles under the lock, is published after it."""
    if error is None:
        outcome.succeed(base, -1)
    else:
        outcome.fail(error)
    publish([outcome])


def test_future_fields_are_what_future_init_sets() -> None:
    # RecordFuture defers Future.__init__ and makes these on first access; a Python that adds
    # a field to Future would break it silently.
    probe: Future[Any] = Future()
    assert set(vars(probe)) == _FUTURE_FIELDS


def test_untouched_futures_of_a_batch_settle_with_one_step_and_no_condition() -> None:
    outcome = BatchOutcome(TP)
    futures = [RecordFuture(outcome, delta, TS + delta) for delta in range(3)]
    assert not any(f.done() for f in futures)
    settle(outcome)
    assert all("_condition" not in vars(f) for f in futures)
    assert [f.result() for f in futures] == [
        RecordMetadata("t", 3, 40 + d, TS + d, 1) for d in range(3)]
    assert all(f.done() and f.exception() is None for f in futures)


def test_a_waiter_before_publishing_is_woken() -> None:
    outcome = BatchOutcome(TP)
    future = RecordFuture(outcome, 1, TS)
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(future.result(30)))
    waiter.start()
    while "_condition" not in vars(future) or not future._condition._waiters:
        threading.Event().wait(0.001)
    settle(outcome)
    waiter.join(30)
    assert got == [RecordMetadata("t", 3, 41, TS, 1)]


def test_callbacks_before_and_after_settling_run_once() -> None:
    outcome = BatchOutcome(TP)
    future = RecordFuture(outcome, 0, TS)
    calls: list[Any] = []
    future.add_done_callback(calls.append)
    settle(outcome, AbortableError("lost"))
    future.add_done_callback(calls.append)
    assert calls == [future, future]
    assert isinstance(future.exception(), AbortableError)
    with pytest.raises(AbortableError):
        future.result()


def test_a_callback_added_between_settling_and_publishing_runs_at_publishing() -> None:
    # The outcome changes under the producer's lock; futures may see it only once published.
    outcome = BatchOutcome(TP)
    future = RecordFuture(outcome, 0, TS)
    calls: list[Any] = []
    outcome.succeed(7, -1)
    future.add_done_callback(calls.append)
    assert calls == [] and not future.done()
    publish([outcome])
    publish([outcome])  # publishing twice changes nothing
    assert calls == [future] and future.result().offset == 7


def test_wait_and_as_completed_see_both_orders() -> None:
    early_outcome, late_outcome = BatchOutcome(TP), BatchOutcome(TP)
    early = RecordFuture(early_outcome, 0, TS)
    settle(early_outcome)
    late = RecordFuture(late_outcome, 0, TS)
    timer = threading.Timer(0.05, settle, (late_outcome,))
    timer.start()
    done, _ = wait([late], timeout=30, return_when=FIRST_COMPLETED)
    assert done == {late}
    assert set(as_completed([early, late], timeout=30)) == {early, late}


def test_log_append_time_and_unknown_offsets() -> None:
    outcome = BatchOutcome(TP)
    future = RecordFuture(outcome, 5, TS)
    outcome.succeed(-1, TS + 9)  # DUPLICATE_SEQUENCE_NUMBER: written, offset unknown
    publish([outcome])
    assert future.result() == RecordMetadata("t", 3, -1, TS + 9, 1)


def test_a_record_future_cannot_be_cancelled() -> None:
    outcome = BatchOutcome(TP)
    future = RecordFuture(outcome, 0, TS)
    assert not future.cancel() and not future.cancelled() and not future.running()
    settle(outcome)
    assert future.result().offset == 40 and "finished" in repr(future)


# -- DeliveryFuture (send_batch) --------------------------------------------------------------


def pending(parts: int = 1) -> tuple[DeliveryFuture[Any], DeliveryHandle, list[Any]]:
    handle = DeliveryHandle(TS)
    handle._add_part(parts)
    sink: list[Any] = []
    future: DeliveryFuture[Any] = DeliveryFuture(handle, sink, False)
    future.watch()
    return future, handle, sink


def resolve(handle: DeliveryHandle, sink: list[Any], error: BaseException | None = None) -> None:
    if error is None:
        handle._succeed_part(0, Delivered(TP, 40, handle.record_count, TS))
    else:
        handle._fail(error)
    for future in sink:
        future.resolve()


def test_untouched_batch_future_settles_without_a_condition() -> None:
    future, handle, sink = pending()
    resolve(handle, sink)
    assert "_condition" not in vars(future)
    assert future.done() and future.result() == [RecordMetadata("t", 3, 40, TS, 1)]


def test_batch_future_waiters_and_callbacks() -> None:
    future, handle, sink = pending(parts=2)
    calls: list[Any] = []
    future.add_done_callback(calls.append)
    timer = threading.Timer(0.05, resolve, (handle, sink, AbortableError("lost")))
    timer.start()
    done, _ = wait([future], timeout=30, return_when=FIRST_COMPLETED)
    assert done == {future} and calls == [future]
    assert isinstance(future.exception(), AbortableError)
    assert not future.cancel() and not future.cancelled()


class _OnIoThread(IoThread):
    """An I/O thread that runs one function (as it runs a delivery callback) and stops."""

    def __init__(self, work: Callable[[], object]) -> None:
        super().__init__(NetworkClient(ClientConfig(bootstrap_servers=("127.0.0.1:9",))), "io")
        self.work = work
        self.got: list[object] = []

    def _run(self) -> None:
        try:
            self.got.append(self.work())
        except BaseException as exc:  # what the callback saw
            self.got.append(exc)
        self.client.close()


def _on_io_thread(work: Callable[[], object]) -> object:
    thread = _OnIoThread(work)
    thread.start()
    assert thread.join(30)
    return thread.got[0]


@pytest.mark.parametrize("wait", ["result", "exception"])
def test_waiting_for_a_pending_future_on_the_io_thread_raises_at_once(wait: str) -> None:
    # A delivery callback calling result() of a record not yet delivered waited for the I/O
    # thread it ran on: the producer deadlocked, and its thread outlived close().
    record = RecordFuture(BatchOutcome(TP), 0, TS)
    batch: DeliveryFuture[Any] = DeliveryFuture(DeliveryHandle(TS), [], False)
    for future in (record, batch):
        got = _on_io_thread(lambda f=future: getattr(f, wait)(5))  # type: ignore[misc]
        assert isinstance(got, IllegalStateError), got
        assert "deadlock" in str(got)


def test_on_the_io_thread_done_futures_and_zero_timeouts_are_fine() -> None:
    outcome = BatchOutcome(TP)
    done = RecordFuture(outcome, 2, TS)
    settle(outcome)
    assert _on_io_thread(done.result) == RecordMetadata("t", 3, 42, TS, 1)
    pending = RecordFuture(BatchOutcome(TP), 0, TS)
    assert type(_on_io_thread(lambda: pending.result(0))) is TimeoutError  # only looked


def test_other_threads_still_wait_for_a_pending_future() -> None:
    outcome = BatchOutcome(TP)
    future = RecordFuture(outcome, 0, TS)
    threading.Timer(0.05, settle, (outcome,)).start()
    assert future.result(30).offset == 40
