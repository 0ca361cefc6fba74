"""The cluster front's message surgery: what a request names, the answers a node gives in the
broker's place, and the cluster written into the answers that describe it.

Internal to :mod:`eosclient.testing.cluster_front`; pure functions over kafka-python's classes
and a `~eosclient.testing._front_map.ClusterMap`, no I/O.

Routing (`refusal`). A request that names partitions (`PARTITIONED`) must arrive at the node
that leads every one of them; a request that names a group or transactional id (`COORDINATED`)
at the node that coordinates it. Otherwise the node answers it itself, and the broker never
sees it: NOT_LEADER_OR_FOLLOWER (6) for *every* partition the request names, or
NOT_COORDINATOR (16) in every error field. A Kafka broker would answer only the partitions it
does not lead with the error and serve the others; refusing the whole request is simpler and
safe (nothing is written, a client retries the partitions it led after a Metadata refresh
anyway), and is the form documented. A refused Fetch keeps its top-level error NONE (that
field is about fetch sessions), and a refused Produce v10+ or Fetch v12+ says who leads each
partition (``current_leader``, and ``node_endpoints`` where the version has them: KIP-951), as
a Kafka broker does. Where each API carries its key:

==================== ===================================================================
Produce              ``topic_data[].name`` (v13+: ``topic_id``), ``partition_data[].index``
Fetch                ``topics[].topic`` (v13+: ``topic_id``), ``partitions[].partition``
ListOffsets          ``topics[].name``, ``partitions[].partition_index``
OffsetForLeaderEpoch ``topics[].topic``, ``partitions[].partition``
DeleteRecords        ``topics[].name``, ``partitions[].partition_index``
InitProducerId       ``transactional_id`` (transaction; none: any node, as for idempotence)
AddPartitionsToTxn   ``v3_and_below_transactional_id``; v4+ ``transactions[].transactional_id``
AddOffsetsToTxn      ``transactional_id`` (transaction: its ``group_id`` is the next request's)
EndTxn               ``transactional_id``
TxnOffsetCommit      ``group_id`` (the group coordinator's side of the transaction)
JoinGroup            ``group_id`` (and so SyncGroup, Heartbeat, LeaveGroup, OffsetCommit)
OffsetFetch          ``group_id``; v8+ ``groups[].group_id``
DescribeGroups       ``groups`` (a list of ids)
==================== ===================================================================

A topic named by id (Fetch and Produce v13+) is looked up among the ids Metadata answers have
given; one never seen is forwarded (the broker answers UNKNOWN_TOPIC_ID if it is unknown
there too).

Presenting (`present`). Metadata answers list the N nodes as the brokers and the map's leader
and leader epoch for each partition, with every node as replica and in-sync; DescribeCluster
and DescribeTopicPartitions say the same. FindCoordinator answers (v0-3: one key; v4+: the
``coordinators`` list) name the map's node for each key. ApiVersions answers cap each API the
front reads at the newest version kafka-python can decode, so every request a node must route
is one it can read. Errors the broker answered are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple

from eosclient.errors import ApiKey, ProtocolError
from eosclient.testing._front_map import KEY_TYPES, ClusterMap, CoordinatorKind
from eosclient.testing._proxy_link import SeenRequest
from eosclient.testing._proxy_rules import (
    DELETE_RECORDS,
    DESCRIBE_CLUSTER,
    DESCRIBE_TOPIC_PARTITIONS,
    OFFSET_FOR_LEADER_EPOCH,
    Codec,
    encode_response,
    error_response,
    known_api,
)

NOT_LEADER_OR_FOLLOWER: Final = 6
NOT_COORDINATOR: Final = 16

# api key -> (topics array, topic name field, partitions array, partition field)
PARTITIONED: Final[dict[int, tuple[str, str, str, str]]] = {
    ApiKey.PRODUCE: ("topic_data", "name", "partition_data", "index"),
    ApiKey.FETCH: ("topics", "topic", "partitions", "partition"),
    ApiKey.LIST_OFFSETS: ("topics", "name", "partitions", "partition_index"),
    OFFSET_FOR_LEADER_EPOCH: ("topics", "topic", "partitions", "partition"),
    DELETE_RECORDS: ("topics", "name", "partitions", "partition_index"),
}


def _field(name: str) -> Callable[[Any], list[str]]:
    return lambda request: [getattr(request, name)]


def _transactional_id(request: Any) -> list[str]:
    tid = request.transactional_id
    return [] if tid is None else [tid]  # an idempotent producer's: any node answers


def _txn_partitions(request: Any) -> list[str]:
    if request.version <= 3:
        return [request.v3_and_below_transactional_id]
    return [t.transactional_id for t in request.transactions]


def _offset_fetch(request: Any) -> list[str]:
    return [request.group_id] if request.version <= 7 else [g.group_id for g in request.groups]


# api key -> (coordinator kind, the keys a request names)
COORDINATED: Final[dict[int, tuple[CoordinatorKind, Callable[[Any], list[str]]]]] = {
    ApiKey.INIT_PRODUCER_ID: ("transaction", _transactional_id),
    ApiKey.ADD_PARTITIONS_TO_TXN: ("transaction", _txn_partitions),
    ApiKey.ADD_OFFSETS_TO_TXN: ("transaction", _field("transactional_id")),
    ApiKey.END_TXN: ("transaction", _field("transactional_id")),
    ApiKey.TXN_OFFSET_COMMIT: ("group", _field("group_id")),
    ApiKey.JOIN_GROUP: ("group", _field("group_id")),
    ApiKey.SYNC_GROUP: ("group", _field("group_id")),
    ApiKey.HEARTBEAT: ("group", _field("group_id")),
    ApiKey.LEAVE_GROUP: ("group", _field("group_id")),
    ApiKey.OFFSET_COMMIT: ("group", _field("group_id")),
    ApiKey.OFFSET_FETCH: ("group", _offset_fetch),
    ApiKey.DESCRIBE_GROUPS: ("group", lambda request: list(request.groups)),
}

PRESENTED: Final = frozenset({
    ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.API_VERSIONS, DESCRIBE_CLUSTER,
    DESCRIBE_TOPIC_PARTITIONS,
})
_READ: Final = frozenset(PARTITIONED) | frozenset(COORDINATED) | PRESENTED


# --- routing ----------------------------------------------------------------------------------


class Refusal(NamedTuple):
    """A node's own answer to a request it may not serve."""

    code: int  # NOT_LEADER_OR_FOLLOWER or NOT_COORDINATOR
    frame: bytes  # the whole answer, size included


