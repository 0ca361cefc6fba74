"""One non-blocking connection to one broker: setup, pipelined requests, deadlines.

A :class:`NodeConnection` wraps a sans-IO :class:`~eosclient._protocol.connection.Connection`
around a non-blocking socket and is driven by the event loop (:mod:`eosclient._net.client`): it
says which events it waits for (:attr:`NodeConnection.events`), and the loop calls
:meth:`~NodeConnection.on_writable`, :meth:`~NodeConnection.on_readable` and
:meth:`~NodeConnection.expire`. It never blocks and never calls back: every request that finishes
(answered, failed, timed out) comes back as an :class:`Answer` for the loop's owner to dispatch,
under its own lock.

Setup is a fixed sequence of phases; a request sent before READY waits in a queue::

    WAITING --(backoff over)--> RESOLVING --(addresses)--> CONNECTING --(TCP up)--> [TLS] -->
        HANDSHAKE --(ApiVersions)--> [SASL] --> READY --(KIP-368 session nearly over)-->
        DRAINING --(nothing in flight)--> SASL

The bracketed phases run only when :class:`~eosclient._net.security.Security` asks for them,
and :meth:`NodeConnection._advance` is the one place that moves between phases: everything
outside this module only sees READY or a failure.

* **TLS** wraps the socket (``SSLContext.wrap_socket(..., server_hostname=host,
  do_handshake_on_connect=False)``) and drives ``do_handshake()`` from the selector's events:
  ``ssl.SSLWantReadError``/``SSLWantWriteError`` say which event to wait for. Reads and writes
  after it treat the same two errors as "would block". A certificate that fails verification
  (untrusted, wrong host name, expired), and any other TLS failure during setup but an EOF or a
  reset, closes the connection with :class:`~eosclient.errors.SslAuthenticationError`: fatal,
  because a retry would meet the same certificate.
* **SASL** runs :class:`~eosclient._protocol.sasl.SaslLogin` through the same ``Connection``
  after ApiVersions (so SaslHandshake goes out at a negotiated version) and before anything
  else. A refusal closes the connection with
  :class:`~eosclient.errors.SaslAuthenticationError`; the client stops on it
  (:mod:`eosclient._net.client`), never retrying a wrong password.
* **Re-login** (KIP-368): when SaslAuthenticate v1+ gave a session lifetime, the connection
  logs in again at 85-95% of it (Java's window): new requests queue (DRAINING), the ones in
  flight are answered, then the SASL phase runs again on the same socket and the queue goes
  out. Nothing is cut, so no request's outcome becomes unknown.

* **Addresses**: the host name is looked up on a resolver thread
  (:mod:`eosclient._net.resolver`; ``getaddrinfo`` blocks, and a slow resolver must stall
  neither the application's calls nor the other connections' heartbeats). RESOLVING waits for
  that future, and :meth:`~NodeConnection.expire` (woken by the resolver) takes its result.
  CONNECTING then tries every address it gave (IPv6 and IPv4, in ``getaddrinfo``'s order), one
  at a time, the next as soon as one fails (refused, unreachable); the attempt fails only when
  all have, with an error naming each address and its OS error (the last ``OSError`` its
  ``__cause__``). ``setup_timeout`` covers the lookup, every address tried, and the handshakes.

Throttling (KIP-219): a broker over a quota answers at once with ``throttle_time_ms`` > 0 and
then stops reading from the connection for that long; a client that writes meanwhile only fills
the broker's buffers, and its requests' timeouts run while the broker ignores them. So an
answer carrying it (at a version where the broker throttles after answering; before KIP-219 it
held the answer back itself, and waiting again would double the penalty) makes the connection
hold new requests in its queue, in order, until the time has passed (:attr:`throttled_until`);
:meth:`~NodeConnection.expire` writes them then. Requests in flight are not affected. This is
the one place throttling is honoured: everything above only sees a request answered later.

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
import os
import random
import selectors
import socket
import ssl
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from eosclient._net.resolver import Address, resolve
from eosclient._net.security import PLAINTEXT, Security
from eosclient._protocol.connection import Connection, Reply
from eosclient._protocol.framing import DEFAULT_MAX_FRAME_SIZE
from eosclient._protocol.sasl import SaslLogin
from eosclient.errors import (
    ApiKey,
    AuthenticationError,
    EosError,
    KafkaConnectionError,
    KafkaTimeoutError,
    ProtocolError,
    RequestNotSentError,
    ResponseTooLargeError,
    SaslAuthenticationError,
    SslAuthenticationError,
)

__all__ = ["Answer", "NodeConnection", "Phase"]

log = logging.getLogger("eosclient.net")

_READ_SIZE = 256 * 1024
_IN_PROGRESS = frozenset({errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY})
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
_RELOGIN_WINDOW = (0.85, 0.95)  # of a KIP-368 session lifetime, as Java re-authenticates
# KIP-219: the first version of each API whose throttle_time_ms the broker enforces by muting the
# connection after answering (Java's shouldClientThrottle); APIs born after it, from v0.
_THROTTLES_FROM: dict[int, int] = {
    ApiKey.PRODUCE: 6, ApiKey.FETCH: 8, ApiKey.LIST_OFFSETS: 3, ApiKey.METADATA: 6,
    ApiKey.OFFSET_COMMIT: 4, ApiKey.OFFSET_FETCH: 4, ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 3, ApiKey.HEARTBEAT: 2, ApiKey.LEAVE_GROUP: 2, ApiKey.SYNC_GROUP: 2,
    ApiKey.DESCRIBE_GROUPS: 2, ApiKey.LIST_GROUPS: 2, ApiKey.API_VERSIONS: 2,
    ApiKey.CREATE_TOPICS: 3, ApiKey.DELETE_TOPICS: 2, ApiKey.INIT_PRODUCER_ID: 1,
    ApiKey.ADD_PARTITIONS_TO_TXN: 1, ApiKey.ADD_OFFSETS_TO_TXN: 1, ApiKey.END_TXN: 1,
    ApiKey.TXN_OFFSET_COMMIT: 1,
}


class Phase(enum.Enum):
    """Where a connection is in its life."""

    WAITING = "waiting for the reconnect backoff to pass"
    RESOLVING = "looking the host name up"
    CONNECTING = "TCP connect in progress"
    TLS = "TLS handshake in progress"
    HANDSHAKE = "ApiVersions sent"
    SASL = "SASL login in progress"
    READY = "ready for requests"
    DRAINING = "waiting for requests in flight before logging in again (KIP-368)"
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
        security: TLS and SASL (:func:`~eosclient._net.security.security_for`); plaintext by
            default.
        lookup: Starts the host-name lookup, ``lookup(host, port)``; by default
            :func:`~eosclient._net.resolver.resolve`, waking nobody (the network client passes
            one that wakes its selector).
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
        security: Security = PLAINTEXT,
        lookup: Callable[[str, int], Future[list[Address]]] | None = None,
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.phase = Phase.WAITING
        self.start_at = start_at
        self.was_ready = False  # the handshake completed once (a failed connect: it never did)
        self.failure: EosError | None = None  # why it closed, once CLOSED
        self.reason = ""  # the failure's words without the node's name (for the client's log)
        self.refused: ResponseTooLargeError | None = None  # a non-Fetch answer over the limit
        self.protocol = Connection(client_id, max_frame_size=max_frame_size)
        self.sock: socket.socket | None = None
        self._setup_timeout = setup_timeout
        self._setup_deadline = float("inf")
        self._queued: deque[_Request] = deque()  # waiting for READY
        self._in_flight: deque[_Request] = deque()
        self._out = _Buffer()
        self._answers: list[Answer] = []
        self._security = security
        self._lookup = lookup or (lambda host, port: resolve(host, port, _nobody))
        self._addresses: Future[list[Address]] | None = None  # the lookup, while RESOLVING
        self._untried: deque[Address] = deque()  # addresses left to try while CONNECTING
        self._tried: list[tuple[Address, OSError]] = []  # addresses that failed, and why
        self.peer: Address | None = None  # the address connected to (or being tried)
        self._tls_wants = selectors.EVENT_WRITE  # the event the TLS handshake waits for
        self._login: SaslLogin | None = None
        self._relogin_at = float("inf")
        #: KIP-219: no request is written before this time (the broker throttles us).
        self.throttled_until = float("-inf")
        self.logins = 0  # SASL logins completed on this connection (KIP-368 re-logins count)

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
        if self.phase is Phase.TLS:
            return self._tls_wants
        if self.phase is Phase.CONNECTING or self._out.chunks:
            return selectors.EVENT_READ | selectors.EVENT_WRITE
        return selectors.EVENT_READ

    def next_deadline(self) -> float:
        """The nearest time :meth:`expire` has something to do."""
        if self.phase is Phase.WAITING:
            return self.start_at
        if self.phase not in (Phase.READY, Phase.DRAINING):
            return self._setup_deadline
        first = min((r.deadline for r in self._in_flight), default=float("inf"))
        if self.phase is not Phase.READY:
            return first
        held = self.throttled_until if self._queued else float("inf")
        return min(first, self._relogin_at, held)

    def take_answers(self) -> list[Answer]:
        """The requests finished since the last call."""
        answers, self._answers = self._answers, []
        return answers

    # -- driving -----------------------------------------------------------------------------

    def send(self, request: Any, on_done: Callable[[Answer], None], now: float,
             timeout: float) -> None:
        """Send ``request`` now if READY, else once setup completes; the answer comes later."""
        pending = _Request(request, on_done, timeout)
        if self.phase is Phase.READY and not self._queued and now >= self.throttled_until:
            self._write_request(pending, now)
        elif self.phase is Phase.CLOSED:
            self._answer(pending, None, RequestNotSentError(
                f"node {self.node_id}: connection closed", api=request.API_KEY))
        else:
            self._queued.append(pending)

    def start(self, now: float) -> None:
        """Begin: look the host name up (the loop calls this once ``start_at`` passed)."""
        self._setup_deadline = now + self._setup_timeout
        self.phase = Phase.RESOLVING
        self._addresses = self._lookup(*self.address)
        self._resolved(now)  # a lookup that answered at once (a literal address, a test's)

    def _resolved(self, now: float) -> None:
        """Once the lookup is done, start connecting to its first address."""
        lookup = self._addresses
        if lookup is None or not lookup.done():
            return
        self._addresses = None
        try:
            self._untried = deque(lookup.result())
        except (OSError, UnicodeError) as exc:  # UnicodeError: a host name IDNA cannot encode
            # (an empty label, one over 63 characters) from a broker's Metadata: a failed
            # connect like any other, not a crash of the I/O thread.
            self.close(_cut(self, f"cannot resolve the host name: {exc}", exc))
            return
        self.phase = Phase.CONNECTING
        self._connect_next(now)

    def _connect_next(self, now: float) -> None:
        """Start a non-blocking connect to the next address untried; fail when none is left."""
        while self._untried:
            self.peer = peer = self._untried.popleft()
            try:
                self.sock = socket.socket(peer.family, peer.type, peer.proto)
                self.sock.setblocking(False)
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                code = self.sock.connect_ex(peer.sockaddr)
            except OSError as exc:  # e.g. no IPv6 on this host: EAFNOSUPPORT
                self._failed_address(exc)
                continue
            if code == 0:
                self._advance(now)
                return
            if code in _IN_PROGRESS:
                return  # on_writable says how it went
            self._failed_address(_os_error(code))
        last = self._tried[-1][1] if self._tried else None
        self.close(_cut(self, f"every address failed: {self.tried or 'none given'}", last))

    @property
    def tried(self) -> str:
        """Each address that refused this attempt, and its OS error ("" if none did)."""
        return ", ".join(f"{peer} {_described(exc)}" for peer, exc in self._tried)

    def _where(self) -> str:
        """The addresses a setup timeout met: the one being tried, the ones that failed."""
        where = f" to {self.peer}" if self.phase is Phase.CONNECTING else ""
        return f"{where}; failed before: {self.tried}" if self._tried else where

    def _failed_address(self, exc: OSError) -> None:
        assert self.peer is not None
        self._tried.append((self.peer, exc))
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self._untried:
            log.info("node %d (%s:%d): %s failed, %s; trying %s", self.node_id, *self.address,
                     self.peer, _described(exc), self._untried[0])

    def on_writable(self, now: float) -> None:
        """The socket can take bytes (or the connect finished)."""
        if self.phase is Phase.CONNECTING:
            assert self.sock is not None
            code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code != 0:
                self._failed_address(_os_error(code))
                self._connect_next(now)
                return
            self._advance(now)
        elif self.phase is Phase.TLS:
            self._tls_step(now)
            return
        self._flush()

    def on_readable(self, now: float) -> None:
        """Read what the socket has; finish the requests it answers."""
        if self.phase is Phase.TLS:
            self._tls_step(now)
            return
        if self.phase is Phase.CONNECTING:  # a failed connect is writable too: on_writable
            return  # read its error and may have moved on to the next address's socket
        sock = self.sock
        tls = isinstance(sock, ssl.SSLSocket)
        while sock is not None and self.phase is not Phase.CLOSED:
            try:
                data = sock.recv(_READ_SIZE)
            except _WOULD_BLOCK:
                return
            except ssl.SSLError as exc:
                # TLS 1.3: a broker refusing our certificate says so after our side of the
                # handshake finished, in an alert read here.
                self.close(self._tls_failure(exc))
                return
            except OSError as exc:
                self.close(_cut(self, f"receive failed: {exc}", exc))
                return
            if not data:
                why = "the broker closed the connection"
                if tls and self.phase is Phase.HANDSHAKE:  # TLS 1.3 refuses a client
                    why += (" right after the TLS handshake (a broker that refuses this "  # cert
                            "client's certificate does so; check ssl.certificate.location)")
                self.close(_cut(self, why, EOFError("the socket reached end of file")))
                return
            self._receive(data, now)
            if len(data) < _READ_SIZE and not tls:  # TLS: read until it would block (records
                return  # decrypted into OpenSSL's buffer wake no selector)

    def expire(self, now: float) -> None:
        """Start a connect whose backoff passed; fail what has outlived its deadline."""
        if self.phase is Phase.WAITING:
            if now >= self.start_at:
                self.start(now)
            return
        if self.phase is Phase.RESOLVING:
            self._resolved(now)
        if self.phase in _SETUP and now >= self._setup_deadline:
            self.close(_cut(self, f"setup did not finish in {self._setup_timeout:g} s "
                                  f"({self.phase.value}{self._where()})"))
            return
        if self.phase is Phase.READY and self._queued:
            self._release(now)  # a KIP-219 throttle that has passed
        if self.phase is Phase.READY and now >= self._relogin_at:
            self.phase = Phase.DRAINING  # requests queue; the ones in flight finish first
            self._relogin_at = float("inf")
            if not self._in_flight:
                self._start_login(now)
        late = next((r for r in self._in_flight if r.deadline <= now), None)
        if late is not None:
            api = late.request.API_KEY
            timeout = KafkaTimeoutError(
                f"node {self.node_id}: no answer to {type(late.request).__name__} within "
                f"{late.timeout:g} s; connection closed", api=api)
            self._in_flight.remove(late)
            self._answer(late, None, timeout)
            self.close(_cut(self, "closed after a request timed out", timeout))

    def close(self, error: EosError | None = None, *, level: int = logging.INFO) -> None:
        """Close the socket; every request not answered fails with ``error``. Idempotent.
        A connection that was ready is logged as disconnected at ``level`` (DEBUG without an
        ``error``)."""
        if self.phase is Phase.CLOSED:
            return
        ready = self.phase in (Phase.READY, Phase.DRAINING)
        if ready:  # a failed set-up is the client's WARNING; an orderly close is DEBUG
            log.log(level if error is not None else logging.DEBUG,
                    "node %d (%s:%d): disconnected (%s; %d requests in flight, %d queued)",
                    self.node_id, *self.address, error or "closed", len(self._in_flight),
                    len(self._queued))
        self.was_ready = self.was_ready or ready
        self.failure = error
        self.phase = Phase.CLOSED
        if self._addresses is not None:  # a lookup still running: its answer is dropped
            self._addresses.cancel()
            self._addresses = None
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
        """Move to the next setup phase: the one place the phases follow each other."""
        if self.phase is Phase.CONNECTING and self._security.tls is not None:
            self._start_tls(now)
        elif self.phase in (Phase.CONNECTING, Phase.TLS):
            self.phase = Phase.HANDSHAKE
            self._out.chunks.append(memoryview(self.protocol.handshake()))
            self._flush()
        elif self.phase is Phase.HANDSHAKE and self._security.login is not None:
            self._start_login(now)
        elif self.phase in (Phase.HANDSHAKE, Phase.SASL):
            self.phase = Phase.READY
            log.debug("node %d (%s:%d): connected (%s)", self.node_id, *self.address,
                      "TLS" if self._security.tls is not None else "plaintext")
            self._release(now)

    def _release(self, now: float) -> None:
        """Write the queued requests, in order, unless the broker still throttles us."""
        if now < self.throttled_until:
            return
        queued, self._queued = self._queued, deque()
        for pending in queued:
            self._write_request(pending, now)

    def _note_throttle(self, reply: Reply, now: float) -> None:
        """KIP-219: hold new requests while the broker, having answered, throttles us."""
        millis = getattr(reply.response, "throttle_time_ms", 0) or 0
        if millis <= 0 or reply.version < _THROTTLES_FROM.get(reply.request.API_KEY, 0):
            return
        self.throttled_until = max(self.throttled_until, now + millis / 1000)
        log.debug("node %d (%s:%d): throttled for %d ms by the broker (KIP-219)",
                  self.node_id, *self.address, millis)

    def _start_tls(self, now: float) -> None:
        assert self._security.tls is not None and self.sock is not None
        self.phase = Phase.TLS
        try:
            self.sock = self._security.tls.wrap_socket(
                self.sock, server_hostname=self.address[0], do_handshake_on_connect=False)
        except (ssl.SSLError, ValueError) as exc:  # e.g. a host name SNI cannot carry
            self.close(self._tls_failure(exc))
            return
        self._tls_step(now)

    def _tls_step(self, now: float) -> None:
        """Drive the TLS handshake one step; on to ApiVersions once it is done."""
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._tls_wants = selectors.EVENT_READ
            return
        except ssl.SSLWantWriteError:
            self._tls_wants = selectors.EVENT_WRITE
            return
        except ssl.SSLError as exc:
            self.close(self._tls_failure(exc))
            return
        except OSError as exc:
            self.close(_cut(self, f"TLS handshake failed: {exc}", exc))
            return
        self._advance(now)

    def _tls_failure(self, exc: ssl.SSLError | ValueError) -> EosError:
        """A TLS error as the connection's end: fatal during setup but for a cut (EOF)."""
        setup = self.phase not in (Phase.READY, Phase.DRAINING)
        if not setup or isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
            # A cut, which a restarting broker makes too: retried. Some servers refuse a
            # client certificate this way (no alert), so the message says where to look.
            hint = (" (the broker closed it during the TLS handshake: does it want a client "
                    "certificate, ssl.certificate.location?)") if setup else ""
            return _cut(self, f"TLS failed: {exc}{hint}", exc)
        if isinstance(exc, ssl.SSLCertVerificationError):
            why = f"the broker's certificate failed verification: {exc.verify_message}"
        else:
            why = f"TLS handshake failed: {getattr(exc, 'reason', None) or exc}"
        host, port = self.address
        error = SslAuthenticationError(f"node {self.node_id} ({host}:{port}): {why}")
        error.__cause__ = exc
        return error

    def _start_login(self, now: float) -> None:
        """Open a SASL login: at setup, and again before a KIP-368 session ends."""
        assert self._security.login is not None
        self.phase = Phase.SASL
        self._setup_deadline = now + self._setup_timeout
        try:
            self._login = SaslLogin(self._security.login())
        except Exception as exc:  # oauth_cb failed: a token service may come back, so retry
            log.warning("node %d (%s:%d): no SASL token: %r", self.node_id, *self.address, exc)
            self.close(_cut(self, f"no SASL login: oauth_cb failed: {exc!r}", exc))
            return
        self._send_login(self._login.start())

    def _send_login(self, request: object) -> None:
        try:
            data = self.protocol.send(request)
        except EosError as exc:  # UnsupportedVersionError: the broker offers no SASL
            self.close(self._sasl_failure(SaslAuthenticationError(
                f"the broker does not offer SASL ({exc}); is security.protocol right?")))
            return
        self._out.chunks.append(memoryview(data))
        self._flush()

    def _on_login(self, reply: Reply, now: float) -> None:
        assert self._login is not None
        try:
            request = self._login.on_response(reply.response)
        except SaslAuthenticationError as exc:
            self.close(self._sasl_failure(exc))
            return
        if request is not None:
            self._send_login(request)
            return
        self.logins += 1
        lifetime = self._login.session_lifetime_ms / 1000
        if lifetime > 0:
            self._relogin_at = now + lifetime * random.uniform(*_RELOGIN_WINDOW)
        self._login = None
        self._advance(now)

    def _sasl_failure(self, exc: SaslAuthenticationError) -> SaslAuthenticationError:
        host, port = self.address
        error = SaslAuthenticationError(f"node {self.node_id} ({host}:{port}): SASL "
                                        f"{self._login.mechanism.name if self._login else ''} "
                                        f"login refused: {exc}", code=exc.code,
                                        code_name=exc.code_name, api=exc.api)
        error.__cause__ = exc.__cause__
        return error

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
        except _WOULD_BLOCK:
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
            elif self.phase is Phase.SASL:
                self._on_login(reply, now)
            else:
                pending = self._in_flight.popleft()
                assert pending.request is reply.request
                self._note_throttle(reply, now)
                self._answer(pending, reply.response, None)
                if self.phase is Phase.DRAINING and not self._in_flight:
                    self._start_login(now)

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


