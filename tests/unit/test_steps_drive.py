"""The waiting written once (eosclient._net.steps): one generator, driven by either front."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from eosclient._net.steps import Block, Call, Steps, adrive, drive, wait_until
from eosclient.errors import KafkaTimeoutError


class _Client:
    connect_failure = None


class _Io:
    """What a front hands the steps: the I/O thread's lock, condition and wake-up."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.client = _Client()
        self.woken = 0

    def wake(self) -> None:
        self.woken += 1


class _Driver:
    def __init__(self) -> None:
        self.blocked: list[float] = []

    async def changed(self, timeout: float) -> None:
        self.blocked.append(timeout)
        await asyncio.sleep(0)


def _operation(io: _Io, state: dict[str, int], seen: list[object]) -> Steps[str]:
    yield from wait_until(io, lambda: state["turns"] >= 2, time.monotonic() + 5, "the thing",
                          lambda: None)  # type: ignore[arg-type]
    seen.append((yield Call(lambda x: x * 2, (21,))))
    return "done"


def test_the_sync_front_blocks_on_the_condition_and_calls_the_callback() -> None:
    io, state, seen = _Io(), {"turns": 0}, []

    def turns() -> None:
        for _ in range(2):
            time.sleep(0.05)
            with io.lock:
                state["turns"] += 1
                io.changed.notify_all()

    threading.Thread(target=turns).start()
    with io.lock:
        assert drive(_operation(io, state, seen), io) == "done"  # type: ignore[arg-type]
    assert seen == [42]
    assert io.woken == 1  # woken once, not at every turn


def test_the_async_front_awaits_turns_and_an_awaitable_callback() -> None:
    state, seen = {"turns": 0}, []
    driver = _Driver()

    async def twice(x: int) -> int:
        await asyncio.sleep(0)
        return x * 2

    def operation() -> Steps[str]:
        while state["turns"] < 2:
            state["turns"] += 1
            yield Block(1.0)
        seen.append((yield Call(twice, (21,))))
        return "done"

    assert asyncio.run(adrive(operation(), driver)) == "done"  # type: ignore[arg-type]
    assert seen == [42]
    assert driver.blocked == [1.0, 1.0]


def test_a_wait_past_its_deadline_raises_a_timeout_naming_what_waited() -> None:
    io = _Io()
    steps = wait_until(io, lambda: False, time.monotonic() + 0.05, "commit()",  # type: ignore[arg-type]
                       lambda: None, unchanged="the consumer is unchanged")
    with io.lock, pytest.raises(KafkaTimeoutError,
                                match=r"commit\(\) did not finish in time; the consumer"):
        drive(steps, io)  # type: ignore[arg-type]


def test_an_error_from_a_callback_is_thrown_into_the_steps() -> None:
    io = _Io()
    cleaned: list[str] = []

    def boom() -> None:
        raise ValueError("from the callback")

    def operation() -> Steps[None]:
        try:
            yield Call(boom)
        finally:
            cleaned.append("finished the step")

    with io.lock, pytest.raises(ValueError, match="from the callback"):
        drive(operation(), io)  # type: ignore[arg-type]
    assert cleaned == ["finished the step"]
