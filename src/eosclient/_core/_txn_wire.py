"""The transaction coordinator conversation's requests and responses, as kafka-python objects.

Private to :mod:`eosclient._core.txn`. Requests are built without a version: the I/O layer
negotiates one per broker, and kafka-python encodes only the fields that version has. Fields are
set so that every version in ``eosclient._protocol.apis`` encodes correctly:

* FindCoordinator gets both ``key`` (v0-v3) and ``coordinator_keys`` (v4, KIP-699); its response
  is read from ``coordinators`` when present, else from the top-level fields.
* AddPartitionsToTxn uses the ``v3_and_below_*`` fields (the client caps the API at v3; v4+ is the
  broker-to-broker batched form of KIP-890).
* InitProducerId's KIP-360 fields (``producer_id``, ``producer_epoch``) exist from v3 on; at v0-v2
  kafka-python drops them, so the bump form silently becomes the plain form, which is exactly the
  fallback an old broker needs.

Readers return error codes only; classifying them is ``eosclient.errors``' job, never this one's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from eosclient._core.types import NO_IDENTITY, ProducerIdentity, TopicPartition
from eosclient._protocol.apis import APIS
from eosclient.errors import ApiKey

__all__ = ["GroupMetadata", "Node"]

_TRANSACTION_KEY = 1  # FindCoordinator key_type: 0 = group, 1 = transaction
_GROUP_KEY = 0


class Node(NamedTuple):
    """A broker, as FindCoordinator names it."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """The consumer's group membership that TxnOffsetCommit carries (KIP-447).

    With the defaults (a bare group id) the coordinator cannot fence a zombie consumer; pass the
    consumer's generation and member id to get that protection.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


def find_coordinator(key: str, *, group: bool) -> Any:
    """FindCoordinator for a transactional id (``group=False``) or a group id."""
    key_type = _GROUP_KEY if group else _TRANSACTION_KEY
    return APIS[ApiKey.FIND_COORDINATOR].request(
        key=key, key_type=key_type, coordinator_keys=[key]
    )


def init_producer_id(
    transactional_id: str | None, timeout_ms: int, bump_from: ProducerIdentity = NO_IDENTITY
) -> Any:
    """InitProducerId; with ``bump_from`` set, the KIP-360 form that bumps that identity."""
    return APIS[ApiKey.INIT_PRODUCER_ID].request(
        transactional_id=transactional_id,
        transaction_timeout_ms=timeout_ms,
        producer_id=bump_from.producer_id,
        producer_epoch=bump_from.epoch,
    )


def add_partitions(
    transactional_id: str, identity: ProducerIdentity, partitions: Iterable[TopicPartition]
) -> Any:
    """One AddPartitionsToTxn (v0-v3 form) for every partition given."""
    api = APIS[ApiKey.ADD_PARTITIONS_TO_TXN]
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    topics = [
        api.request.AddPartitionsToTxnTopic(name=topic, partitions=numbers)
        for topic, numbers in by_topic.items()
    ]
    return api.request(
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=identity.producer_id,
        v3_and_below_producer_epoch=identity.epoch,
        v3_and_below_topics=topics,
    )


def add_offsets(transactional_id: str, identity: ProducerIdentity, group_id: str) -> Any:
    """AddOffsetsToTxn: put the group's offsets partition into the transaction."""
    return APIS[ApiKey.ADD_OFFSETS_TO_TXN].request(
        transactional_id=transactional_id,
        producer_id=identity.producer_id,
        producer_epoch=identity.epoch,
        group_id=group_id,
    )


def txn_offset_commit(
    transactional_id: str,
    identity: ProducerIdentity,
    group: GroupMetadata,
    offsets: Mapping[TopicPartition, int],
) -> Any:
    """TxnOffsetCommit with the group's generation, member id and instance id (KIP-447)."""
    request = APIS[ApiKey.TXN_OFFSET_COMMIT].request
    topic_cls = request.TxnOffsetCommitRequestTopic
    partition_cls = topic_cls.TxnOffsetCommitRequestPartition
    by_topic: dict[str, list[Any]] = {}
    for tp, offset in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            partition_cls(partition_index=tp.partition, committed_offset=offset,
                          committed_leader_epoch=-1, committed_metadata="")
        )
    return request(
        transactional_id=transactional_id,
        group_id=group.group_id,
        producer_id=identity.producer_id,
        producer_epoch=identity.epoch,
        generation_id=group.generation_id,
        member_id=group.member_id,
        group_instance_id=group.group_instance_id,
        topics=[topic_cls(name=name, partitions=parts) for name, parts in by_topic.items()],
    )


def end_txn(transactional_id: str, identity: ProducerIdentity, *, committed: bool) -> Any:
    """EndTxn: commit or abort the open transaction."""
    return APIS[ApiKey.END_TXN].request(
        transactional_id=transactional_id,
        producer_id=identity.producer_id,
        producer_epoch=identity.epoch,
        committed=committed,
    )


def coordinator_of(response: Any, key: str) -> tuple[int, str | None, Node]:
    """The (error code, error message, node) a FindCoordinator response gives for ``key``."""
    for entry in getattr(response, "coordinators", None) or ():
        if entry.key == key:
            node = Node(entry.node_id, entry.host, entry.port)
            return entry.error_code, entry.error_message, node
    node = Node(response.node_id, response.host, response.port)
    return response.error_code, getattr(response, "error_message", None), node


def partition_codes(response: Any) -> dict[TopicPartition, int]:
    """Every partition's error code in an AddPartitionsToTxn response (v0-v3 layout)."""
    return {
        TopicPartition(topic.name, result.partition_index): result.partition_error_code
        for topic in response.results_by_topic_v3_and_below
        for result in topic.results_by_partition
    }


def offset_commit_codes(response: Any) -> list[int]:
    """Every partition's error code in a TxnOffsetCommit response."""
    return [part.error_code for topic in response.topics for part in topic.partitions]
