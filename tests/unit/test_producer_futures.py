"""DeliveryFuture: a concurrent.futures.Future whose Condition is made only when needed.

Every way of observing a Future must still work, whether it looks before or after the record
settles: result(), exception(), done(), add_done_callback(), wait() and as_completed().
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, as_completed, wait
from typing import Any

import pytest

from eosclient._core.records import Delivered, DeliveryHandle
from eosclient._core.types import TopicPartition
from eosclient._producer.results import DeliveryFuture, RecordMetadata
from eosclient.errors import AbortableError

TP = TopicPartition("t", 3)


def pending(single: bool = True) -> tuple[DeliveryFuture[Any], DeliveryHandle, list[Any]]:
    handle = DeliveryHandle(1_000)
    handle._add_part(1 if single else 2)
    sink: list[Any] = []
    future: DeliveryFuture[Any] = DeliveryFuture(handle, sink, single)
    future.watch()
    return future, handle, sink


def settle(handle: DeliveryHandle, sink: list[Any], error: BaseException | None = None) -> None:
    """What the I/O thread does: the handle settles under the lock, the future after it."""
    if error is None:
        handle._succeed_part(Delivered(TP, 40, handle.record_count, 1_000))
    else:
        handle._fail(error)
    for future in sink:
        future.resolve()


def test_untouched_future_settles_without_a_condition() -> None:
    future, handle, sink = pending()
    settle(handle, sink)
    assert "_condition" not in future.__dict__
    assert future.done() and future.result() == RecordMetadata("t", 3, 40, 1_000, 1)


def test_a_waiter_before_settling_is_woken() -> None:
    future, handle, sink = pending()
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(future.result(30)))
    waiter.start()
    while "_condition" not in future.__dict__ or not future._condition._waiters:
        threading.Event().wait(0.001)
    settle(handle, sink)
    waiter.join(30)
    assert got == [RecordMetadata("t", 3, 40, 1_000, 1)]


def test_callbacks_before_and_after_settling_run_once() -> None:
    future, handle, sink = pending()
    calls: list[Any] = []
    future.add_done_callback(calls.append)
    settle(handle, sink, AbortableError("lost"))
    future.add_done_callback(calls.append)
    assert calls == [future, future]
    assert isinstance(future.exception(), AbortableError)
    with pytest.raises(AbortableError):
        future.result()


def test_wait_and_as_completed_see_both_orders() -> None:
    early, early_handle, early_sink = pending()
    settle(early_handle, early_sink)
    late, late_handle, late_sink = pending(single=False)
    timer = threading.Timer(0.05, settle, (late_handle, late_sink))
    timer.start()
    done, _ = wait([late], timeout=30, return_when=FIRST_COMPLETED)
    assert done == {late}
    assert set(as_completed([early, late], timeout=30)) == {early, late}
    assert late.result() == [RecordMetadata("t", 3, 40, 1_000, 2)]


def test_a_delivery_future_cannot_be_cancelled() -> None:
    future, handle, sink = pending()
    assert not future.cancel() and not future.cancelled()
    settle(handle, sink)
    assert future.result().offset == 40
