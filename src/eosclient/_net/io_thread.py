"""The lifecycle of a client's I/O thread, shared by the producer and the consumer.

One thread owns a :class:`~eosclient._net.client.NetworkClient`; application threads share state
with it under :attr:`IoThread.lock` and wake it through the client's socketpair. Subclasses write
one turn of the loop (:meth:`IoThread.turn`: dispatch answers, step the core, notify waiters) and
what a crash does (:meth:`IoThread.crash`); this class starts, wakes, stops and joins the thread
that runs turn, poll, turn, ... The asyncio front runs the same turns from an event loop instead
(:mod:`eosclient._net.loop_driver`): one core, two ways of waiting for I/O.
"""

from __future__ import annotations

import copy
import threading

from eosclient._net.client import Answer, NetworkClient
from eosclient.errors import (
    AuthenticationError,
    EosError,
    FatalError,
    IllegalStateError,
    ResponseTooLargeError,
)

__all__ = ["IoThread", "refuse_to_block", "stopped_error"]

_JOIN_TIMEOUT = 10.0


class _Runner(threading.Thread):
    """The thread of an :class:`IoThread`: its type is how :func:`refuse_to_block` knows it."""


def refuse_to_block(what: str, timeout: float | None) -> None:
    """Refuse a wait of up to ``timeout`` seconds (None: for ever) on any eosclient I/O thread.

    A callback run by the I/O thread (a delivery future's) that waits for something only that
    thread can bring (a future not yet resolved) waits for itself: it deadlocked the producer
    for good, and its thread outlived ``close()``. So it fails at once, as
    ``concurrent.futures`` refuses a pool's worker waiting on its own shutdown; a wait of 0
    only looks, and is let through.

    Raises:
        IllegalStateError: the caller is an I/O thread and would block; nothing changed.
    """
    if (timeout is None or timeout > 0) and isinstance(threading.current_thread(), _Runner):
        raise IllegalStateError(
            f"{what} would block the eosclient I/O thread it runs on (a delivery callback), "
            "which is the thread that completes it: a deadlock. Wait in another thread, or "
            "use done()/add_done_callback() here")


def stopped_error(crashed: BaseException, who: str) -> EosError:
    """The error each blocking call raises once the I/O thread stopped on ``crashed``.

    A client-wide failure the network client kept (:attr:`NetworkClient.fatal`: a refused
    login, an answer too large to read) is raised as itself, a fresh copy each time with the
    same cause (the TLS error, say), so the application catches the type it documents;
    anything else is a bug, a FatalError chained from it.
    """
    if isinstance(crashed, (AuthenticationError, ResponseTooLargeError)):
        again = copy.copy(crashed)
        again.__cause__ = crashed.__cause__
        return again
    error = FatalError(f"the {who}'s I/O thread crashed: {crashed!r}")
    error.__cause__ = crashed
    return error


class IoThread:
    """The I/O thread and the lock it shares with application threads.

    Args:
        client: The network client the thread owns.
        name: The thread's name.
    """

    def __init__(self, client: NetworkClient, name: str) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.crashed: BaseException | None = None
        self.sleeping = False  # the thread is (about to be) waiting in poll
        self._stopping = False
        self._thread: threading.Thread = _Runner(target=self._run, daemon=True, name=name)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def wake(self) -> None:
        """Make the thread run a step soon (call under the lock); cheap when it is awake."""
        if self.sleeping:
            self.sleeping = False
            self.client.wakeup()

    def stop(self) -> None:
        """Ask the thread to finish what it must, close the connections and exit (under the
        lock)."""
        self._stopping = True
        self.client.wakeup()

    def discard(self) -> None:
        """Stop a client dropped without ``close()`` (its finalizer): a thread that runs
        finishes and closes the connections itself; if nothing ever ran the turns (an asyncio
        front never started), the connections and the wake-up sockets are closed here, or they
        would be left open."""
        self.stop()
        if isinstance(self._thread, _Runner) and self._thread.ident is None:  # never started
            self.client.close()

    def join(self, timeout: float = _JOIN_TIMEOUT) -> bool:
        """Wait for the thread to exit (call without the lock; a no-op from the thread).

        Returns:
            Whether it has exited (False from the thread itself, which exits after returning).
        """
        if self._thread is threading.current_thread():
            return False
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def in_io_thread(self) -> bool:
        """Whether the caller is the I/O thread (e.g. a callback it runs), or the event loop's
        thread when an event loop drives the turns instead (:meth:`driven_by`)."""
        return threading.current_thread() is self._thread

    def driven_by(self, thread: threading.Thread) -> None:
        """Let ``thread`` (an event loop's) run the turns instead of a thread of this object's
        own, which is then never started; blocking waits on that thread are refused as on the
        I/O thread (:meth:`in_io_thread`)."""
        self._thread = thread

    @property
    def loop_driven(self) -> bool:
        """Whether an event loop runs the turns (:meth:`driven_by`), not a thread of this
        object's own."""
        return not isinstance(self._thread, _Runner)

    def turn(self, answers: list[Answer]) -> float | None:
        """One turn of the loop: hand ``answers`` to their handlers, step, notify the waiting
        calls; return how long the next I/O wait may last, or None once stopped."""
        raise NotImplementedError

    def crash(self, exc: BaseException) -> None:
        """A turn raised ``exc`` (a bug): fail everything so that no caller hangs."""
        raise NotImplementedError

    def _run(self) -> None:
        answers: list[Answer] = []
        try:
            while (timeout := self.turn(answers)) is not None:
                self.client.report()  # error_cb, outside the lock
                answers = self.client.poll(timeout)
        except BaseException as exc:  # a bug: make every caller see it rather than hang
            self.crash(exc)
