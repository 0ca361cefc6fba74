"""A blocking, one-request-at-a-time Kafka connection with deadlines.

For tools and tests that talk to one broker directly: broker readiness probes, the proxy's
tests, administrative one-offs. The producer and consumer use the pipelined event loop instead.
Every call takes a timeout; a deadline that passes raises `KafkaTimeoutError`, and the connection
is then closed (a late response would otherwise be read as the answer to the next request).
"""

from __future__ import annotations

import socket
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


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left
