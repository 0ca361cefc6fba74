"""A blocking, one-request-at-a-time Kafka connection with deadlines.

For tools and tests that talk to one broker directly: broker readiness probes, the proxy's
tests, administrative one-offs, the Spark writer's driver. The producer and consumer use the
pipelined event loop instead. A :class:`ConnectionPool` keeps idle connections (and the
coordinators found through them) for later calls of the same process, so a process that asks
a few questions per Spark batch does not connect and negotiate versions each time.
Every call takes a timeout; a deadline that passes raises `KafkaTimeoutError`, and the connection
is then closed (a late response would otherwise be read as the answer to the next request).
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from eosclient._protocol.connection import Connection, Reply
from eosclient.errors import ApiKey, KafkaConnectionError, KafkaTimeoutError, ProtocolError

_READ_SIZE = 65536


class BlockingConnection:
    """A connected, version-negotiated Kafka connection to one broker.

    Args:
        host: the broker's host.
        port: the broker's port.
        timeout: seconds for connecting and the ApiVersions handshake together.
        client_id: sent in every request header.
        caps: optional per-API version ceilings for this broker.

    Raises:
        KafkaConnectionError: the connection could not be made or was cut.
        KafkaTimeoutError: the broker did not answer the handshake in time.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float = 10.0,
        client_id: str = "eosclient",
        caps: Mapping[ApiKey, int] | None = None,
    ) -> None:
        deadline = time.monotonic() + timeout
        self.address = (host, port)
        self.protocol = Connection(client_id, caps=caps)
        try:
            self._sock: socket.socket | None = socket.create_connection(self.address, timeout)
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._handshake(deadline)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> BlockingConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def request(self, request: Any, *, timeout: float = 10.0, version: int | None = None) -> Any:
        """Send `request` and return its decoded response (None for a request with no response).

        Raises:
            KafkaTimeoutError: no response within `timeout`; the connection is closed.
            KafkaConnectionError: the connection was cut; it is closed.
            ProtocolError: the broker broke the protocol; the connection is closed.
            UnsupportedVersionError: the broker does not speak the API.
        """
        return self.exchange(request, timeout=timeout, version=version).response

    def exchange(self, request: Any, *, timeout: float = 10.0, version: int | None = None) -> Reply:
        """Like `request`, but return the whole `Reply` (with the version used)."""
        deadline = time.monotonic() + timeout
        data = self.protocol.send(request, version)
        if not request.expect_response():
            self._write(data, deadline)
            return Reply(-1, request.API_VERSION, request, None)
        self._write(data, deadline)
        return self._read_reply(deadline)

    def send_raw(self, data: bytes, *, timeout: float = 10.0) -> None:
        """Write bytes as they are (for tests that speak past the protocol layer)."""
        self._write(data, time.monotonic() + timeout)

    def close(self) -> None:
        """Close the socket; idempotent."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    @property
    def closed(self) -> bool:
        """Whether the connection has been closed."""
        return self._sock is None

    def idle_ok(self) -> bool:
        """Whether an idle connection may carry a request: open, and nothing to read (an idle
        connection is readable only once the broker closed it, or it sent what was not asked)."""
        if self._sock is None:
            return False
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def _handshake(self, deadline: float) -> None:
        self._write(self.protocol.handshake(), deadline)
        reply = self._read_reply(deadline)
        retry = self.protocol.retry_handshake(reply)
        if retry is not None:
            self._write(retry, deadline)
            reply = self._read_reply(deadline)
        if self.protocol.versions is None:
            raise ProtocolError(f"ApiVersions failed with error {reply.response.error_code}")

    def _write(self, data: bytes, deadline: float) -> None:
        sock = self._live()
        try:
            sock.settimeout(_remaining(deadline))
            sock.sendall(data)
        except TimeoutError as exc:
            self.close()
            raise KafkaTimeoutError(f"send to {self._peer()} timed out") from exc
        except OSError as exc:
            self.close()
            raise KafkaConnectionError(f"send to {self._peer()} failed: {exc}") from exc

    def _read_reply(self, deadline: float) -> Reply:
        sock = self._live()
        try:
            while True:
                sock.settimeout(_remaining(deadline))
                chunk = sock.recv(_READ_SIZE)
                if not chunk:
                    raise KafkaConnectionError(f"{self._peer()} closed the connection")
                replies = self.protocol.receive(chunk)
                if replies:
                    return replies[0]
        except TimeoutError as exc:
            self.close()
            raise KafkaTimeoutError(f"no response from {self._peer()} in time") from exc
        except OSError as exc:
            self.close()
            raise KafkaConnectionError(f"receive from {self._peer()} failed: {exc}") from exc
        except (KafkaConnectionError, ProtocolError):
            self.close()
            raise

    def _live(self) -> socket.socket:
        if self._sock is None:
            raise KafkaConnectionError(f"connection to {self._peer()} is closed")
        return self._sock

    def _peer(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"


class ConnectionPool:
    """Idle :class:`BlockingConnection` s by address, and coordinators found, for reuse by
    later calls of this process (thread-safe: a connection is held by one caller at a time).

    ``take`` gives an idle connection to the address that still looks usable (or a new one),
    ``give`` returns it; a connection idle longer than ``max_idle`` seconds is closed instead
    of reused (brokers close idle connections, ``connections.max.idle.ms``). Coordinators are
    kept by ``(kind, key)``; a caller that finds one moved (NOT_COORDINATOR, a cut connection)
    looks it up again and :meth:`remember` s the new one, or :meth:`forget` s it.
    """

    def __init__(self, *, max_idle: float = 60.0) -> None:
        self.max_idle = max_idle
        self._idle: dict[tuple[str, int], list[tuple[BlockingConnection, float]]] = {}
        self._coordinators: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def take(self, address: tuple[str, int], *, timeout: float) -> BlockingConnection:
        """An open connection to ``address``, idle or new.

        Raises:
            KafkaConnectionError, KafkaTimeoutError: a new connection could not be made.
        """
        now = time.monotonic()
        while True:
            with self._lock:
                idle = self._idle.get(address)
                conn, since = idle.pop() if idle else (None, 0.0)
            if conn is None:
                return BlockingConnection(*address, timeout=timeout)
            if now - since < self.max_idle and conn.idle_ok():
                return conn
            conn.close()

    def give(self, conn: BlockingConnection) -> None:
        """Keep ``conn`` for reuse (a closed one is dropped)."""
        if conn.closed:
            return
        with self._lock:
            self._idle.setdefault(conn.address, []).append((conn, time.monotonic()))

    def coordinator(self, kind: str, key: str) -> Any:
        """The coordinator last found for ``key`` (``kind``: "group" or "transaction"), or None."""
        return self._coordinators.get((kind, key))

    def remember(self, kind: str, key: str, node: Any) -> None:
        self._coordinators[(kind, key)] = node

    def forget(self, kind: str, key: str) -> None:
        self._coordinators.pop((kind, key), None)

    def close(self) -> None:
        """Close every idle connection and forget every coordinator."""
        with self._lock:
            idle, self._idle = self._idle, {}
            self._coordinators.clear()
        for conns in idle.values():
            for conn, _ in conns:
                conn.close()


_POOLS: dict[str, ConnectionPool] = {}
_POOLS_LOCK = threading.Lock()


def _forget_pools() -> None:
    """In a forked child: the parent's idle sockets stay the parent's (two processes writing
    to one connection would mix their requests); the child starts with no pool."""
    global _POOLS_LOCK  # noqa: PLW0603 - a lock some parent thread held at fork is unusable
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools)


def pool_for(bootstrap_servers: str) -> ConnectionPool:
    """This process's pool for the cluster ``bootstrap_servers`` names (made on first use)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(bootstrap_servers)
        if pool is None:
            pool = _POOLS[bootstrap_servers] = ConnectionPool()
        return pool


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left
