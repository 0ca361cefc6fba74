"""A Kafka-protocol-aware TCP proxy that injects faults between clients and one broker.

Theory of operation
-------------------
`KafkaProxy` listens on a loopback port and runs an asyncio loop in a daemon thread. Each client
connection it accepts gets a connection of its own to the upstream broker (a *link*). Both byte
streams are cut into Kafka frames (`FrameDecoder`), and every frame moves through four tasks::

    client --read_client--> [outbound] --write_broker--> broker
    client <--write_client-- [slots] <--read_broker---- broker

*read_client* reads each request's header (api key, version, correlation id), records it in
`seen`, asks the rules which one fires on it, and queues it for the broker with a release time:
its arrival, plus `latency`, plus any `Delay`. Each request also takes the next *slot*: a future
for what the client gets back. Slots are delivered strictly in request order, so a response
answered early (an `ErrorResponse`) or never (a `DropResponse`) cannot reorder or stall the
responses around it.

*write_broker* releases requests in order at their release times (so a burst stays a burst:
latency shifts frames, it does not space them), answers `ErrorResponse` requests itself, and cuts
for `Cut("before")`. *read_broker* matches each response to the oldest forwarded request (Kafka
answers in order; a mismatch is a protocol error), rewrites it if needed and fills its slot with
a release time of arrival + `latency`. *write_client* waits for each slot in turn and writes it.
Produce with acks=0 is the one request Kafka does not answer; its slot is filled with nothing
once the broker answers a later request, unless the broker answers it after all (noida-db and
Tansu do), and then that answer is passed on like any other: the proxy hides nothing the broker
sends.

Rewriting: Metadata and FindCoordinator responses name brokers by host and port; the proxy
decodes them with kafka-python's classes at the request's version, names its own listener
instead, and re-encodes them under the original correlation id, so clients keep talking through
the proxy. Every broker of a multi-broker upstream is mapped onto the one listener (whose
connections all go to the one upstream address), so only single-broker upstreams behave as a
real cluster would. Other addresses are left alone (Produce/Fetch v10+/v16+ ``node_endpoints``,
sent with NOT_LEADER errors, which a single broker never returns). Unknown tagged fields of a
rewritten response are not kept (kafka-python does not re-encode them).

Security (:mod:`eosclient.testing.security`): with ``ssl_context`` the listener speaks TLS
(the upstream stays plaintext), and with ``sasl`` every connection must log in first: the proxy
answers SaslHandshake and SaslAuthenticate itself, adds them to the broker's ApiVersions, and
cuts a connection that sends anything else before its login (as Kafka does). Rules and faults
apply as before, to the requests that pass.

The loop's thread and the listening socket are `_proxy_serve`'s, shared with
:mod:`eosclient.testing.cluster_front` (several listeners on one loop); each connection's four
tasks are `_proxy_link`'s, and the rules and message surgery `_proxy_rules`'s.

Errors inside the loop (a broken frame, an undecodable response, a bug) are logged on the
``eosclient.testing.proxy`` logger and close the connection concerned, so a test sees a cut
connection rather than a silent hang.

Example::

    with KafkaProxy(broker.host, broker.port) as proxy:
        rule = proxy.add_rule(Rule(api_key=ApiKey.END_TXN, action=DropResponse()))
        producer = Producer({"bootstrap.servers": proxy.bootstrap_servers, ...})
"""

from __future__ import annotations

import logging
import ssl
import threading
from types import TracebackType
from typing import Any, Final, Self

from eosclient.errors import ApiKey
from eosclient.testing._proxy_link import SeenRequest, Timing
from eosclient.testing._proxy_rules import (
    ERROR_RESPONSE_APIS,
    Action,
    Cut,
    Delay,
    DropResponse,
    ErrorResponse,
    RewriteError,
    Rule,
    RuleBook,
    point_at,
)
from eosclient.testing._proxy_serve import Listener, LoopThread
from eosclient.testing.security import SaslUsers

__all__ = [
    "ERROR_RESPONSE_APIS",
    "Action",
    "Cut",
    "Delay",
    "DropResponse",
    "ErrorResponse",
    "KafkaProxy",
    "RewriteError",
    "Rule",
    "SeenRequest",
    "Timing",
]

log = logging.getLogger("eosclient.testing.proxy")

_ADDRESSED: Final = frozenset({ApiKey.METADATA, ApiKey.FIND_COORDINATOR})