def refusal(cluster: ClusterMap, node: int, seen: SeenRequest, body: bytes) -> Refusal | None:
    """How `node` refuses the request in `body`, or None if it forwards it.

    Raises:
        ProtocolError: a routed API at a version the front cannot read (its ApiVersions
            answers never offer one: a client that sends it anyway is cut).
    """
    api_key, version, correlation_id = seen
    if api_key not in PARTITIONED and api_key not in COORDINATED:
        return None
    codec = known_api(api_key)
    if codec is None or version > codec.request.max_version:
        raise ProtocolError(f"the cluster front cannot read {seen}, so cannot route it")
    request = codec.request.decode(body, version=version, header=True)
    if api_key in PARTITIONED:
        named = _partitions(cluster, api_key, request)
        if all(cluster.leader(topic, p).node == node for topic, p in named):
            return None
        code = NOT_LEADER_OR_FOLLOWER
    else:
        kind, keys = COORDINATED[api_key]
        if all(cluster.coordinator(kind, key) == node for key in keys(request)):
            return None
        code = NOT_COORDINATOR
    response = error_response(codec, version, body, code)
    if api_key == ApiKey.FETCH and version >= 7:
        response.error_code = 0  # the session's error, not the partitions'
    _current_leaders(cluster, codec, version, response)
    return Refusal(code, encode_response(codec, response, version, correlation_id))


def _partitions(cluster: ClusterMap, api_key: int, request: Any) -> Iterable[tuple[str, int]]:
    """(topic, partition) of every partition the request names whose topic is known."""
    topics, name, partitions, index = PARTITIONED[api_key]
    for topic in getattr(request, topics) or ():
        known = _name(cluster, getattr(topic, name, None), getattr(topic, "topic_id", None))
        if known is not None:
            for partition in getattr(topic, partitions) or ():
                yield known, getattr(partition, index)


def _name(cluster: ClusterMap, name: str | None, topic_id: Any) -> str | None:
    if name:
        return name
    return None if topic_id is None else cluster.topic_name(str(topic_id))


