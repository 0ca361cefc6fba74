"""The lifecycle of a client's I/O thread, shared by the producer and the consumer.

One thread owns a :class:`~eosclient._net.client.NetworkClient`; application threads share state
with it under :attr:`IoThread.lock` and wake it through the client's socketpair. Subclasses write
the loop (:meth:`IoThread._run`); this class only starts, wakes, stops and joins it.
"""

from __future__ import annotations

import threading

from eosclient._net.client import NetworkClient

__all__ = ["IoThread"]

_JOIN_TIMEOUT = 10.0


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
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

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

    def join(self, timeout: float = _JOIN_TIMEOUT) -> None:
        """Wait for the thread to exit (call without the lock; a no-op from the thread)."""
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def in_io_thread(self) -> bool:
        """Whether the caller is the I/O thread (e.g. a callback it runs)."""
        return threading.current_thread() is self._thread

    def _run(self) -> None:
        raise NotImplementedError
