"""LoopDriver: an event loop runs an IoThread's turns, woken through the network client's
selector descriptor. No broker: a real NetworkClient with nothing to connect to, and an IoThread
whose turn records what happened."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from eosclient._net.client import Answer, NetworkClient
from eosclient._net.io_thread import IoThread
from eosclient._net.loop_driver import LoopDriver
from eosclient.config import ClientConfig
from eosclient.errors import IllegalStateError

Run = Callable[[Coroutine[Any, Any, Any]], Any]


class Recorder(IoThread):
    """Counts turns; raises from the turn after ``explode`` is set; stops when asked."""

    def __init__(self) -> None:
        super().__init__(NetworkClient(ClientConfig(bootstrap_servers=["127.0.0.1:1"])),
                         "test-recorder")
        self.turns = 0
        self.explode: BaseException | None = None
        self.crashed_with: BaseException | None = None

    def turn(self, answers: list[Answer]) -> float | None:
        self.turns += 1
        self.sleeping = True
        if self.explode is not None:
            raise self.explode
        if self._stopping:
            self.client.close()
            return None
        return 30.0  # only a wakeup turns it again within a test

    def crash(self, exc: BaseException) -> None:
        self.crashed_with = exc
        self.client.close()


def test_a_wakeup_from_any_thread_runs_a_turn_at_once(run_async: Run) -> None:
    async def main() -> None:
        io = Recorder()
        driver = LoopDriver(io)
        driver.start()
        await driver.changed(5.0)  # the first turn, run soon after start()
        before, started = io.turns, time.monotonic()
        waiter = asyncio.create_task(driver.changed(5.0))  # waits for the next turn
        await asyncio.sleep(0)
        await asyncio.to_thread(io.wake)  # the socketpair, written from another thread
        await waiter
        assert io.turns == before + 1 and time.monotonic() - started < 1.0
        io.stop()
        assert await driver.stopped_after(5.0)
        assert io.client.closed

    run_async(main())


class WokenInTurn(Recorder):
    """A Recorder whose turn, once asked, writes the selector's wakeup while it runs, as a
    host-name lookup finishing on the resolver's thread does, or leaves an event behind as a
    connect or handshake finishing does."""

    def __init__(self) -> None:
        super().__init__()
        self.wake_in_turn = False

    def turn(self, answers: list[Answer]) -> float | None:
        if self.wake_in_turn:
            self.wake_in_turn = False
            self.client.wakeup()
        return super().turn(answers)


def test_an_event_taken_by_the_poll_after_a_turn_runs_another_turn(run_async: Run) -> None:
    # That poll took the event and returned no answer, and the driver then waited for the
    # turn's timer: batches for a broker back up waited up to a second (the cluster nemesis).
    async def main() -> None:
        io = WokenInTurn()
        driver = LoopDriver(io)
        driver.start()
        await driver.changed(5.0)  # the first turn
        io.wake_in_turn = True
        io.wake()
        await driver.changed(5.0)  # the turn woken, during which the event comes
        await driver.changed(5.0)  # the turn for that event (not the timer's, 30 s away)
        assert io.turns == 3
        io.stop()
        assert await driver.stopped_after(5.0)

    run_async(main())


def test_a_turn_that_raises_crashes_the_client_and_wakes_every_waiter(run_async: Run) -> None:
    async def main() -> None:
        io = Recorder()
        driver = LoopDriver(io)
        driver.start()
        await driver.changed(5.0)
        waiters = [asyncio.create_task(driver.changed(30.0)) for _ in range(3)]
        await asyncio.sleep(0)
        io.explode = RuntimeError("a bug in a turn")
        io.wake()
        done, _ = await asyncio.wait(waiters, timeout=5.0)
        assert len(done) == 3
        assert isinstance(io.crashed_with, RuntimeError) and driver.stopped
        await driver.changed(30.0)  # stopped: returns at once

    run_async(main())


def test_one_cancelled_waiter_leaves_the_others_waiting(run_async: Run) -> None:
    async def main() -> None:
        io = Recorder()
        driver = LoopDriver(io)
        driver.start()
        await driver.changed(5.0)
        first, second = (asyncio.create_task(driver.changed(30.0)) for _ in range(2))
        await asyncio.sleep(0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        io.wake()
        await asyncio.wait_for(second, 5.0)  # still woken by the next turn
        io.stop()
        assert await driver.stopped_after(5.0)

    run_async(main())


def test_calls_from_another_thread_are_refused(run_async: Run) -> None:
    async def main() -> None:
        io = Recorder()
        driver = LoopDriver(io)
        driver.start()
        driver.check_thread("producer")  # the loop's thread: fine
        with pytest.raises(IllegalStateError, match="loop's thread"):
            await asyncio.to_thread(driver.check_thread, "producer")
        assert io.in_io_thread()  # blocking waits on the loop's thread are refused as on
        io.stop()                 # the I/O thread's
        assert await driver.stopped_after(5.0)

    run_async(main())


def test_a_cancellation_that_arrives_with_the_turn_is_not_swallowed(run_async: Run) -> None:
    # asyncio.wait_for (Python 3.11) returned normally here: a cancelled commit went on
    async def main() -> None:
        io = Recorder()
        driver = LoopDriver(io)
        driver.start()
        await driver.changed(5.0)
        task = asyncio.create_task(driver.changed(30.0))
        await asyncio.sleep(0)  # the task waits for the next turn
        driver.pump()  # the turn: its wait is over ...
        task.cancel()  # ... and the task is cancelled before it resumes
        with pytest.raises(asyncio.CancelledError):
            await task
        io.stop()
        assert await driver.stopped_after(5.0)

    run_async(main())
