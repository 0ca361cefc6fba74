"""The admin client's I/O thread, and blocking requests over it with deadlines.

The producer's and consumer's model (:mod:`eosclient._consumer.loop`), smaller: the admin has no
timers of its own, so its thread only sends what application threads queued, moves bytes, and
hands each answer back. An application thread calls :meth:`AdminRunner.submit` (any number of
requests, to named nodes or to the least loaded one), then :meth:`AdminRunner.wait` for them
until its deadline; a deadline that passes raises :class:`~eosclient.errors.KafkaTimeoutError`
(chained from the last failed connect, if any), never a hang. A request for an API the broker
does not advertise fails at once with :class:`~eosclient.errors.UnsupportedVersionError` naming
the API (the connection refuses to encode it); it is never sent.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterable
from typing import Any, Final

from eosclient._net.client import Answer, NetworkClient
from eosclient._net.io_thread import IoThread, stopped_error
from eosclient.errors import EosError, IllegalStateError, KafkaTimeoutError

__all__ = ["AdminRunner", "Call"]

log = logging.getLogger("eosclient.admin")

_MAX_SLEEP: Final = 1.0  # seconds: liveness bound (missed wakeups)


class Call:
    """One request and, once :attr:`done`, its response or the error that replaced it."""

    __slots__ = ("done", "error", "node", "request", "response", "version")

    def __init__(self, node: int | None, request: Any) -> None:
        self.node = node  # None: the least loaded node; the node used once sent
        self.request = request
        self.response: Any = None
        self.version = -1
        self.error: EosError | None = None
        self.done = False

    def result(self) -> Any:
        """The response.

        Raises:
            EosError: the error that ended the request (a cut connection, an unsupported API).
        """
        if self.error is not None:
            raise self.error
        return self.response


class AdminRunner(IoThread):
    """The I/O thread of one admin client.

    Args:
        client: The network client the thread owns.
        name: The thread's name.
    """

    def __init__(self, client: NetworkClient, name: str) -> None:
        super().__init__(client, name)
        self._queue: list[Call] = []
        self.closed = False

    def submit(self, node: int | None, request: Any) -> Call:
        """Queue ``request`` for ``node`` (None: any broker); the thread sends it at once.

        Raises:
            IllegalStateError: the admin client is closed.
        """
        call = Call(node, request)
        with self.lock:
            self._check()
            self._queue.append(call)
            self.wake()
        return call

    def wait(self, calls: Iterable[Call], deadline: float, what: str) -> None:
        """Wait until every call is done (answered or failed).

        Raises:
            KafkaTimeoutError: ``deadline`` (monotonic seconds) passed first; the requests may
                still complete.
            IllegalStateError: the admin client was closed meanwhile.
        """
        pending = list(calls)
        with self.lock:
            while not all(call.done for call in pending):
                self._check()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError(f"{what} did not finish in time") from (
                        self.client.connect_failure)
                self.changed.wait(remaining)

    def call(self, node: int | None, request: Any, deadline: float, what: str) -> Call:
        """:meth:`submit` then :meth:`wait`: one request, answered or failed."""
        call = self.submit(node, request)
        self.wait([call], deadline, what)
        return call

    def close(self, timeout: float) -> None:
        """Stop the thread and close the connections; requests in flight fail."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.stop()
        self.join(timeout)

    def _check(self) -> None:
        if self.crashed is not None:
            raise stopped_error(self.crashed, "admin client")
        if self.closed:
            raise IllegalStateError("the admin client is closed")
        self.client.check_reached(time.monotonic())

    def _run(self) -> None:
        answers: list[Answer] = []
        try:
            while True:
                with self.lock:
                    timeout = self._iterate(answers)
                    self.changed.notify_all()
                if timeout is None:
                    return
                self.client.report()  # error_cb, outside the lock
                answers = self.client.poll(timeout)
        except BaseException as exc:  # a bug: make every caller see it rather than hang
            if exc is not self.client.fatal:
                log.exception("the admin client's I/O thread crashed")
            with self.lock:
                self.crashed = exc
                self.client.close()
                self.changed.notify_all()

    def _iterate(self, answers: list[Answer]) -> float | None:
        self.sleeping = False
        self.client.dispatch(answers)
        if self.client.fatal is not None and not self._stopping:
            raise self.client.fatal
        if self._stopping:
            self.client.dispatch(self.client.close())
            return None
        queued, self._queue = self._queue, []
        for call in queued:
            call.node = self.client.send(call.node, call.request,
                                         functools.partial(_finish, call))
        now = time.monotonic()
        self.client.maybe_update_metadata(now)
        timers = [now + _MAX_SLEEP, self.client.next_timer(),
                  self.client.metadata.next_update(now)]
        self.sleeping = True
        return max(0.0, min(timers) - now)


def _finish(call: Call, answer: Answer) -> None:
    call.response, call.error, call.version = answer.response, answer.error, answer.version
    call.done = True
