"""The cluster a `~eosclient.testing.cluster_front.ClusterFront` presents: where its nodes listen,
which node leads each partition, at which leader epoch, and which node coordinates each group
and transactional id.

Internal; the front's public methods change it, its nodes read it for every request and every
Metadata or FindCoordinator answer. No I/O: a lock, and dictionaries of what has moved.

Defaults, for whatever has not moved: partition p of any topic is led by node ``p % N + 1`` at
leader epoch 0; a group or transactional id is coordinated by node ``crc32(key) % N + 1`` (a
hash that is the same in every process, unlike Python's ``hash``). Each move of a partition
bumps its leader epoch by one, even a move to the node that already leads it (as a re-election
does in Kafka), so a KIP-320 client can tell a newer answer from an older one.
"""

from __future__ import annotations

import threading
import zlib
from typing import Final, Literal, NamedTuple, get_args

CoordinatorKind = Literal["transaction", "group"]

#: FindCoordinator's key_type (KIP-98): 0 a group, 1 a transactional id.
KEY_TYPES: Final[dict[int, CoordinatorKind]] = {0: "group", 1: "transaction"}


class Leader(NamedTuple):
    """Who leads a partition, and since which leader epoch."""

    node: int
    epoch: int


class ClusterMap:
    """Leaders and coordinators of a front's N nodes, safe to read and change from any thread.

    Args:
        nodes: how many nodes (ids 1..N).
        controller: the node Metadata names as the controller.
    """

    def __init__(self, nodes: int, controller: int = 1) -> None:
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, not {nodes}")
        self.nodes: Final = tuple(range(1, nodes + 1))
        self.controller: Final = self.check_node(controller)
        self._lock = threading.Lock()
        self._leaders: dict[tuple[str, int], Leader] = {}
        self._coordinators: dict[tuple[CoordinatorKind, str], int] = {}
        self._topic_names: dict[str, str] = {}  # topic id (as str) -> name, from Metadata
        self._addresses: dict[int, tuple[str, int]] = {}

    def place(self, node: int, host: str, port: int) -> None:
        """Note where `node` listens."""
        with self._lock:
            self._addresses[self.check_node(node)] = (host, port)

    def address(self, node: int) -> tuple[str, int]:
        """Where `node` listens (host, port).

        Raises:
            KeyError: it has not been placed (the front has not started).
        """
        with self._lock:
            return self._addresses[node]

    def check_node(self, node: int) -> int:
        """Return `node` if it is one of the nodes.

        Raises:
            ValueError: it is not.
        """
        if node not in self.nodes:
            raise ValueError(f"no node {node}: the nodes are 1..{len(self.nodes)}")
        return node

    def leader(self, topic: str, partition: int) -> Leader:
        """The leader of a partition and its epoch."""
        with self._lock:
            return self._leaders.get((topic, partition)) or self._default_leader(partition)

    def move_leader(self, topic: str, partition: int, node: int) -> Leader:
        """Make `node` the partition's leader at the next epoch; return the new leader."""
        self.check_node(node)
        if partition < 0:
            raise ValueError(f"partition must be >= 0, not {partition}")
        with self._lock:
            old = self._leaders.get((topic, partition)) or self._default_leader(partition)
            new = self._leaders[topic, partition] = Leader(node, old.epoch + 1)
        return new

    def coordinator(self, kind: CoordinatorKind, key: str) -> int:
        """The node that coordinates a group or a transactional id."""
        with self._lock:
            node = self._coordinators.get((kind, key))
        return node if node is not None else self.nodes[zlib.crc32(key.encode()) % len(self.nodes)]

    def move_coordinator(self, kind: CoordinatorKind, key: str, node: int) -> None:
        """Make `node` the coordinator of a group or a transactional id."""
        if kind not in get_args(CoordinatorKind):
            raise ValueError(f"kind must be 'transaction' or 'group', not {kind!r}")
        self.check_node(node)
        with self._lock:
            self._coordinators[kind, key] = node

    def learn_topic_id(self, topic_id: str, name: str) -> None:
        """Note a topic's id, as a Metadata answer gave it (Fetch v13+ names topics by id)."""
        with self._lock:
            self._topic_names[topic_id] = name

    def topic_name(self, topic_id: str) -> str | None:
        """The name of the topic with this id, if an answer has named it."""
        with self._lock:
            return self._topic_names.get(topic_id)

    def _default_leader(self, partition: int) -> Leader:
        return Leader(self.nodes[partition % len(self.nodes)], 0)
