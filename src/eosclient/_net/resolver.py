"""Host-name lookups off the I/O thread, in a small pool shared by every client of the process.

``getaddrinfo`` blocks, for seconds when a resolver is slow or down, and Python offers no
non-blocking form. Run on an I/O thread, one slow lookup stalled every connection of that
client: heartbeats missed the session timeout, requests their deadlines. So a connection that
needs an address asks :func:`resolve`, which returns a :class:`concurrent.futures.Future` at
once and runs the lookup on a resolver thread; when it finishes, the ``wake`` callable given
(the network client's :meth:`~eosclient._net.client.NetworkClient.wakeup`) makes the selector
loop look at the result at once (:meth:`~eosclient._net.node.NodeConnection.expire`).

The pool is the process's, not a client's: lookups are rare (one per connect attempt, spaced
by the reconnect backoff), so a few threads serve any number of clients. They are daemon
threads, started on demand up to :data:`MAX_THREADS` and kept: a lookup hanging in the C
library cannot be interrupted, and must never hold up the interpreter's exit (the standard
``ThreadPoolExecutor`` joins its workers at exit). A lookup the connection no longer wants (it
was closed, or its setup timed out) runs on and its answer is dropped.
"""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, NamedTuple

__all__ = ["MAX_THREADS", "Address", "resolve"]

#: Lookups that can run at once in the process; more wait for a free thread.
MAX_THREADS = 4


class Address(NamedTuple):
    """One address ``getaddrinfo`` gave, ready for ``socket.socket`` and ``connect_ex``."""

    family: int
    type: int
    proto: int
    sockaddr: Any  # (host, port) for IPv4, (host, port, flowinfo, scope_id) for IPv6

    def __str__(self) -> str:
        host, port = self.sockaddr[0], self.sockaddr[1]
        return f"[{host}]:{port}" if self.family == socket.AF_INET6 else f"{host}:{port}"


def resolve(host: str, port: int, wake: Callable[[], None]) -> Future[list[Address]]:
    """Look ``host`` up on a resolver thread; call ``wake()`` (any thread) when done.

    The future's result is every TCP address, in ``getaddrinfo``'s order (RFC 6724's
    preference: the order to try them in); its exception is the lookup's (``socket.gaierror``,
    or ``UnicodeError`` for a name IDNA cannot encode).
    """
    future: Future[list[Address]] = Future()
    future.add_done_callback(lambda _: wake())
    _POOL.submit(future, host, port)
    return future


def _lookup(host: str, port: int) -> list[Address]:
    return [Address(family, kind, proto, sockaddr) for family, kind, proto, _, sockaddr
            in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


class _Pool:
    """Daemon threads taking lookups from one queue, started when none is idle."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[list[Address]], str, int]] = \
            queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    def submit(self, future: Future[list[Address]], host: str, port: int) -> None:
        with self._lock:
            if self._idle <= 0 and self._threads < MAX_THREADS:
                self._threads += 1
                self._idle += 1
                threading.Thread(target=self._work, name=f"eosclient-resolver-{self._threads}",
                                 daemon=True).start()
            self._idle -= 1  # claimed (or queued behind the busy ones)
        self._jobs.put((future, host, port))

    def _work(self) -> None:
        while True:
            future, host, port = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(_lookup(host, port))
                except Exception as exc:  # gaierror, UnicodeError: the connection's failure
                    future.set_exception(exc)
            with self._lock:
                self._idle += 1


_POOL = _Pool()