_SETUP = frozenset({Phase.RESOLVING, Phase.CONNECTING, Phase.TLS, Phase.HANDSHAKE, Phase.SASL})


def _nobody() -> None:
    """The wake of a connection no selector loop drives (a test's)."""


def _described(exc: OSError) -> str:
    """``ECONNREFUSED (Connection refused)``: the errno's name, then the OS's words."""
    name = errno.errorcode.get(exc.errno or 0)
    return f"{name} ({exc.strerror})" if name and exc.strerror else str(exc)


def _os_error(code: int) -> OSError:
    """The OSError of an errno (``OSError(ECONNREFUSED, ...)`` is a ConnectionRefusedError)."""
    return OSError(code, os.strerror(code))


def is_authentication_failure(error: BaseException | None) -> bool:
    """Whether a connection ended because it could not be authenticated (never retried)."""
    return isinstance(error, AuthenticationError)


def _never_sent(failure: EosError, api: int) -> EosError:
    """The error of a request the closed connection never wrote (its outcome is known: none)."""
    error = RequestNotSentError(f"{failure} (before the request was sent)", api=api)
    error.__cause__ = failure  # not the socket's reason: the broker never saw this request
    return error


def _cut(conn: NodeConnection, why: str, cause: BaseException | None = None) -> EosError:
    host, port = conn.address
    conn.reason = why
    error = KafkaConnectionError(f"node {conn.node_id} ({host}:{port}): {why}")
    error.__cause__ = cause
    return error
