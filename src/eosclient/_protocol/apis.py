"""The Kafka APIs eosclient speaks, and the version range it speaks of each.

Each row names kafka-python's generated request and response classes and the range of versions
this client uses. The upper bound is kafka-python's newest version unless a row caps it lower; every
cap says why. Negotiation (`versions.py`) then meets each broker's advertised range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafka.protocol import admin as _admin
from kafka.protocol import consumer as _consumer
from kafka.protocol import metadata as _metadata
from kafka.protocol import producer as _producer
from kafka.protocol import sasl as _sasl

from eosclient.errors import ApiKey


@dataclass(frozen=True, slots=True)
class Api:
    """One Kafka API as this client uses it."""

    key: ApiKey
    request: Any
    response: Any
    min_version: int
    max_version: int
    why: str = ""


def _row(key: ApiKey, module: Any, name: str, min_version: int = 0, cap: int | None = None,
         *, why: str = "") -> Api:
    request = getattr(module, f"{name}Request")
    response = getattr(module, f"{name}Response")
    assert key == request.API_KEY, (name, key)
    newest = request.max_version if cap is None else min(cap, request.max_version)
    return Api(key, request, response, min_version, newest, why)


_TV2 = "the next version belongs to KIP-890 transaction version 2, which this client does not use"

APIS: dict[ApiKey, Api] = {
    api.key: api
    for api in (
        _row(ApiKey.PRODUCE, _producer, "Produce", 3, 11,
             why="v3 is the first with record batch v2 (transactions); " + _TV2),
        _row(ApiKey.FETCH, _consumer, "Fetch", 4, 12,
             why="v4 adds isolation_level and aborted_transactions; v13 names topics by id"),
        _row(ApiKey.LIST_OFFSETS, _consumer, "ListOffsets", 2, 8,
             why="v2 adds isolation_level (latest = LSO under read_committed)"),
        _row(ApiKey.METADATA, _metadata, "Metadata"),
        _row(ApiKey.OFFSET_COMMIT, _consumer, "OffsetCommit", 0, 8,
             why="v9 belongs to the KIP-848 consumer group protocol"),
        _row(ApiKey.OFFSET_FETCH, _consumer, "OffsetFetch", 0, 8,
             why="v7 adds require_stable (KIP-447); v9 belongs to KIP-848"),
        _row(ApiKey.FIND_COORDINATOR, _metadata, "FindCoordinator", 0, 4,
             why="v5 and v6 add KIP-890 and share-group coordinators"),
        _row(ApiKey.JOIN_GROUP, _consumer, "JoinGroup"),
        _row(ApiKey.HEARTBEAT, _consumer, "Heartbeat"),
        _row(ApiKey.LEAVE_GROUP, _consumer, "LeaveGroup"),
        _row(ApiKey.SYNC_GROUP, _consumer, "SyncGroup"),
        _row(ApiKey.SASL_HANDSHAKE, _sasl, "SaslHandshake", 1, 1,
             why="v0 sends the SASL bytes unframed; v1 wraps them in SaslAuthenticate"),
        _row(ApiKey.SASL_AUTHENTICATE, _sasl, "SaslAuthenticate",
             why="v1 adds session_lifetime_ms (KIP-368)"),
        _row(ApiKey.API_VERSIONS, _metadata, "ApiVersions", 0, 3,
             why="v3 is the newest most brokers answer; v4 adds nothing a client needs"),
        _row(ApiKey.INIT_PRODUCER_ID, _producer, "InitProducerId", 0, 5,
             why="v3 adds the KIP-360 bump form; v6 is KIP-939 two-phase commit"),
        _row(ApiKey.ADD_PARTITIONS_TO_TXN, _producer, "AddPartitionsToTxn", 0, 3,
             why="v4+ is the broker-to-broker batched form (KIP-890); Tansu advertises it "
             "and drops the connection"),
        _row(ApiKey.ADD_OFFSETS_TO_TXN, _producer, "AddOffsetsToTxn", 0, 3, why=_TV2),
        _row(ApiKey.END_TXN, _producer, "EndTxn", 0, 4, why=_TV2),
        _row(ApiKey.TXN_OFFSET_COMMIT, _producer, "TxnOffsetCommit", 0, 4, why=_TV2),
        _row(ApiKey.DESCRIBE_GROUPS, _admin, "DescribeGroups"),
        _row(ApiKey.LIST_GROUPS, _admin, "ListGroups"),
        _row(ApiKey.CREATE_TOPICS, _admin, "CreateTopics"),
        _row(ApiKey.DELETE_TOPICS, _admin, "DeleteTopics"),
        _row(ApiKey.DESCRIBE_PRODUCERS, _admin, "DescribeProducers"),
        _row(ApiKey.DESCRIBE_TRANSACTIONS, _admin, "DescribeTransactions"),
        _row(ApiKey.LIST_TRANSACTIONS, _admin, "ListTransactions"),
        _row(ApiKey.WRITE_TXN_MARKERS, _producer, "WriteTxnMarkers",
             why="sent by the admin to abort a hanging transaction (KIP-664)"),
    )
}


def api_for(key: int) -> Api:
    """Return the row for `key`.

    Raises:
        KeyError: eosclient does not speak that API.
    """
    return APIS[ApiKey(key)]
