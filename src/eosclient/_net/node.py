"""One non-blocking connection to one broker: setup, pipelined requests, deadlines.

A :class:`NodeConnection` wraps a sans-IO :class:`~eosclient._protocol.connection.Connection`
around a non-blocking socket and is driven by the event loop (:mod:`eosclient._net.client`): it
says which events it waits for (:attr:`NodeConnection.events`), and the loop calls
:meth:`~NodeConnection.on_writable`, :meth:`~NodeConnection.on_readable` and
:meth:`~NodeConnection.expire`. It never blocks and never calls back: every request that finishes
(answered, failed, timed out) comes back as an :class:`Answer` for the loop's owner to dispatch,
under its own lock.

Setup is a fixed sequence of phases; a request sent before the last one waits in a queue::

    WAITING --(backoff over)--> CONNECTING --(TCP up)--> HANDSHAKE --(ApiVersions)--> READY

**Where TLS and SASL slot in** (not implemented yet): a TLS phase between CONNECTING and
HANDSHAKE wraps the socket with ``ssl_context.wrap_socket(sock, server_hostname=host,
do_handshake_on_connect=False)`` and drives ``do_handshake()`` from the readable/writable events
(``ssl.SSLWantReadError``/``SSLWantWriteError`` say which to wait for); a SASL phase between
HANDSHAKE and READY sends SaslHandshake and SaslAuthenticate through the same ``Connection``.
Both go in :meth:`NodeConnection._advance`, the one place that moves between phases; nothing
outside this module would change, because everything else only sees READY or a failure.

Host names are resolved (``getaddrinfo``) in :meth:`NodeConnection.start`, which only the loop's
:meth:`~NodeConnection.expire` calls, from ``NetworkClient.poll()``, outside the owner's lock: a
slow resolver must never hold up the application's calls.

Deadlines: setup (connect plus handshake) has ``setup_timeout``; each request has its own timeout
from the moment it is written. A request that times out fails with
:class:`~eosclient.errors.KafkaTimeoutError` and the connection is closed (a late answer would
otherwise be read as the answer to the next request); everything else in flight on it fails with
:class:`~eosclient.errors.KafkaConnectionError`: its outcome is unknown. When the *broker* closed
the connection, that error's ``__cause__`` says so (:class:`EOFError`, or the
:class:`ConnectionResetError` of a reset): the transaction core counts EndTxn attempts answered
that way (Tansu's answer to a stale epoch). A request still queued when the connection closes
was never written; its error says that.
"""

from __future__ import annotations

import enum
import errno
import logging
import selectors
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eosclient._protocol.connection import Connection, Reply
from eosclient._protocol.framing import DEFAULT_MAX_FRAME_SIZE
from eosclient.errors import (
    ApiKey,
    EosError,
    KafkaConnectionError,
    KafkaTimeoutError,
    ProtocolError,
    ResponseTooLargeError,
)

__all__ = ["Answer", "NodeConnection", "Phase"]

log = logging.getLogger("eosclient.net")

_READ_SIZE = 256 * 1024
_IN_PROGRESS = frozenset({errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY})


class Phase(enum.Enum):
    """Where a connection is in its life."""

    WAITING = "waiting for the reconnect backoff to pass"
    CONNECTING = "TCP connect in progress"
    HANDSHAKE = "ApiVersions sent"
    READY = "ready for requests"
    CLOSED = "closed"


@dataclass(slots=True, eq=False)
class Answer:
    """A request's end: its response, or the error that ended it.

    Attributes:
        request: The request object sent.
        response: The decoded response; None when ``error`` is set.
        error: Why no response will come (timeout, cut connection, unsupported version).
        node_id: The node it was sent to.
        on_done: The callback the sender gave; the loop's owner calls ``on_done(answer)``.
        version: The version the request was sent at (-1 if never sent).
    """

    request: Any
    response: Any
    error: EosError | None
    node_id: int
    on_done: Callable[[Answer], None]
    version: int = -1


@dataclass(slots=True, eq=False)
class _Request:
    request: Any
    on_done: Callable[[Answer], None]
    timeout: float
    deadline: float = float("inf")
    version: int = -1


@dataclass(slots=True, eq=False)
class _Buffer:
    """Bytes waiting for the socket, written without copying what is left."""

    chunks: deque[memoryview] = field(default_factory=deque)

    def write_to(self, sock: socket.socket) -> None:
        while self.chunks:
            head = self.chunks[0]
            sent = sock.send(head)
            if sent < len(head):
                self.chunks[0] = head[sent:]
                return
            self.chunks.popleft()


