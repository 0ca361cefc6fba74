"""A three-node cluster, as clients see it, in front of one real broker.

Theory of operation
-------------------
Every broker that runs here (noida-db, Tansu) is one node, and librdkafka's mock cluster, which
has several, is not a semantic broker. A `ClusterFront` stands between the two: N listeners on
loopback ports (nodes 1..N), each a proxy (:mod:`eosclient.testing.proxy`'s links) to the one
upstream broker, and a map of which node leads each partition and coordinates each group and
transactional id. Clients see a cluster:

* **Metadata** answers (and DescribeCluster, DescribeTopicPartitions) list the N nodes as the
  brokers, node 1 (``controller``) as the controller, and each partition led by the map's node
  at the map's leader epoch, with every node a replica and in sync. By default partition p of
  any topic is led by node ``p % N + 1``, at epoch 0.
* **FindCoordinator** answers (the v0-3 one-key form and the v4+ ``coordinators`` list) name
  the map's node for each key; by default ``crc32(key) % N + 1``.
* **Routing** is enforced as a cluster would: Produce, Fetch, ListOffsets,
  OffsetForLeaderEpoch and DeleteRecords must name only partitions the node leads, and the
  coordinator APIs (InitProducerId with a transactional id, AddPartitionsToTxn,
  AddOffsetsToTxn, EndTxn, TxnOffsetCommit, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  OffsetCommit, OffsetFetch, DescribeGroups) must come to the key's coordinator. Otherwise the
  node answers in the broker's place, which never sees the request: NOT_LEADER_OR_FOLLOWER
  (6) for *every* partition of the request (a Kafka broker would serve the partitions it does
  lead; the whole request refused is simpler, and nothing of it is written), or
  NOT_COORDINATOR (16). Everything else is forwarded. `_front_wire` says which field of each
  API carries the key.

Moves change the map at once: `move_leader` (the leader epoch goes up by one) and
`move_coordinator`; the old node refuses from its next request on, and the next Metadata or
FindCoordinator answer names the new one. `set_node_down` closes a node's listening socket
(new connections are refused, as by a stopped broker) and cuts its connections; requests
already forwarded still reach the broker, as they would a broker that crashed after reading
them. `set_node_up` listens on the same port again. A node that is down keeps leading and
coordinating what it did until something is moved (no election). `set_rtt` adds a round-trip
time to every exchange with one node. All of these may be called from any thread.

What it cannot show: there is one log per partition and one group and transaction state, the
broker's, whichever node a request came through, so there is no replication, no failover of
uncommitted data, no divergent logs, and no coordinator that loads state (a moved coordinator
knows everything at once). A node that is "down" is only a closed port. The front does not
check ``current_leader_epoch`` (neither broker does either), and a fetch session (KIP-227)
lives on the broker, shared by every node. Produce and Fetch answers from the broker are
passed through: only Metadata-like and FindCoordinator answers are rewritten.

Where the parts live: the map in `_front_map`, the message surgery (what a request names, the
answers a node gives, the rewritten answers) in `_front_wire`, the loop and listeners in
`_proxy_serve`, each connection in `_proxy_link`.

Example::

    with ClusterFront(broker.host, broker.port) as front:
        producer = TransactionalProducer(front.bootstrap_servers, transactional_id="t")
        ...
        front.move_leader("orders", 0, 2)
        front.move_coordinator("transaction", "t", 3)
        front.set_node_down(1)
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Any, Final, NamedTuple, Self

from eosclient.testing._front_map import ClusterMap, CoordinatorKind, Leader
from eosclient.testing._front_wire import PRESENTED, present, refusal
from eosclient.testing._proxy_link import SeenRequest, Timing
from eosclient.testing._proxy_rules import Rule, RuleBook
from eosclient.testing._proxy_serve import Listener, LoopThread
from eosclient.testing.security import SaslUsers

__all__ = ["ClusterFront", "CoordinatorKind", "FrontRequest", "Leader"]

log = logging.getLogger("eosclient.testing.cluster_front")

_NODES: Final = 3


class FrontRequest(NamedTuple):
    """One request a client sent to one node of the front."""

    node: int
    api_key: int
    api_version: int
    correlation_id: int
    refused: int | None  # the error code the node answered with itself; None: forwarded


class ClusterFront:
    """N nodes of a Kafka cluster, as clients see it, in front of one broker.

    Args:
        host: the broker's host.
        port: the broker's port.
        nodes: how many nodes (ids 1..N).
        listen_host: the address every node listens on (and Metadata names).
        controller: the node Metadata names as the controller.

    Usable as a context manager, which starts and closes it.

    Raises:
        ValueError: fewer than one node, or a controller that is not one of them.
    """

    def __init__(
        self,
        host: str,
        port: int,
        nodes: int = _NODES,
        *,
        listen_host: str = "127.0.0.1",
        controller: int = 1,
    ) -> None:
        self._upstream = (host, port)
        self._map = ClusterMap(nodes, controller)
        self._rules = RuleBook()
        self._lock = threading.Lock()
        self._seen: list[FrontRequest] = []
        self._thread = LoopThread("ClusterFront")
        self._nodes = {node: _Node(self, node, listen_host) for node in self._map.nodes}

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> Self:
        """Listen on every node (free ports); return self. Idempotent while running.

        Raises:
            RuntimeError: the front was closed.
            OSError: a listening address could not be bound.
        """
        if self._thread.start(self._open_all, self._close_all):
            for node in self._nodes.values():
                self._map.place(node.id, node.host, node.port)
            ports = "-".join(str(node.port) for node in self._nodes.values())
            self._thread.rename(f"eosclient-cluster-front-{ports}")
            log.debug("cluster front %s -> %s:%d started", self.bootstrap_servers,
                      *self._upstream)
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
        upstream = f"{self._upstream[0]}:{self._upstream[1]}"
        return f"<ClusterFront {len(self._nodes)} nodes -> {upstream} {self._thread.state}>"

    # --- addresses --------------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[int, ...]:
        """The node ids, 1..N."""
        return self._map.nodes

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of every node, comma-separated, for a client's ``bootstrap.servers``.

        Raises:
            RuntimeError: the front has not been started.
        """
        return ",".join(self._node(node).bootstrap_servers for node in self._map.nodes)

    def address(self, node: int) -> tuple[str, int]:
        """Where `node` listens (host, port), up or down.

        Raises:
            ValueError: no such node.
            RuntimeError: the front has not been started.
        """
        return self._node(node).host, self._node(node).port

    # --- the cluster ------------------------------------------------------------------------

    def leader(self, topic: str, partition: int) -> Leader:
        """Which node leads the partition, at which leader epoch."""
        return self._map.leader(topic, partition)

    def coordinator(self, kind: CoordinatorKind, key: str) -> int:
        """Which node coordinates a group (``"group"``) or transactional id (``"transaction"``)."""
        return self._map.coordinator(kind, key)

    def move_leader(self, topic: str, partition: int, node: int) -> Leader:
        """Make `node` the partition's leader at the next leader epoch; return the new leader.

        The old leader answers NOT_LEADER_OR_FOLLOWER from its next request on.

        Raises:
            ValueError: no such node, or a negative partition.
        """
        leader = self._map.move_leader(topic, partition, node)
        log.debug("cluster front: %s-%d led by node %d at epoch %d", topic, partition, *leader)
        return leader

    def move_coordinator(self, kind: CoordinatorKind, key: str, node: int) -> None:
        """Make `node` the coordinator of a group or transactional id.

        The old coordinator answers NOT_COORDINATOR from its next request on.

        Raises:
            ValueError: no such node, or a kind other than ``"transaction"`` and ``"group"``.
        """
        self._map.move_coordinator(kind, key, node)
        log.debug("cluster front: %s %r coordinated by node %d", kind, key, node)

    def set_node_down(self, node: int) -> int:
        """Stop `node` listening and cut its connections; return how many were cut.

        New connections to its port are refused until `set_node_up`. Idempotent.

        Raises:
            ValueError: no such node.
            RuntimeError: the front is not running.
        """
        cut = self._thread.call(self._node(node).listener.close())
        log.debug("cluster front: node %d down (%d connections cut)", node, cut)
        return cut

    def set_node_up(self, node: int) -> None:
        """Listen on `node`'s port again. Idempotent.

        Raises:
            ValueError: no such node.
            RuntimeError: the front is not running.
            OSError: another process took the port while the node was down.
        """
        self._thread.call(self._node(node).listener.open())
        log.debug("cluster front: node %d up", node)

    def is_up(self, node: int) -> bool:
        """Whether `node` is listening."""
        return self._node(node).listener.listening

    def set_rtt(self, node: int, ms: float) -> None:
        """Add `ms` milliseconds of round-trip time to every exchange with `node` (half each
        way, for new frames; 0 removes it).

        Raises:
            ValueError: no such node, or a negative time.
        """
        if ms < 0:
            raise ValueError(f"rtt must be >= 0 ms, not {ms}")
        self._node(node).latency = ms / 2000

    def cut_connections(self, node: int) -> int:
        """Close every connection of `node` now (it keeps listening); return how many.

        Raises:
            ValueError: no such node.
            RuntimeError: the front is not running.
        """
        return self._thread.call(self._node(node).listener.cut_all())

    def connections(self, node: int) -> int:
        """How many client connections `node` has."""
        return len(self._node(node).listener.links)

    # --- faults and observation -------------------------------------------------------------

    def add_rule(self, rule: Rule) -> Rule:
        """Apply a proxy `Rule` to requests that every node forwards from now on; return it.

        Requests a node refuses (routing) are not counted.
        """
        return self._rules.add(rule)

    def clear_rules(self) -> None:
        """Remove every rule."""
        self._rules.clear()

    def wait_fired(self, rule: Rule, timeout: float = 10.0, count: int = 1) -> bool:
        """Block until `rule` has fired `count` times; False if `timeout` passed first."""
        return self._rules.wait_fired(rule, timeout, count)

    @property
    def seen(self) -> list[FrontRequest]:
        """Every request received so far, on every node, in arrival order, and whether its node
        refused it."""
        with self._lock:
            return list(self._seen)

    def clear_seen(self) -> None:
        """Forget the requests in `seen`."""
        with self._lock:
            self._seen.clear()

    # --- the loop's side --------------------------------------------------------------------

    def _node(self, node: int) -> _Node:
        return self._nodes[self._map.check_node(node)]

    def _note(self, request: FrontRequest) -> None:
        with self._lock:
            self._seen.append(request)

    async def _open_all(self) -> None:
        for node in self._nodes.values():
            await node.listener.open()

    async def _close_all(self) -> None:
        for node in self._nodes.values():
            await node.listener.close()


