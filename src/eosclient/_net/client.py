"""The selector loop: connections by node id, request pipelining, reconnect backoff, metadata.

Theory of operation
-------------------
One thread (the client's owner: the producer's or consumer's I/O thread) owns a
:class:`NetworkClient` and calls it in two kinds of steps, alternately:

* **I/O** (:meth:`NetworkClient.poll`), run *without* the owner's lock: wait on the selector at
  most until the nearest timer, move bytes, start connects whose backoff passed, expire deadlines.
  Every connect starts here, never in :meth:`NetworkClient.send` or :meth:`NetworkClient.connect`.
  Host names are looked up on a resolver thread (:mod:`eosclient._net.resolver`), never here:
  ``getaddrinfo`` can block for seconds, and other connections' requests and heartbeats must go
  on meanwhile. The lookup's end wakes the selector like :meth:`NetworkClient.wakeup`.
  It returns the :class:`~eosclient._net.node.Answer` of every request that finished. It never
  calls back, so no application state is touched outside the lock.
* **Dispatch and send**, run *under* the owner's lock: the owner hands the answers to
  :meth:`NetworkClient.dispatch`, which calls each one's ``on_done``, then sends new requests
  (:meth:`NetworkClient.send`) and lets the client ask for metadata
  (:meth:`NetworkClient.maybe_update_metadata`).

A malformed response is the broker's protocol error, never the owner's crash. Frames and
correlation ids are checked where bytes are decoded (:mod:`eosclient._protocol.connection`); but
kafka-python decodes what the bytes say, not what the schema allows, so a response may decode
and still be unusable (a null topic or partition array where Kafka never sends one, a field of
an impossible value), and that shows only when its handler reads it. :meth:`dispatch` is the one
place every response reaches its handler, so it is where such a failure is caught: logged at
WARNING as a :class:`~eosclient.errors.ProtocolError`, the connection closed (a broker that
wrote one such answer cannot be trusted with the rest of its stream), and the request handed
back to its handler as failed by that cut: outcome unknown, retried as after any other cut.

An answer over ``receive.message.max.bytes`` closes its connection before it is read. A Fetch
answer is the fetcher's to adapt to (it asks for less). Any other request answered that way fails
with the :class:`~eosclient.errors.ResponseTooLargeError` itself, at once rather than after some
retries: nothing the client can ask makes a Metadata or group answer smaller, and retried it
stalled every call waiting on it, silently, until its timeout. The client cannot go on without
a larger setting, so the error becomes :attr:`NetworkClient.fatal` (below), logged at WARNING
with the setting to raise.

Other threads only ever call :meth:`NetworkClient.wakeup`, which writes a byte to a socketpair the
selector watches, so an application call is acted on at once instead of at the next timer.

Nodes: a bootstrap address gets a negative node id (-1, -2, ...) until Metadata names the real
brokers; coordinators are added by the owner as FindCoordinator names them (:meth:`add_node`).
A request for a node that is not connected opens a connection and waits in it until the
ApiVersions handshake is done; ``send(None, ...)`` picks the least loaded usable node. A
connection that fails or is closed is not retried before its reconnect backoff (exponential with
jitter, :mod:`eosclient._net.backoff`) has passed; requests sent meanwhile wait for the attempt.

Security: TLS and SASL are set up per connection by :mod:`eosclient._net.node` from the one
:class:`~eosclient._net.security.Security` made here at construction (so a certificate that
cannot be loaded is a ConfigError then). A connection that fails to authenticate (a refused
SASL login, a certificate that fails verification) is not retried: :attr:`NetworkClient.fatal`
keeps its :class:`~eosclient.errors.AuthenticationError`, logged once at ERROR.

:attr:`NetworkClient.fatal` is the one place a client-wide failure that no retry can mend is
kept (a refused login, a non-Fetch answer too large to read); the owner's I/O thread stops on
it, so every blocking call raises it at once, as itself, instead of timing out.

Metadata (:class:`~eosclient._net.metadata.Metadata`) is shared with the owner's application
threads and, like everything they share, is read and written only under the owner's lock.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

from eosclient._net.backoff import Backoff
from eosclient._net.latency import Latencies
from eosclient._net.metadata import Metadata
from eosclient._net.node import Answer, NodeConnection, Phase
from eosclient._net.resolver import resolve
from eosclient._net.security import security_for
from eosclient.config import ClientConfig
from eosclient.errors import (
    AllBrokersDownError,
    AuthenticationError,
    EosError,
    KafkaConnectionError,
    ProtocolError,
    RequestNotSentError,
    ResponseTooLargeError,
)

_UNKNOWN_TOPIC = 3  # UNKNOWN_TOPIC_OR_PARTITION

__all__ = ["Answer", "NetworkClient"]

log = logging.getLogger("eosclient.net")


class NetworkClient:
    """Connections, pipelined requests and metadata for one client, driven by one thread.

    Args:
        config: Brokers, client id, timeouts and backoffs.
        auto_create_topics: Whether Metadata asks brokers to create missing topics.
        clock: Monotonic seconds (tests may pass their own).

    Raises:
        ConfigError: a certificate, key or CA file named by ``ssl.*`` cannot be loaded.
    """

    def __init__(
        self,
        config: ClientConfig,
        *,
        auto_create_topics: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._security = security_for(config)
        #: Why this client cannot go on (the module docstring): set once, never cleared.
        self.fatal: AuthenticationError | ResponseTooLargeError | None = None
        self._clock = clock
        self._request_timeout = config.request_timeout_ms / 1000
        self._setup_timeout = config.socket_connection_setup_timeout_ms / 1000
        self._reconnect = Backoff(config.reconnect_backoff_ms / 1000,
                                  config.reconnect_backoff_max_ms / 1000)
        #: Request latency per API (``stats()``), recorded as answers come back.
        self.latency = Latencies(clock)
        self.metadata = Metadata(max_age=config.metadata_max_age_ms / 1000,
                                 backoff=config.retry_backoff_ms / 1000,
                                 auto_create=auto_create_topics)
        self._bootstrap: dict[int, tuple[str, int]] = {
            -(i + 1): _split(server) for i, server in enumerate(config.bootstrap_servers)}
        self._nodes: dict[int, tuple[str, int]] = {}
        self._conns: dict[int, NodeConnection] = {}
        # The socket registered for each connection, its fd and events: a connection that
        # moves on to its host's next address has a new socket, perhaps on the same fd number.
        self._fds: dict[NodeConnection, tuple[socket.socket, int, int]] = {}
        #: The last connect that failed since a connection was last ready (None then): the
        #: cause to chain into a blocking call's timeout. One reference, read by any thread.
        self.connect_failure: KafkaConnectionError | None = None
        #: Whether a connection ever completed its handshake (the address was right once).
        self.reached = False
        #: Since when no broker has been reachable (None: one is, or no connect failed yet).
        self.unreachable_since: float | None = None
        self._gone_after = max(1.0, config.reconnect_backoff_max_ms / 1000)
        self._why: dict[tuple[str, int], str] = {}  # address -> why its last connect failed
        self._down_reported = False  # this outage went to the log and error_cb
        self._reports: list[EosError] = []  # for error_cb, handed over by report()
        self._failures: dict[int, int] = {}  # node id -> connects failed in a row
        self._not_before: dict[int, float] = {}  # node id -> reconnect backoff end
        self._unknown_topics: set[str] = set()  # warned about: the cluster has no such topic
        self._answers: list[Answer] = []
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        for end in (self._wake_r, self._wake_w):
            end.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self.closed = False
        # Whether the last poll handled an event (a socket's or a wakeup): what it changed (a
        # connect finished or failed, a handshake done, an application's call) may need a turn
        # though it returned no answer. The thread turns after every poll; the asyncio front
        # reads this (LoopDriver).
        self.polled_events = False

    # -- any thread ----------------------------------------------------------------------------

    def wakeup(self) -> None:
        """Make a :meth:`poll` in progress (or the next one) return at once. Thread-safe."""
        with contextlib.suppress(OSError):  # full (a wakeup is pending anyway) or closed
            self._wake_w.send(b"\x00")

    # -- the owner's thread ----------------------------------------------------------------------

    def selector_fileno(self) -> int:
        """The selector's own descriptor: readable when :meth:`poll` has something to do (an
        event loop watches it instead of a thread waiting in :meth:`poll`)."""
        return self._selector.fileno()

    def add_node(self, node_id: int, host: str, port: int) -> None:
        """Know ``node_id``'s address (a coordinator that FindCoordinator named)."""
        self._nodes[node_id] = (host, port)

    def ready(self, node_id: int) -> bool:
        """Whether requests to ``node_id`` go out at once (connected, handshake done)."""
        conn = self._conns.get(node_id)
        return conn is not None and conn.ready

    def in_flight(self, node_id: int) -> int:
        """Requests sent to ``node_id`` and not answered (queued ones included)."""
        conn = self._conns.get(node_id)
        return conn.in_flight if conn is not None else 0

    def connect(self, node_id: int) -> None:
        """Open a connection to ``node_id`` (after its backoff) if there is none.

        The connect itself, host-name lookup included, starts in the next :meth:`poll`.
        """
        self._connection(node_id, self._clock())

    def send(
        self,
        node_id: int | None,
        request: Any,
        on_done: Callable[[Answer], None],
        *,
        timeout: float | None = None,
    ) -> int:
        """Send ``request`` to ``node_id`` (the least loaded node if None); return the node id.

        The answer, or the error that replaces it, comes out of a later :meth:`poll`.
        """
        now = self._clock()
        on_done = self.latency.timed(request.API_KEY, now, on_done)
        target = self.least_loaded(now) if node_id is None else node_id
        conn = self._connection(target, now)
        if conn is None:
            error = RequestNotSentError(f"node {target}: address unknown", api=request.API_KEY)
            self._answers.append(Answer(request, None, error, target, on_done))
            return target
        conn.send(request, on_done, now, self._request_timeout if timeout is None else timeout)
        self._after(conn, now)
        return target

    def dispatch(self, answers: list[Answer]) -> None:
        """Call each answer's ``on_done`` (the owner's thread, under its lock).

        A handler that fails on a *response* (any exception) got a malformed one: it is logged
        at WARNING as a :class:`ProtocolError`, the node's connection is closed, and the
        handler is called again with the answer failed by that cut (a
        :class:`KafkaConnectionError` whose cause is the ProtocolError), as if the connection
        had dropped before the answer came. A handler that fails on a failed answer has a bug:
        that propagates.
        """
        for answer in answers:
            if answer.error is not None:
                answer.on_done(answer)
                continue
            try:
                answer.on_done(answer)
            except Exception as exc:  # any way a response can be unusable
                answer.on_done(self._malformed(answer, exc))

    def _malformed(self, answer: Answer, exc: Exception) -> Answer:
        """Close the connection that sent an unusable response; the answer as failed by it."""
        api = getattr(answer.request, "API_KEY", None)
        name = type(answer.response).__name__
        problem = ProtocolError(f"node {answer.node_id}: malformed {name} (v{answer.version}): "
                                f"{exc!r}", api=api)
        problem.__cause__ = exc
        log.warning("%s; closing the connection and retrying", problem, exc_info=exc)
        cut = KafkaConnectionError(f"node {answer.node_id}: closed after a malformed {name}; "
                                   "the request's outcome is unknown", api=api)
        cut.__cause__ = problem
        self.close_node(answer.node_id, cut)
        return Answer(answer.request, None, cut, answer.node_id, answer.on_done, answer.version)

    def maybe_update_metadata(self, now: float) -> None:
        """Send a Metadata request if one is due (call under the owner's lock)."""
        if self.metadata.due(now):
            self.send(None, self.metadata.build_request(now), self._on_metadata)

    def next_timer(self) -> float:
        """The nearest deadline of any connection (connects, setup and request timeouts), or
        the moment an outage becomes one to report."""
        nearest = min((c.next_deadline() for c in self._conns.values()), default=float("inf"))
        if self.unreachable_since is not None and not self._down_reported:
            nearest = min(nearest, self.unreachable_since + self._gone_after)
        return nearest

    def wait_for(self, timeout: float) -> float:
        """How long a poll asked to wait ``timeout`` seconds may wait: no longer than the next
        connection deadline (:meth:`next_timer`), and not at all with answers at hand."""
        if self._answers:
            return 0.0
        return max(0.0, min(timeout, self.next_timer() - self._clock()))

    def poll(self, timeout: float) -> list[Answer]:
        """Wait at most ``timeout`` seconds for I/O (:meth:`wait_for`); return the requests
        that finished (:attr:`polled_events` says whether anything happened).

        Call without the owner's lock; hand the answers to :meth:`dispatch` under it.
        """
        events = self._selector.select(self.wait_for(timeout))
        self.polled_events = bool(events)
        now = self._clock()
        for key, mask in events:
            conn = key.data
            if conn is None:
                self._drain_wakeups()
                continue
            if mask & selectors.EVENT_WRITE:
                conn.on_writable(now)
            if mask & selectors.EVENT_READ:
                conn.on_readable(now)
            self._after(conn, now)  # at once: a closed socket's fd may be reused below
        for conn in list(self._conns.values()):
            conn.expire(now)
            self._after(conn, now)
        if not self._down_reported and (down := self.all_down(now)) is not None:
            self._down_reported = True
            log.warning("%s; retrying with backoff", down)
            self._reports.append(down)
        answers, self._answers = self._answers, []
        return answers

    def all_down(self, now: float) -> AllBrokersDownError | None:
        """Why no broker can be reached, once none has been for ``reconnect.backoff.max.ms``
        (at least 1 s: a broker restarting within it is no news); None while one can be."""
        since = self.unreachable_since
        if since is None or now - since < self._gone_after:
            return None
        never = "" if self.reached else " (none ever was: is bootstrap.servers right?)"
        # A copy, taken at once: application threads ask while the I/O thread's poll may add.
        why_now = list(self._why.items())
        tried = "; ".join(_failed(host, port, why) for (host, port), why in why_now)
        error = AllBrokersDownError(f"no broker can be reached{never}: {tried}")
        error.__cause__ = self.connect_failure
        return error

    def unreached_error(self, waited: float) -> AllBrokersDownError:
        """The error of a wait of ``waited`` seconds that never reached a broker: why each
        address failed, or that none answered in time (an address that swallows packets)."""
        down = self.all_down(float("inf"))
        if down is not None:
            return down
        servers = ",".join(self._config.bootstrap_servers)
        return AllBrokersDownError(f"no broker of {servers} answered in {waited:g} s (still "
                                   "connecting: is bootstrap.servers right?)")

    def check_reached(self, now: float) -> None:
        """Raise for a client that never reached a broker, once every connect has failed for
        a while (a wrong address must not look like "no data"); unless ``error_cb`` is set,
        which is then told instead (:meth:`report`) while calls wait out their timeouts.

        Raises:
            AllBrokersDownError: see above; the client keeps trying to connect.
        """
        if not self.reached and self._config.error_cb is None:
            down = self.all_down(now)
            if down is not None:
                raise down

    def report(self) -> None:
        """Hand the client-wide errors noted since the last call to ``error_cb`` (the owner's
        I/O thread, without its lock). An ``error_cb`` that raises is logged, never fatal."""
        reports, self._reports = self._reports, []
        callback = self._config.error_cb
        if callback is None:
            return
        for error in reports:
            try:
                callback(error)
            except Exception:
                log.exception("error_cb raised on %r", error)

    def close_node(self, node_id: int, error: KafkaConnectionError | None = None, *,
                   level: int = logging.INFO) -> None:
        """Close the connection to ``node_id``; its requests fail with ``error`` (logged at
        ``level`` if it was ready)."""
        conn = self._conns.get(node_id)
        if conn is not None:
            conn.close(error, level=level)
            self._after(conn, self._clock())

    def close(self) -> list[Answer]:
        """Close every connection and the selector; return the requests that were cut off."""
        if self.closed:
            return []
        self.closed = True
        for node_id in list(self._conns):
            self.close_node(node_id, KafkaConnectionError("the client was closed"),
                            level=logging.DEBUG)  # asked for: not news
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        answers, self._answers = self._answers, []
        return answers

    def least_loaded(self, now: float) -> int:
        """A node to send an any-broker request to: a ready one with the fewest requests in
        flight, else one already connecting, else the known node whose backoff ends first."""
        ready = [c for c in self._conns.values() if c.ready]
        if ready:
            return min(ready, key=lambda c: c.in_flight).node_id
        starting = [c for c in self._conns.values() if c.phase is not Phase.CLOSED]
        if starting:
            return starting[0].node_id
        known = [*self.metadata.nodes, *self._bootstrap]
        return min(known, key=lambda n: self._not_before.get(n, float("-inf")))

    # -- internals -------------------------------------------------------------------------------

    def _address(self, node_id: int) -> tuple[str, int] | None:
        return (self.metadata.nodes.get(node_id) or self._nodes.get(node_id)
                or self._bootstrap.get(node_id))

    def _remember(self) -> None:
        """Keep every broker address Metadata ever named. A broker that is down may be left
        out of the answer's broker list while it still leads partitions (librdkafka's mock
        does this; a real cluster's answer can also lag its leaders): a batch waiting for it
        must still be able to reconnect, with backoff, when it comes back."""
        self._nodes.update(self.metadata.nodes)

    def _connection(self, node_id: int, now: float) -> NodeConnection | None:
        conn = self._conns.get(node_id)
        if conn is not None:
            return conn
        address = self._address(node_id)
        if address is None:  # named (a leader) but never listed: the metadata is behind
            self.metadata.request_update()
            return None
        start_at = max(now, self._not_before.get(node_id, now))
        conn = NodeConnection(node_id, address, client_id=self._config.client_id,
                              setup_timeout=self._setup_timeout, start_at=start_at,
                              max_frame_size=self._config.receive_message_max_bytes,
                              security=self._security,
                              lookup=functools.partial(resolve, wake=self.wakeup))
        self._conns[node_id] = conn  # WAITING: poll() starts it, outside the owner's lock
        return conn

    def _after(self, conn: NodeConnection, now: float) -> None:
        """Collect ``conn``'s answers and keep the selector in step with what it waits for."""
        self._answers.extend(conn.take_answers())
        if conn.refused is not None and self.fatal is None:
            self.fatal = conn.refused
            log.warning("node %d (%s:%d): %s; every call waiting on it fails with "
                        "ResponseTooLargeError (raise receive.message.max.bytes above %d)",
                        conn.node_id, *conn.address, conn.refused, conn.refused.size)
        registered = self._fds.get(conn)
        if conn.phase is Phase.CLOSED:
            self._forget(conn, now)
            return
        if conn.ready:
            self._failures.pop(conn.node_id, None)
            self.connect_failure = None
            self.reached, self.unreachable_since, self._down_reported = True, None, False
            self._why.pop(conn.address, None)  # an outage names only what fails now
        if registered is not None and registered[0] is not conn.sock:  # moved on (or TLS)
            self._unregister(conn)
            registered = None
        if conn.sock is None:
            return
        wanted = (conn.sock, conn.sock.fileno(), conn.events)
        if registered == wanted:
            return
        if registered is None:
            self._selector.register(wanted[1], wanted[2], conn)
        else:
            self._selector.modify(wanted[1], wanted[2], conn)
        self._fds[conn] = wanted

    def _unregister(self, conn: NodeConnection) -> bool:
        """Take ``conn``'s socket off the selector; whether it was on it."""
        registered = self._fds.pop(conn, None)
        if registered is None:
            return False
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(registered[1])
        return True

    def _forget(self, conn: NodeConnection, now: float) -> None:
        if not self._unregister(conn) and self._conns.get(conn.node_id) is not conn:
            return  # forgotten already
        if self._conns.get(conn.node_id) is conn:
            del self._conns[conn.node_id]
        if isinstance(conn.failure, AuthenticationError):
            if self.fatal is None:
                log.error("%s; not retried: fix the credentials, certificates or "
                          "security.protocol", conn.failure)
                self._reports.append(conn.failure)
            self.fatal = self.fatal or conn.failure
        failures = self._failures.get(conn.node_id, 0) + 1
        self._failures[conn.node_id] = failures
        self._why[conn.address] = conn.reason or str(conn.failure or "closed")
        # A failed connect starts the outage's clock; a connection that closed after it was
        # ready (a broker's idle timeout, a restart) does not, until reconnecting fails too.
        if (not conn.was_ready and self.unreachable_since is None
                and not any(c.ready for c in self._conns.values())):
            self.unreachable_since = now
        if conn.node_id >= 0:  # a broker lost or unreachable: its partitions may have moved
            self.metadata.request_update()
        self._not_before[conn.node_id] = now + self._reconnect.delay(failures)
        # Once per streak: the retries go on quietly (and an authentication failure said more).
        if not conn.was_ready and isinstance(conn.failure, KafkaConnectionError):
            self.connect_failure = conn.failure
        if failures == 1 and not conn.was_ready and self.fatal is None:
            host, port = conn.address
            log.warning("cannot connect to %s:%s (%s); retrying with backoff",
                        host, port, conn.reason or conn.failure or "closed during setup")

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _on_metadata(self, answer: Answer) -> None:
        if answer.error is not None:
            self.metadata.on_failure()
        else:
            self.metadata.on_response(answer.response, self._clock())
            self._remember()
            self._warn_unknown_topics(answer.response)

    def _warn_unknown_topics(self, response: Any) -> None:
        """WARNING once per topic the cluster says does not exist (a subscription to it waits
        silently otherwise); again if it comes back after it existed."""
        for topic in response.topics:
            if topic.error_code != _UNKNOWN_TOPIC:
                self._unknown_topics.discard(topic.name)
            elif topic.name not in self._unknown_topics:
                self._unknown_topics.add(topic.name)
                log.warning("topic %r does not exist (UNKNOWN_TOPIC_OR_PARTITION); waiting for "
                            "it to be created", topic.name)


def _failed(host: str, port: int, why: str) -> str:
    """``host:port ECONNREFUSED (...)``: one address's failure, its name said once."""
    why = why.removeprefix("every address failed: ")
    return why if why.startswith(f"{host}:{port} ") else f"{host}:{port}: {why}"


def _split(server: str) -> tuple[str, int]:
    host, _, port = server.rpartition(":")
    return host.strip("[]"), int(port)  # "[::1]:9092" names an IPv6 host
