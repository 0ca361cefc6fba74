"""The asyncio front's I/O: the same turns as the I/O thread, run by an event loop.

Theory of operation
-------------------
A sync client's I/O thread (:class:`~eosclient._net.io_thread.IoThread`) alternates two things:
:meth:`NetworkClient.poll` (wait for sockets or a timer) and :meth:`IoThread.turn` (dispatch the
answers, step the sans-IO core, send). The waiting is the only part an event loop does
differently, so :class:`LoopDriver` replaces just that: the network client's selector is itself
a file descriptor (epoll, kqueue), readable whenever one of its sockets is ready or its wakeup
socketpair was written, so the loop watches that one descriptor (``add_reader``) and a timer
(``call_later``), and on either runs ``poll(0)``, a turn, and ``poll(0)`` again (which starts
the connects the turn asked for and writes what it sent, as the thread's next poll would before
it waits; a turn whose answers come back at once is followed by another, and one whose poll
handled an event without an answer by another soon, as the thread turns after every poll). The
timer is the turn's timeout, cut to the connections' next deadline as the thread's poll cuts its
wait (:meth:`NetworkClient.wait_for`). Nothing is written twice: the core, accumulator,
read_committed filter and group logic are the sync client's objects, and no thread is started
(host-name lookups still run on the resolver's thread, which wakes the selector).

Application calls made on the loop's thread wake the driver the way they wake the I/O thread
(:meth:`IoThread.wake` writes the socketpair, which the selector reports). A coroutine that waits
for the core (a commit, metadata) awaits :meth:`LoopDriver.changed`, which resolves after every
turn, and then looks again: the condition variable of the sync front, as a future.

A turn that raises is a bug, handled as on the thread (:meth:`IoThread.crash`): every waiting
call sees it. After the last turn (the client closed) the driver takes its reader and timer
off the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time

from eosclient._net.io_thread import IoThread
from eosclient.errors import IllegalStateError

__all__ = ["LoopDriver"]

_PUMP_INTERVAL = 0.001  # seconds: pump() turns at most this often


class LoopDriver:
    """Runs ``io``'s turns from the running event loop (create it inside one).

    Args:
        io: The producer's or consumer's loop state; its own thread is never started.
    """

    def __init__(self, io: IoThread) -> None:
        self._io = io
        self._loop = asyncio.get_running_loop()
        # A duplicate of the selector's descriptor: the client closes its own when it closes,
        # and the loop must never watch a number the kernel may hand out again meanwhile.
        self._fd = os.dup(io.client.selector_fileno())
        self._timer: asyncio.Handle | None = None
        self._waiters: list[asyncio.Future[None]] = []  # each waits for the next turn
        self.stopped = False
        self._turned = 0.0  # when the last turn began (time.monotonic())
        self.thread = threading.current_thread()
        self.ident = self.thread.ident
        io.driven_by(self.thread)

    def here(self) -> bool:
        """Whether the caller runs on the loop's thread (the hot paths' form of
        :meth:`check_thread`)."""
        return threading.get_ident() == self.ident

    def check_thread(self, who: str) -> None:
        """Refuse a call from any thread but the loop's: the client's state is the loop's alone
        (no lock is taken across an ``await``).

        Raises:
            IllegalStateError: called from another thread; nothing changed.
        """
        if threading.get_ident() != self.ident:
            raise IllegalStateError(f"the {who} belongs to the event loop it was started in; "
                                    "call it from that loop's thread")

    def start(self) -> None:
        """Watch the selector and run the first turn soon."""
        self._loop.add_reader(self._fd, self._ready)
        self._timer = self._loop.call_soon(self._ready)

    async def changed(self, timeout: float) -> None:
        """Return after the next turn, or after ``timeout`` seconds, whichever comes first.

        Cancelling the caller cancels only this wait; the driver and the core are unaffected.
        (A future per waiter, not ``asyncio.wait_for``: on Python 3.11 that can swallow a
        cancellation that comes as the awaited future completes, so a cancelled commit went
        on as if not cancelled.)
        """
        if self.stopped:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append(waiter)
        timer = self._loop.call_later(max(0.0, timeout), _settle, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            with contextlib.suppress(ValueError):  # (woken by a turn: gone already)
                self._waiters.remove(waiter)

    async def stopped_after(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the last turn; whether it ran."""
        deadline = self._loop.time() + timeout
        while not self.stopped and self._loop.time() < deadline:
            await self.changed(deadline - self._loop.time())
        return self.stopped

    def pump(self) -> None:
        """Run a turn now, from a coroutine that will not yield to the loop (a ``poll()`` that
        has records at hand returns without suspending): answers that came meanwhile are taken
        in and requests due go out, as the I/O thread does beside the application's thread.
        Without it, a consumer whose records are buffered sends its next Fetch only once the
        buffer runs dry, a round trip lost per buffer. At most one a millisecond: a poll of a
        few hundred buffered records takes less, and a turn per poll cost ~10% of the
        consumer's throughput for nothing new to send."""
        if time.monotonic() - self._turned >= _PUMP_INTERVAL:
            self._ready()

    def _ready(self) -> None:
        """The selector has events, the wakeup was written, or the timer is due: one turn."""
        if self.stopped:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._turned = time.monotonic()
        client = self._io.client
        try:
            answers = client.poll(0.0)
            while True:
                timeout = self._io.turn(answers)
                if timeout is None:
                    break
                client.report()  # error_cb
                # What the thread's poll does before it waits: start the connects the turn
                # asked for and write what it sent. Its answers (a failed connect) turn at once;
                # an event without one (a connect or handshake finished, a wakeup) turns soon,
                # as the thread turns after every poll: else the batches waiting for a broker
                # that came back waited for the timer (up to a second: the cluster nemesis).
                answers = client.poll(0.0)
                if not answers:
                    if client.polled_events:
                        timeout = 0.0
                    break
        except BaseException as exc:  # a bug: make every waiting call see it
            self._stop()
            self._io.crash(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            if timeout is None:
                self._stop()
            else:  # no later than the connections' deadlines, as the thread's poll waits
                self._timer = self._loop.call_later(client.wait_for(timeout), self._ready)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _settle(waiter)

    def _stop(self) -> None:
        self.stopped = True
        self._loop.remove_reader(self._fd)
        os.close(self._fd)


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # (its task may have been cancelled)
        waiter.set_result(None)
