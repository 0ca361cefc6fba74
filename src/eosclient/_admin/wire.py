"""The admin's requests, as kafka-python objects, and plain readers of their answers.

Private to the admin. As in :mod:`eosclient._consumer.protocol`, requests are built without a
version: the connection negotiates one per broker, and kafka-python encodes only the fields that
version has, so fields of every version eosclient speaks are set (DeleteTopics' ``topic_names``
for v0-v5 and ``topics`` for v6; OffsetFetch's top-level fields for v2-v7 and ``groups`` for
v8). Readers return plain values and error codes; classifying codes is
:mod:`eosclient.errors`' job.

The KIP-664 APIs (ListTransactions, DescribeTransactions, DescribeProducers) and
WriteTxnMarkers are kafka-python's generated classes too (kafka-python 3.0 has them all).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from eosclient._consumer.protocol import by_topic
from eosclient._core.types import TopicPartition
from eosclient._protocol.apis import APIS
from eosclient.errors import ApiKey

__all__ = [
    "GROUP",
    "TRANSACTION",
    "create_topic",
    "delete_topics",
    "describe_groups",
    "describe_producers",
    "describe_transactions",
    "find_coordinator",
    "init_producer_id",
    "list_groups",
    "list_transactions",
    "metadata",
    "offset_fetch_all",
    "write_abort_marker",
]

GROUP: Final = 0  # FindCoordinator key_type
TRANSACTION: Final = 1


def _request(key: ApiKey) -> Any:
    return APIS[key].request


def metadata(topics: Iterable[str] | None) -> Any:
    """Metadata for ``topics`` (None: every topic), never creating one."""
    cls = _request(ApiKey.METADATA)
    wanted = None if topics is None else [cls.MetadataRequestTopic(name=t) for t in topics]
    return cls(topics=wanted, allow_auto_topic_creation=False,
               include_cluster_authorized_operations=False,
               include_topic_authorized_operations=False)


def create_topic(name: str, partitions: int, replication_factor: int,
                 configs: Mapping[str, str], timeout_ms: int) -> Any:
    """CreateTopics for one topic."""
    cls = _request(ApiKey.CREATE_TOPICS)
    topic_cls = cls.CreatableTopic
    return cls(topics=[topic_cls(
        name=name, num_partitions=partitions, replication_factor=replication_factor,
        assignments=[], configs=[topic_cls.CreatableTopicConfig(name=k, value=v)
                                 for k, v in sorted(configs.items())])],
        timeout_ms=timeout_ms, validate_only=False)


def delete_topics(names: Iterable[str], timeout_ms: int) -> Any:
    """DeleteTopics by name."""
    cls = _request(ApiKey.DELETE_TOPICS)
    names = list(names)
    return cls(topic_names=names, topics=[cls.DeleteTopicState(name=n) for n in names],
               timeout_ms=timeout_ms)


def find_coordinator(key: str, key_type: int) -> Any:
    """FindCoordinator for a group (``GROUP``) or a transactional id (``TRANSACTION``)."""
    return _request(ApiKey.FIND_COORDINATOR)(key=key, key_type=key_type,
                                             coordinator_keys=[key])


def list_groups() -> Any:
    """ListGroups, unfiltered."""
    return _request(ApiKey.LIST_GROUPS)(states_filter=[], types_filter=[])


def describe_groups(group_ids: Iterable[str]) -> Any:
    """DescribeGroups."""
    return _request(ApiKey.DESCRIBE_GROUPS)(groups=list(group_ids),
                                            include_authorized_operations=False)


def offset_fetch_all(group_id: str) -> Any:
    """OffsetFetch (v2+) of every partition the group has committed, with ``require_stable``
    (KIP-447: an offset inside an open transaction is not answered as committed)."""
    cls = _request(ApiKey.OFFSET_FETCH)
    return cls(group_id=group_id, topics=None, require_stable=True, groups=[
        cls.OffsetFetchRequestGroup(group_id=group_id, member_id=None, member_epoch=-1,
                                    topics=None)])


def list_transactions(states: Iterable[str], producer_ids: Iterable[int],
                      duration_ms: int) -> Any:
    """ListTransactions (KIP-664; v1 adds ``duration_filter``, KIP-994)."""
    return _request(ApiKey.LIST_TRANSACTIONS)(
        state_filters=list(states), producer_id_filters=list(producer_ids),
        duration_filter=duration_ms, transactional_id_pattern=None)


def describe_transactions(transactional_ids: Iterable[str]) -> Any:
    """DescribeTransactions (KIP-664)."""
    return _request(ApiKey.DESCRIBE_TRANSACTIONS)(transactional_ids=list(transactional_ids))


def describe_producers(partitions: Iterable[TopicPartition]) -> Any:
    """DescribeProducers (KIP-664) of some partitions led by one broker."""
    cls = _request(ApiKey.DESCRIBE_PRODUCERS)
    return cls(topics=[cls.TopicRequest(name=t, partition_indexes=ps)
                       for t, ps in by_topic(partitions).items()])


def write_abort_marker(tp: TopicPartition, producer_id: int, producer_epoch: int,
                       coordinator_epoch: int) -> Any:
    """WriteTxnMarkers with one ABORT marker for ``tp`` (KIP-664's abort, sent to the leader)."""
    cls = _request(ApiKey.WRITE_TXN_MARKERS)
    marker = cls.WritableTxnMarker
    return cls(markers=[marker(
        producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
        coordinator_epoch=coordinator_epoch,
        topics=[marker.WritableTxnMarkerTopic(name=tp.topic, partition_indexes=[tp.partition])])])


def init_producer_id(transactional_id: str, timeout_ms: int) -> Any:
    """InitProducerId for ``transactional_id`` without a producer id: the coordinator aborts
    the id's open transaction and bumps its epoch, fencing the producer that holds it."""
    return _request(ApiKey.INIT_PRODUCER_ID)(
        transactional_id=transactional_id, transaction_timeout_ms=timeout_ms, producer_id=-1,
        producer_epoch=-1, enable2_pc=False, keep_prepared_txn=False)