def _current_leaders(cluster: ClusterMap, codec: Codec, version: int, response: Any) -> None:
    """KIP-951: a NOT_LEADER answer to Produce v10+ and Fetch v12+ names each partition's
    leader, and from Produce v10 and Fetch v16 where the nodes are."""
    if codec.key == ApiKey.PRODUCE and version >= 10:
        parts, index, name, endpoints = "partition_responses", "index", "name", True
    elif codec.key == ApiKey.FETCH and version >= 12:
        parts, index, name, endpoints = "partitions", "partition_index", "topic", version >= 16
    else:
        return
    schema = codec.response.fields["responses"].fields[parts].fields["current_leader"]
    for topic in response.responses:
        known = _name(cluster, getattr(topic, name), getattr(topic, "topic_id", None))
        for partition in getattr(topic, parts):
            if known is not None:
                leader = cluster.leader(known, getattr(partition, index))
                partition.current_leader = schema.data_class(
                    leader_id=leader.node, leader_epoch=leader.epoch)
    if endpoints:
        entry = codec.response.fields["node_endpoints"]
        response.node_endpoints = [
            _new(entry, node_id=node, host=host, port=port, rack=None)
            for node, (host, port) in _addresses(cluster)
        ]


# --- presenting -------------------------------------------------------------------------------


def present(cluster: ClusterMap, seen: SeenRequest, request: bytes, response: Any) -> None:
    """Write the front's cluster into a decoded answer of an API in `PRESENTED`."""
    api_key = seen.api_key
    if api_key == ApiKey.METADATA:
        response.brokers = [
            _new(response.fields["brokers"], node_id=node, host=host, port=port, rack=None)
            for node, (host, port) in _addresses(cluster)
        ]
        response.controller_id = cluster.controller
        _leaders(cluster, response.topics or ())
    elif api_key == DESCRIBE_TOPIC_PARTITIONS:
        _leaders(cluster, response.topics or ())
    elif api_key == DESCRIBE_CLUSTER:
        response.brokers = [
            _new(response.fields["brokers"], broker_id=node, host=host, port=port, rack=None,
                 is_fenced=False)
            for node, (host, port) in _addresses(cluster)
        ]
        response.controller_id = cluster.controller
    elif api_key == ApiKey.FIND_COORDINATOR:
        _coordinators(cluster, seen, request, response)
    elif api_key == ApiKey.API_VERSIONS:
        for entry in response.api_keys:
            codec = known_api(entry.api_key) if entry.api_key in _READ else None
            if codec is not None:
                entry.max_version = min(entry.max_version, codec.request.max_version)


def _leaders(cluster: ClusterMap, topics: Iterable[Any]) -> None:
    nodes = list(cluster.nodes)
    for topic in topics:
        if topic.name is None:
            continue
        if topic.topic_id is not None:
            cluster.learn_topic_id(str(topic.topic_id), topic.name)
        for partition in topic.partitions or ():
            leader = cluster.leader(topic.name, partition.partition_index)
            ok = partition.error_code == 0
            partition.leader_id = leader.node if ok else -1
            partition.leader_epoch = leader.epoch if ok else -1
            partition.replica_nodes = list(nodes)
            partition.isr_nodes = list(nodes)
            partition.offline_replicas = []


def _coordinators(cluster: ClusterMap, seen: SeenRequest, body: bytes, response: Any) -> None:
    codec = known_api(seen.api_key)
    assert codec is not None
    request = codec.request.decode(body, version=seen.api_version, header=True)
    kind = KEY_TYPES.get(request.key_type if seen.api_version >= 1 else 0)
    if kind is None:  # a share group's (v6), say: not a coordinator the front moves
        return
    if seen.api_version <= 3:
        entries: list[tuple[Any, str]] = [(response, request.key)] if response.error_code == 0 \
            else []
    else:
        entries = [(c, c.key) for c in response.coordinators if c.error_code == 0]
    for entry, key in entries:
        node = cluster.coordinator(kind, key)
        entry.node_id = node
        entry.host, entry.port = cluster.address(node)


def _addresses(cluster: ClusterMap) -> list[tuple[int, tuple[str, int]]]:
    return [(node, cluster.address(node)) for node in cluster.nodes]


def _new(array: Any, /, **values: Any) -> Any:
    """One element of the struct array field `array`, with the values its schema has."""
    return array.data_class(**{k: v for k, v in values.items() if k in array.fields})