class KafkaProxy:
    """A fault-injecting Kafka proxy in front of one broker.

    Args:
        upstream_host: the broker's host.
        upstream_port: the broker's port.
        listen_host: the address to listen on, also the host named in rewritten metadata.
        listen_port: the port to listen on; 0 picks a free one.
        latency: seconds added to every frame in each direction (a round trip costs twice this).
        precise: hold frames to within ~0.1 ms of their release time. The loop's timers wake up
            to a millisecond late (epoll counts whole milliseconds), ~1.3 ms per round trip in
            all; with ``precise`` the last 1.5 ms of each wait is a blocking sleep, which holds
            up the proxy's other connections meanwhile. For a proxy in a process of its own with
            few connections, timing round trips (the benchmarks).
        ssl_context: a server-side context: the listener speaks TLS (a TLS front).
        sasl: the users and mechanisms of a SASL login required on every connection.

    Usable as a context manager, which starts and closes it.
    """

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        latency: float = 0.0,
        precise: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslUsers | None = None,
    ) -> None:
        self._upstream = (upstream_host, upstream_port)
        self.sasl = sasl
        self.latency = latency
        self.precise = precise
        self._rules = RuleBook()
        self._presents: frozenset[int] = _ADDRESSED
        self._seen: list[SeenRequest] = []
        self._timings: list[Timing] = []
        self._lock = threading.Lock()
        self._port: int | None = None
        self._thread = LoopThread("KafkaProxy")
        self._listener = Listener(self, self._upstream, listen_host, listen_port, ssl_context)

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> Self:
        """Start listening; return self. Idempotent while running.

        Raises:
            RuntimeError: the proxy was closed.
            OSError: the listen address could not be bound.
        """
        if not self._thread.start(self._listener.open, self._listener.close):
            return self
        self._port = self._listener.port
        self._thread.rename(f"eosclient-proxy-{self._port}")
        log.debug("proxy %s -> %s:%d started", self.bootstrap_servers, *self._upstream)
        return self

    def close(self) -> None:
        """Stop listening, cut every connection and join the loop's thread. Idempotent."""
        self._thread.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        listen = self.bootstrap_servers if self._port is not None else "not started"
        upstream = f"{self._upstream[0]}:{self._upstream[1]}"
        return f"<KafkaProxy {listen} -> {upstream} {self._thread.state}>"

    # --- addresses --------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """The host the proxy listens on."""
        return self._listener.host

    @property
    def port(self) -> int:
        """The port the proxy listens on.

        Raises:
            RuntimeError: the proxy has not been started.
        """
        if self._port is None:
            raise RuntimeError("the proxy has no port until start()")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the proxy, for a client's ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    # --- faults -----------------------------------------------------------------------------

    @property
    def latency(self) -> float:
        """Seconds each frame is held in each direction; may be changed while running."""
        return self._latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"latency must be >= 0, not {seconds}")
        self._latency = float(seconds)

    def add_rule(self, rule: Rule) -> Rule:
        """Apply `rule` to requests arriving from now on; return it (to read `rule.fired`)."""
        return self._rules.add(rule)

    def clear_rules(self) -> None:
        """Remove every rule. Requests already received keep the action they were given."""
        self._rules.clear()

    def wait_fired(self, rule: Rule, timeout: float = 10.0, count: int = 1) -> bool:
        """Block until `rule` has fired `count` times; False if `timeout` passed first."""
        return self._rules.wait_fired(rule, timeout, count)

    def cut_all(self) -> int:
        """Close every live connection (both sides) now; return how many there were."""
        return self._thread.call(self._listener.cut_all())

    # --- observation ------------------------------------------------------------------------

    @property
    def seen(self) -> list[SeenRequest]:
        """A copy of every request received so far, in arrival order, over all connections."""
        with self._lock:
            return list(self._seen)

    def clear_seen(self) -> None:
        """Forget the requests recorded in `seen` and `timings`."""
        with self._lock:
            self._seen.clear()
            self._timings.clear()

    @property
    def timings(self) -> list[Timing]:
        """When each request received so far passed each point (`Timing`), in arrival order.

        The records are the proxy's own and are filled in while their requests are under way:
        read them once the client is done (a request still under way has None fields).
        """
        with self._lock:
            return list(self._timings)

    def take_timings(self) -> list[Timing]:
        """`timings`, then forget them (at once, so that no request falls between the two)."""
        with self._lock:
            taken, self._timings = self._timings, []
            return taken

    @property
    def connections(self) -> int:
        """How many client connections are live."""
        return len(self._listener.links)

    # --- the loop's side --------------------------------------------------------------------

    def _record(self, seen: SeenRequest) -> None:
        with self._lock:
            self._seen.append(seen)

    def _time(self, timing: Timing) -> None:
        with self._lock:
            self._timings.append(timing)

    def _route(self, seen: SeenRequest, body: bytes) -> bytes | None:
        return None  # every request goes to the broker (rules aside)

    def _present(self, seen: SeenRequest, request: bytes, response: Any) -> None:
        point_at(seen.api_key, response, self.host, self.port)
