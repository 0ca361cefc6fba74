"""The consumer's I/O loop (eosclient._consumer.loop) with an application thread waiting on it
(eosclient._net.steps.wait_until, driven as the sync consumer drives it).

No broker: the loop's network client never sends anything (nothing asks it to), so every step
of the I/O thread is one the waiting application caused, or a timer's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from eosclient._consumer.loop import IoLoop
from eosclient._net.client import Answer, NetworkClient
from eosclient._net.steps import drive, wait_until
from eosclient.config import ClientConfig
from eosclient.errors import KafkaTimeoutError


class CountingClient(NetworkClient):
    """A network client that counts the I/O thread's polls (one per step of the loop)."""

    def __init__(self) -> None:
        super().__init__(ClientConfig(bootstrap_servers=("127.0.0.1:9",)))
        self.polls = 0

    def poll(self, timeout: float) -> list[Answer]:
        self.polls += 1
        return super().poll(timeout)


class LateDriver:
    """A driver that makes the awaited thing true at ``at`` (as an answer would)."""

    def __init__(self, at: float) -> None:
        self.at = at
        self.done = False

    def step(self, now: float) -> float:
        if now >= self.at:
            self.done = True
            return float("inf")
        return self.at


@pytest.fixture
def loop() -> Iterator[IoLoop]:
    made = IoLoop(CountingClient(), "test-consumer-io")
    made.start()
    yield made
    with made.lock:
        made.stop()
    made.join()


def wait_in(loop: IoLoop, ready: Callable[[], bool], deadline: float, what: str,
            check: Callable[[], None]) -> None:
    """Wait under the lock, as the sync consumer does."""
    drive(wait_until(loop, ready, deadline, what, check), loop)


def polls(loop: IoLoop) -> int:
    client: Any = loop.client
    return int(client.polls)


def test_a_wait_does_not_spin_the_io_thread(loop: IoLoop) -> None:
    """Waiting for an answer that is slow to come must leave the CPU to whoever would send it
    (on a small machine, the broker): each wake-up of the waiter once woke the I/O thread, whose
    step woke the waiter again, thousands of times a second in both threads."""
    time.sleep(0.05)  # the thread's first step is done: it sleeps in poll
    before = polls(loop)
    cpu = time.process_time()
    with loop.lock, pytest.raises(KafkaTimeoutError):
        wait_in(loop, lambda: False, time.monotonic() + 0.5, "nothing", loop.check_alive)
    used = time.process_time() - cpu
    steps = polls(loop) - before
    assert steps <= 5, f"{steps} steps of the I/O thread in 0.5 s of waiting"
    assert used < 0.25, f"{used:.2f} s of CPU in 0.5 s of waiting"


def test_a_wait_ends_at_the_step_that_makes_it_ready(loop: IoLoop) -> None:
    driver = LateDriver(time.monotonic() + 0.2)
    with loop.lock:
        loop.drivers.append(driver)
        started = time.monotonic()
        wait_in(loop, lambda: driver.done, started + 5, "the driver", loop.check_alive)
    assert time.monotonic() - started < 1.0


def test_a_wait_wakes_the_io_thread_for_new_work(loop: IoLoop) -> None:
    """Work the application adds just before waiting is picked up at once, not at the loop's
    next timer (the liveness bound is a second)."""
    time.sleep(0.05)  # asleep in poll, with its longest timeout
    driver = LateDriver(0.0)  # due at once, but only a step of the I/O thread can tell
    with loop.lock:
        loop.drivers.append(driver)
        started = time.monotonic()
        wait_in(loop, lambda: driver.done, started + 5, "the driver", loop.check_alive)
    assert time.monotonic() - started < 0.5


def test_a_check_that_raises_ends_the_wait(loop: IoLoop) -> None:
    def check() -> None:
        raise RuntimeError("closed")

    with loop.lock, pytest.raises(RuntimeError, match="closed"):
        wait_in(loop, lambda: False, time.monotonic() + 5, "nothing", check)


def test_waiters_in_two_threads_both_end(loop: IoLoop) -> None:
    driver = LateDriver(time.monotonic() + 0.2)
    ended: list[float] = []

    def wait() -> None:
        with loop.lock:
            wait_in(loop, lambda: driver.done, time.monotonic() + 5, "the driver",
                    loop.check_alive)
        ended.append(time.monotonic())

    with loop.lock:
        loop.drivers.append(driver)
    threads = [threading.Thread(target=wait) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert len(ended) == 2
