"""Waiting written once: a client's operations that wait are generators, and each front drives them.

An operation that must wait for the I/O loop (an offset commit's answer, a topic's metadata, a
rebalance to finish, a transaction's end) is written once, as a generator of steps. It yields
:class:`Block` when it has nothing to do until the loop's next turn (at most that many
seconds), and :class:`Call` for a user callback (a rebalance listener), whose result the
asyncio front awaits if it is awaitable; it returns the operation's result, or raises its error.
It never touches a thread, a condition or an event loop, so the sync and the asyncio front run
the very same decisions:

- the sync front runs it with :func:`drive`, holding the I/O thread's lock: a :class:`Block` is a
  wait on the thread's condition, notified after every turn;
- the asyncio front runs it with :func:`adrive`: a :class:`Block` is
  :meth:`LoopDriver.changed <eosclient._net.loop_driver.LoopDriver.changed>`, resolved after
  every turn the event loop runs.

:func:`wait_until` is the one waiting loop (check, time out, wake the loop once, block); an
operation calls it with ``yield from``. The processor's decisions are written the same way one
level up (:mod:`eosclient._processor.steps`).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, NamedTuple, TypeVar

from eosclient._net.io_thread import IoThread
from eosclient._net.loop_driver import LoopDriver
from eosclient.errors import EosError, KafkaTimeoutError

__all__ = ["Block", "Call", "Steps", "adrive", "drive", "wait_until"]

_T = TypeVar("_T")


class Block(NamedTuple):
    """Nothing to do until the I/O loop's next turn, or ``seconds`` from now."""

    seconds: float


class Call(NamedTuple):
    """Call ``fn(*args, **kwargs)`` (a user's callback, or a port's method): its result is sent
    back (awaited first by the asyncio front if it is awaitable), its exception thrown in."""

    fn: Callable[..., object]
    args: tuple[object, ...] = ()
    kwargs: Mapping[str, object] | None = None

    def run(self) -> object:
        """Make the call."""
        return self.fn(*self.args, **self.kwargs) if self.kwargs else self.fn(*self.args)


Steps = Generator[Block | Call, Any, _T]


def wait_until(io: IoThread, ready: Callable[[], bool], deadline: float, what: str,
               check: Callable[[], None], *,
               cause: Callable[[], EosError | None] | None = None,
               unchanged: str = "the client is unchanged") -> Steps[None]:
    """Block until ``ready()``, calling ``check()`` (which raises to stop waiting) first each
    time.

    The I/O loop is woken once, for what the caller asked of it just before; after that it runs
    by itself (answers, timers) and every turn ends a :class:`Block`. Waking it again at each of
    those would make the two threads of the sync front wake each other without end, spinning
    two cores until the answer comes (and on a small machine starving the broker that is to
    send it).

    Raises:
        KafkaTimeoutError: ``deadline`` passed first ("``what`` did not finish in time;
            ``unchanged``"), chained from ``cause()``, else from the last failed connect, if
            any; the work waited for may still complete.
    """
    woken = False
    while not ready():
        check()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KafkaTimeoutError(f"{what} did not finish in time; {unchanged}") from (
                (cause() if cause else None) or io.client.connect_failure)
        if not woken:
            io.wake()
            woken = True
        yield Block(remaining)


def drive(steps: Generator[Any, Any, _T], io: IoThread | None = None, *,
          bind: Callable[[Any], Call] | None = None) -> _T:
    """Carry ``steps`` out on the application's thread, which holds ``io.lock`` (steps that
    block need ``io``). ``bind`` makes a :class:`Call` of each step that is not a
    :class:`Block` (the processor's port calls, :mod:`eosclient._processor.steps`)."""
    try:
        step = next(steps)
        while True:
            if isinstance(step, Block):
                assert io is not None, "steps that block need the I/O thread they wait on"
                io.changed.wait(step.seconds)
                step = next(steps)
                continue
            try:
                result = (step if bind is None else bind(step)).run()
            except BaseException as exc:  # the steps decide (finish a rebalance), then raise
                step = steps.throw(exc)
            else:
                step = steps.send(result)
    except StopIteration as done:
        value: _T = done.value
        return value


async def adrive(steps: Generator[Any, Any, _T], driver: LoopDriver | None = None, *,
                 bind: Callable[[Any], Call] | None = None) -> _T:
    """Carry ``steps`` out on the event loop that runs ``driver`` (steps that block need it);
    ``bind`` as :func:`drive`'s.

    A cancelled task throws :class:`asyncio.CancelledError` into the steps where they blocked
    or awaited a call, so an operation can finish what must be finished before it ends.
    """
    try:
        step = next(steps)
        while True:
            try:
                if isinstance(step, Block):
                    assert driver is not None, "steps that block need the loop's driver"
                    await driver.changed(step.seconds)
                    result: object = None
                else:
                    result = (step if bind is None else bind(step)).run()
                    if inspect.isawaitable(result):
                        result = await result
            except BaseException as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(result)
    except StopIteration as done:
        value: _T = done.value
        return value