class _Node:
    """One node of the front: a listener whose links route by the front's map (the links'
    `~eosclient.testing._proxy_link.Owner`)."""

    sasl: SaslUsers | None = None
    precise = False

    def __init__(self, front: ClusterFront, node: int, host: str) -> None:
        self._front = front
        self.id = node
        self.latency = 0.0
        self._rules = front._rules
        self._presents: frozenset[int] = PRESENTED
        self.listener = Listener(self, front._upstream, host)

    @property
    def host(self) -> str:
        return self.listener.host

    @property
    def port(self) -> int:
        if not self.listener.port:
            raise RuntimeError("the cluster front has no ports until start()")
        return self.listener.port

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def _record(self, seen: SeenRequest) -> None:
        pass  # noted by _route, with what became of it

    def _time(self, timing: Timing) -> None:
        pass

    def _route(self, seen: SeenRequest, body: bytes) -> bytes | None:
        refused = refusal(self._front._map, self.id, seen, body)
        self._front._note(FrontRequest(self.id, *seen, None if refused is None else refused.code))
        if refused is None:
            return None
        log.debug("cluster front: node %d refuses %r with %d", self.id, seen, refused.code)
        return refused.frame

    def _present(self, seen: SeenRequest, request: bytes, response: Any) -> None:
        present(self._front._map, seen, request, response)
