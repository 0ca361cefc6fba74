"""The consumer session's rebalance step, as both fronts drive it (no broker).

The step's callback is a ``Call``: the sync front runs it without the loop's lock (so the I/O
thread heartbeats meanwhile and the callback may call the consumer), the asyncio front awaits
it; either way the step is finished whatever the callback did. The group is a stand-in that
hands out one step, so what is tested is the session's part alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from eosclient._consumer.group import RebalanceStep
from eosclient._consumer.session import ConsumerSession
from eosclient._core.types import TopicPartition
from eosclient._net.steps import adrive, drive
from eosclient.config import ConsumerConfig

TP = TopicPartition("t", 0)


class OneStep:
    """A group with one revoking step due; records how it was finished."""

    def __init__(self) -> None:
        self.finished: list[bool] = []

    def start_step(self, assignment: object) -> RebalanceStep | None:
        return None if self.finished else RebalanceStep(True, [TP])

    def finish_step(self, loop: object, assignment: object, step: RebalanceStep, *,
                    completed: bool = True) -> None:
        self.finished.append(completed)


def session_with(group: OneStep) -> ConsumerSession:
    session = ConsumerSession(ConsumerConfig(bootstrap_servers=("127.0.0.1:9",)))
    session.group = group  # type: ignore[assignment]
    return session


@pytest.fixture
def threaded() -> Iterator[tuple[ConsumerSession, OneStep]]:
    group = OneStep()
    session = session_with(group)
    session.start_thread()
    yield session, group
    session.group = None
    with session.lock:
        drive(session.close(time.monotonic() + 1, False), session.loop)
    session.loop.join(5)


def test_the_sync_front_runs_the_callback_without_the_lock_and_finishes_the_step(
        threaded: tuple[ConsumerSession, OneStep]) -> None:
    session, group = threaded
    seen: list[Any] = []
    dropped: list[str] = []

    def on_revoke(partitions: list[TopicPartition]) -> None:
        seen.append((partitions, session.lock.locked()))
        raise ValueError("from on_revoke")

    session.on_revoke = on_revoke
    session.after_revoke = lambda tps: dropped.append("buffer")
    with session.lock, pytest.raises(ValueError, match="from on_revoke"):
        drive(session.rebalance(), session.loop)
    assert seen == [([TP], False)]  # the I/O thread could take the lock meanwhile
    assert group.finished == [False]  # finished all the same
    assert dropped == ["buffer"]


def test_a_cancelled_async_callback_still_finishes_the_step() -> None:
    group = OneStep()
    session = session_with(group)
    started = asyncio.Event()

    async def on_revoke(partitions: list[TopicPartition]) -> None:
        started.set()
        await asyncio.sleep(30)

    session.on_revoke = on_revoke

    async def main() -> None:
        task = asyncio.create_task(adrive(session.rebalance(), None))  # type: ignore[arg-type]
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert group.finished == [False]
    session.abandon()
