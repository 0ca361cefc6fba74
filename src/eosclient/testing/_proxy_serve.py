"""Where proxied connections come from: an asyncio loop in a thread, and listeners on it.

Internal to :mod:`eosclient.testing.proxy` and :mod:`eosclient.testing.cluster_front`. A
`LoopThread` runs one event loop in a daemon thread and is started, called into and stopped from
any other thread. A `Listener` is one listening address on that loop: each connection it accepts
gets its own connection to the upstream broker and a `~eosclient.testing._proxy_link.Link`
between the two, owned by the listener's *owner* (the proxy, or one node of a cluster front),
which the link asks for rules, latency and rewriting. A listener can stop listening (cutting
its links) and listen again on the same port, which is how a cluster front's node goes down and
comes back. Everything of a listener runs in the loop's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import ssl
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final, Literal, TypeVar

from eosclient.testing._proxy_link import Link, Owner, close_writer

log = logging.getLogger("eosclient.testing.proxy")

_THREAD_TIMEOUT: Final = 10.0
_T = TypeVar("_T")


class LoopThread:
    """An asyncio loop in a daemon thread of its own, for a proxy's listeners and links.

    Args:
        owner: how the owner names itself in errors and the thread's name (e.g. ``KafkaProxy``).
    """

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._lock = threading.Lock()
        self._state: Literal["new", "running", "closed"] = "new"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> str:
        """``"new"``, ``"running"`` or ``"closed"``."""
        return self._state

    def start(
        self,
        setup: Callable[[], Coroutine[Any, Any, Any]],
        teardown: Callable[[], Coroutine[Any, Any, Any]],
    ) -> bool:
        """Start the thread and run `setup` on its loop first; False if it was running already.

        `teardown` runs on the loop when it is stopped; tasks still pending after it are
        cancelled.

        Raises:
            RuntimeError: it was stopped before (make a new one).
            Exception: what `setup` raised; the thread is then stopped again.
        """
        with self._lock:
            if self._state == "closed":
                raise RuntimeError(f"this {self._owner} is closed; make a new one")
            if self._state == "running":
                return False
            loop = asyncio.new_event_loop()
            ready: concurrent.futures.Future[None] = concurrent.futures.Future()
            thread = threading.Thread(
                target=self._run,
                args=(loop, setup, teardown, ready),
                name=f"eosclient-{self._owner}",
                daemon=True,
            )
            thread.start()
            try:
                ready.result(_THREAD_TIMEOUT)
            except BaseException:
                thread.join(_THREAD_TIMEOUT)
                raise
            self._loop, self._thread, self._state = loop, thread, "running"
        return True

    def stop(self) -> None:
        """Stop the loop (running the teardown) and join the thread. Idempotent."""
        with self._lock:
            running, self._state = self._state == "running", "closed"
        if not running:
            return
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_THREAD_TIMEOUT)
        if self._thread.is_alive():
            log.error("%s thread %s did not stop in %.0f s",
                      self._owner, self._thread.name, _THREAD_TIMEOUT)

    def rename(self, name: str) -> None:
        """Name the thread (once its ports are known)."""
        if self._thread is not None:
            self._thread.name = name

    def call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run `coro` on the loop from another thread and return its result.

        Raises:
            RuntimeError: the loop is not running.
        """
        loop = self._loop
        if self._state != "running" or loop is None:
            coro.close()
            raise RuntimeError(f"this {self._owner} is not running")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(_THREAD_TIMEOUT)

    @staticmethod
    def _run(
        loop: asyncio.AbstractEventLoop,
        setup: Callable[[], Coroutine[Any, Any, Any]],
        teardown: Callable[[], Coroutine[Any, Any, Any]],
        ready: concurrent.futures.Future[None],
    ) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(setup())
        except BaseException as exc:
            ready.set_exception(exc)
            loop.run_until_complete(_finish(teardown))
            loop.close()
            return
        ready.set_result(None)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(_finish(teardown))
            loop.close()


async def _finish(teardown: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    try:
        # Half the thread's join timeout: stop() gives up on the thread otherwise.
        await asyncio.wait_for(teardown(), _THREAD_TIMEOUT / 2)
    except TimeoutError:
        log.error("proxy teardown did not finish in time")
    finally:
        current = asyncio.current_task()
        leftovers = [task for task in asyncio.all_tasks() if task is not current]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)


class Listener:
    """One listening address whose connections are each linked to the upstream broker.

    The loop's thread only. `open()` listens (on `port`, or a free port the first time when it
    is 0, then on that same port again); `close()` stops listening and cuts every link.

    Args:
        owner: what the links ask for rules, latency and rewriting.
        upstream: the broker's (host, port).
        host: the address to listen on.
        port: the port to listen on; 0 picks a free one at the first `open()`.
        ssl_context: a server-side context: the listener speaks TLS.
    """

    def __init__(
        self,
        owner: Owner,
        upstream: tuple[str, int],
        host: str,
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._owner = owner
        self._upstream = upstream
        self.host = host
        self.port = port
        self._ssl = ssl_context
        self._server: asyncio.Server | None = None
        self.links: set[Link] = set()
        self._accepted = 0

    @property
    def listening(self) -> bool:
        """Whether the listener accepts connections."""
        return self._server is not None

    async def open(self) -> int:
        """Listen (again); return the port. Does nothing while listening.

        Raises:
            OSError: the address could not be bound (another process took the port meanwhile).
        """
        if self._server is None:
            self._server = await asyncio.start_server(
                self._accept, self.host, self.port, ssl=self._ssl)
            self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> int:
        """Stop listening (new connections are refused) and cut every link; return how many."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        cut = await self.cut_all()
        if server is not None:
            await server.wait_closed()
        return cut

    async def cut_all(self) -> int:
        """Close every live link (both sides) and wait until they are closed; return how many."""
        links = list(self.links)
        for link in links:
            link.cut()
        await asyncio.gather(*(link.closed.wait() for link in links))
        return len(links)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_connection(*self._upstream)
        except OSError as exc:
            log.warning("proxy %s: cannot reach upstream %s:%d: %s",
                        self._owner.bootstrap_servers, *self._upstream, exc)
            await close_writer(writer)
            return
        if self._server is None:  # closed while connecting upstream: refused after all
            await asyncio.gather(close_writer(writer), close_writer(upstream[1]))
            return
        self._accepted += 1
        link = Link(self._owner, (reader, writer), upstream, self._accepted)
        self.links.add(link)
        try:
            await link.run()
        finally:
            self.links.discard(link)
            link.closed.set()
