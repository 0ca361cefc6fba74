"""The consumer's I/O thread: one loop that drives the fetcher and the group through the network.

Theory of operation
-------------------
The producer's model (:mod:`eosclient._producer.sender`), for the same reasons: one lock
(:attr:`IoLoop.lock`) guards everything the application's threads share with this thread (the
partitions, the group membership, offset jobs, metadata), and the thread loops:

1. **I/O, without the lock**: :meth:`NetworkClient.poll` waits until the nearest timer, a socket
   event, or a wakeup from an application call.
2. **Under the lock**: every finished request is dispatched to the callback that sent it, then
   each driver (the :class:`~eosclient._consumer.fetcher.Fetcher`, the
   :class:`~eosclient._consumer.group.GroupCoordinator`) sends what is due and says when it
   next needs a step; metadata is refreshed when due. Then every waiting application call is
   notified.

Decoding and filtering do not happen here: ``poll()`` does them on the application's thread,
as Java's consumer does, so the work lands where the records are wanted and this thread's lock
holds stay short (heartbeats are never late behind a large batch). With the GIL, moving it here
would buy no parallelism; the overlap that matters, the next Fetch's round trip with the
application's processing, comes from prefetching (see the fetcher).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Concatenate, Final, ParamSpec, Protocol, TypeVar

from eosclient._net.client import Answer, NetworkClient
from eosclient._net.io_thread import IoThread, stopped_error

__all__ = ["UNCHANGED", "Driver", "IoLoop", "serialized"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S", bound="_Serialized")

log = logging.getLogger("eosclient.consumer")

_MAX_SLEEP: Final = 1.0  # seconds: liveness bound (missed wakeups)
UNCHANGED: Final = "the consumer is unchanged"  # what a consumer's wait that timed out left
_JOIN_TIMEOUT: Final = 10.0


class Driver(Protocol):
    """Something the loop steps under the lock."""

    def step(self, now: float) -> float:
        """Send what is due; return the time of the next step needed (monotonic seconds)."""
        ...


class _Serialized(Protocol):
    _app_lock: threading.RLock


def serialized(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """Run ``method`` under its object's ``_app_lock``: one application call at a time (the
    lock is re-entrant, so rebalance callbacks run inside ``poll()`` may call the consumer)."""

    def call(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._app_lock:
            return method(self, *args, **kwargs)

    functools.update_wrapper(call, method)
    return call


class IoLoop(IoThread):
    """The I/O thread and the lock it shares with the application.

    Args:
        client: The network client the thread owns.
        name: The thread's name.
    """

    def __init__(self, client: NetworkClient, name: str) -> None:
        super().__init__(client, name)
        self.drivers: list[Driver] = []
        self.stopped = False

    def check_alive(self) -> None:
        """Raise if the thread died of a bug.

        Raises:
            AuthenticationError: a connection could not be authenticated; close, fix settings.
            AllBrokersDownError: no broker was ever reached, and none can be (without
                ``error_cb``); the consumer keeps trying, call again to wait on.
            FatalError: the thread crashed; the consumer can only be closed.
            ResponseTooLargeError: a non-Fetch answer was over ``receive.message.max.bytes``.
        """
        if self.crashed is not None:
            raise stopped_error(self.crashed, "consumer")
        self.client.check_reached(time.monotonic())

    def turn(self, answers: list[Answer]) -> float | None:
        """Step 2 of the loop (the module docstring); the next wait, None to exit."""
        with self.lock:
            timeout = self._iterate(answers)
            self.changed.notify_all()
        return timeout

    def crash(self, exc: BaseException) -> None:
        """Make every caller see the crash rather than hang."""
        if exc is not self.client.fatal:  # that one the network client logged
            log.exception("the consumer's I/O thread crashed", exc_info=exc)
        with self.lock:
            self.crashed = exc
            self.client.close()
            self.changed.notify_all()

    def _iterate(self, answers: list[Answer]) -> float | None:
        """Dispatch answers and step the drivers; the next wait in seconds, None to exit."""
        self.sleeping = False
        self.client.dispatch(answers)
        if self.client.fatal is not None and not self._stopping:
            raise self.client.fatal
        if self._stopping:
            self.client.dispatch(self.client.close())
            self.stopped = True
            return None
        now = time.monotonic()
        timers = [now + _MAX_SLEEP, self.client.next_timer()]
        timers += [driver.step(now) for driver in self.drivers]
        self.client.maybe_update_metadata(now)
        timers.append(self.client.metadata.next_update(now))
        self.sleeping = True
        return max(0.0, min(timers) - now)