class NodeConnection:
    """A pipelined connection to one broker, owned by the event-loop thread.

    Args:
        node_id: The broker's node id (negative for a bootstrap address).
        address: ``(host, port)``.
        client_id: Sent in every request header.
        setup_timeout: Seconds for connect plus handshake.
        start_at: When to start connecting (the reconnect backoff); ``now`` for at once.
        max_frame_size: ``receive.message.max.bytes``: a larger answer closes the connection
            before it is read; the requests in flight fail with a
            :class:`~eosclient.errors.KafkaConnectionError` whose ``__cause__`` is the
            :class:`~eosclient.errors.ResponseTooLargeError` (its ``api`` names the request it
            answered), so the owner of that request can adapt (the consumer's fetcher does).
            Any other request answered that way (Metadata, the group APIs, ...) fails with the
            ResponseTooLargeError itself, also kept as :attr:`refused`: a smaller answer cannot
            be asked for, so retrying would only stall whoever waits on it.
    """

    def __init__(
        self,
        node_id: int,
        address: tuple[str, int],
        *,
        client_id: str,
        setup_timeout: float,
        start_at: float,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.phase = Phase.WAITING
        self.start_at = start_at
        self.was_ready = False  # the handshake completed once (a failed connect: it never did)
        self.failure: EosError | None = None  # why it closed, once CLOSED
        self.refused: ResponseTooLargeError | None = None  # a non-Fetch answer over the limit
        self.protocol = Connection(client_id, max_frame_size=max_frame_size)
        self.sock: socket.socket | None = None
        self._setup_timeout = setup_timeout
        self._setup_deadline = float("inf")
        self._queued: deque[_Request] = deque()  # waiting for READY
        self._in_flight: deque[_Request] = deque()
        self._out = _Buffer()
        self._answers: list[Answer] = []

    # -- what the loop reads -----------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether requests go out at once."""
        return self.phase is Phase.READY

    @property
    def in_flight(self) -> int:
        """Requests written or queued and not yet answered."""
        return len(self._in_flight) + len(self._queued)

    @property
    def events(self) -> int:
        """The selector events to wait for (0 while WAITING or CLOSED)."""
        if self.sock is None:
            return 0
        if self.phase is Phase.CONNECTING or self._out.chunks:
            return selectors.EVENT_READ | selectors.EVENT_WRITE
        return selectors.EVENT_READ

    def next_deadline(self) -> float:
        """The nearest time :meth:`expire` has something to do."""
        if self.phase is Phase.WAITING:
            return self.start_at
        if self.phase is not Phase.READY:
            return self._setup_deadline
        return min((r.deadline for r in self._in_flight), default=float("inf"))

    def take_answers(self) -> list[Answer]:
        """The requests finished since the last call."""
        answers, self._answers = self._answers, []
        return answers

    # -- driving -----------------------------------------------------------------------------

    def send(self, request: Any, on_done: Callable[[Answer], None], now: float,
             timeout: float) -> None:
        """Send ``request`` now if READY, else once setup completes; the answer comes later."""
        pending = _Request(request, on_done, timeout)
        if self.phase is Phase.READY:
            self._write_request(pending, now)
        elif self.phase is Phase.CLOSED:
            self._answer(pending, None, KafkaConnectionError(
                f"node {self.node_id}: connection closed", api=request.API_KEY))
        else:
            self._queued.append(pending)

    def start(self, now: float) -> None:
        """Begin the non-blocking connect (the loop calls this once ``start_at`` passed)."""
        self._setup_deadline = now + self._setup_timeout
        self.phase = Phase.CONNECTING
        try:
            family, kind, proto, _, target = socket.getaddrinfo(
                *self.address, type=socket.SOCK_STREAM)[0]
            self.sock = socket.socket(family, kind, proto)
            self.sock.setblocking(False)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            code = self.sock.connect_ex(target)
        except (OSError, UnicodeError) as exc:  # UnicodeError: a host name IDNA cannot encode
            # (an empty label, one over 63 characters) from a broker's Metadata: a failed
            # connect like any other, not a crash of the I/O thread.
            self.close(_cut(self, f"cannot connect: {exc}", exc))
            return
        if code == 0:
            self._advance(now)
        elif code not in _IN_PROGRESS:
            self.close(_cut(self, f"cannot connect: {errno.errorcode.get(code, code)}"))

    def on_writable(self, now: float) -> None:
        """The socket can take bytes (or the connect finished)."""
        if self.phase is Phase.CONNECTING:
            assert self.sock is not None
            code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code != 0:
                self.close(_cut(self, f"cannot connect: {errno.errorcode.get(code, code)}"))
                return
            self._advance(now)
        self._flush()

    def on_readable(self, now: float) -> None:
        """Read what the socket has; finish the requests it answers."""
        sock = self.sock
        while sock is not None and self.phase is not Phase.CLOSED:
            try:
                data = sock.recv(_READ_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.close(_cut(self, f"receive failed: {exc}", exc))
                return
            if not data:
                self.close(_cut(self, "the broker closed the connection",
                                EOFError("the socket reached end of file")))
                return
            self._receive(data, now)
            if len(data) < _READ_SIZE:
                return

    def expire(self, now: float) -> None:
        """Start a connect whose backoff passed; fail what has outlived its deadline."""
        if self.phase is Phase.WAITING:
            if now >= self.start_at:
                self.start(now)
            return
        if self.phase in (Phase.CONNECTING, Phase.HANDSHAKE) and now >= self._setup_deadline:
            self.close(_cut(self, f"setup did not finish in {self._setup_timeout:g} s"))
            return
        late = next((r for r in self._in_flight if r.deadline <= now), None)
        if late is not None:
            api = late.request.API_KEY
            timeout = KafkaTimeoutError(
                f"node {self.node_id}: no answer to {type(late.request).__name__} within "
                f"{late.timeout:g} s; connection closed", api=api)
            self._in_flight.remove(late)
            self._answer(late, None, timeout)
            self.close(_cut(self, "closed after a request timed out", timeout))

    def close(self, error: EosError | None = None) -> None:
        """Close the socket; every request not answered fails with ``error``. Idempotent."""
        if self.phase is Phase.CLOSED:
            return
        self.was_ready = self.was_ready or self.ready
        self.failure = error
        self.phase = Phase.CLOSED
        if self.sock is not None:
            self.sock.close()
        failure = error or KafkaConnectionError(f"node {self.node_id}: connection closed")
        for pending in self._in_flight:
            self._answer(pending, None, failure)
        for pending in self._queued:
            self._answer(pending, None, _never_sent(failure, pending.request.API_KEY))
        self._in_flight.clear()
        self._queued.clear()

    # -- internals ---------------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        """Move to the next setup phase (the one place TLS and SASL phases would go)."""
        if self.phase is Phase.CONNECTING:
            self.phase = Phase.HANDSHAKE
            self._out.chunks.append(memoryview(self.protocol.handshake()))
            self._flush()
        elif self.phase is Phase.HANDSHAKE:
            self.phase = Phase.READY
            queued, self._queued = self._queued, deque()
            for pending in queued:
                self._write_request(pending, now)

    def _write_request(self, pending: _Request, now: float) -> None:
        try:
            data = self.protocol.send(pending.request)
        except EosError as exc:  # UnsupportedVersionError: this broker lacks the API
            self._answer(pending, None, exc)
            return
        pending.version = pending.request.API_VERSION
        pending.deadline = now + pending.timeout
        self._in_flight.append(pending)
        self._out.chunks.append(memoryview(data))
        self._flush()

    def _flush(self) -> None:
        if self.sock is None or self.phase is Phase.CLOSED:
            return
        try:
            self._out.write_to(self.sock)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.close(_cut(self, f"send failed: {exc}", exc))

    def _receive(self, data: bytes, now: float) -> None:
        try:
            replies = self.protocol.receive(data)
        except ResponseTooLargeError as exc:
            exc.node = self.node_id
            if exc.api != ApiKey.FETCH and self.phase is Phase.READY and self._in_flight:
                # The fetcher adapts to its own (smaller fetches, then an error). Nothing makes
                # any other answer smaller (a Metadata answer describes the cluster, a JoinGroup
                # answer the group's members): retried, it stalled its callers for ever. So the
                # request it answers fails with the typed error itself, at once.
                self.refused = exc
                self._answer(self._in_flight.popleft(), None, exc)
            self.close(_cut(self, f"answer refused: {exc}", exc))
            return
        except ProtocolError as exc:
            self.close(_cut(self, f"protocol error: {exc}", exc))
            return
        for reply in replies:
            if self.phase is Phase.CLOSED:
                return
            if self.phase is Phase.HANDSHAKE:
                self._on_handshake(reply, now)
            else:
                pending = self._in_flight.popleft()
                assert pending.request is reply.request
                self._answer(pending, reply.response, None)

    def _on_handshake(self, reply: Reply, now: float) -> None:
        retry = self.protocol.retry_handshake(reply)
        if retry is not None:
            self._out.chunks.append(memoryview(retry))
            self._flush()
        elif self.protocol.versions is None:
            code = reply.response.error_code
            self.close(_cut(self, f"ApiVersions failed with error code {code}"))
        else:
            self._advance(now)

    def _answer(self, pending: _Request, response: Any, error: EosError | None) -> None:
        self._answers.append(Answer(pending.request, response, error, self.node_id,
                                    pending.on_done, pending.version))


def _never_sent(failure: EosError, api: int) -> EosError:
    """The error of a request the closed connection never wrote (its outcome is known: none)."""
    error = KafkaConnectionError(f"{failure} (before the request was sent)", api=api)
    error.__cause__ = failure  # not the socket's reason: the broker never saw this request
    return error


def _cut(conn: NodeConnection, why: str, cause: BaseException | None = None) -> EosError:
    host, port = conn.address
    error = KafkaConnectionError(f"node {conn.node_id} ({host}:{port}): {why}")
    error.__cause__ = cause
    return error
