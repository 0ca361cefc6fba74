"""The wire adapter against real brokers: handshake, negotiation and a few real conversations."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest

from eosclient._core import _txn_wire as wire
from eosclient._core.types import ProducerIdentity
from eosclient._net.blocking import BlockingConnection
from eosclient.errors import ApiKey, KafkaConnectionError
from eosclient.testing.brokers import RunningBroker

pytestmark = pytest.mark.broker


def connect(broker: RunningBroker) -> BlockingConnection:
    return BlockingConnection(broker.host, broker.port, timeout=10)


def test_handshake_negotiates_what_a_transactional_client_needs(broker: RunningBroker) -> None:
    with connect(broker) as conn:
        versions = conn.protocol.versions
        assert versions is not None
        for key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.INIT_PRODUCER_ID, ApiKey.END_TXN,
                    ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.TXN_OFFSET_COMMIT):
            assert versions.supports(key), key
        # Tansu advertises AddPartitionsToTxn v4+ and drops the connection on it.
        assert versions.version(ApiKey.ADD_PARTITIONS_TO_TXN) <= 3
        assert versions.version(ApiKey.FETCH) >= 4


def test_requests_pipeline_on_one_connection(broker: RunningBroker,
                                             unique_name: Callable[[str], str]) -> None:
    topic = unique_name("wire")
    with connect(broker) as conn:
        create = CreateTopicsRequest(
            topics=[CreateTopicsRequest.CreatableTopic(
                name=topic, num_partitions=3, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=10_000, validate_only=False)
        [created] = conn.request(create).topics
        assert created.error_code == 0, created
        metadata = conn.request(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=False))
        [described] = [t for t in metadata.topics if t.name == topic]
        assert sorted(p.partition_index for p in described.partitions) == [0, 1, 2]
        assert [(b.host, b.port) for b in metadata.brokers] == [(broker.host, broker.port)]


def test_init_producer_id_twice_bumps_the_epoch(broker: RunningBroker,
                                               unique_name: Callable[[str], str]) -> None:
    txn_id = unique_name("txn")
    with connect(broker) as conn:
        # FindCoordinator v4 (KIP-699) moved the key into a list; both forms name the broker.
        found = conn.exchange(FindCoordinatorRequest(key=txn_id, coordinator_keys=[txn_id],
                                                     key_type=1))
        if found.version >= 4:
            [coordinator] = found.response.coordinators
            assert coordinator.key == txn_id
        else:
            coordinator = found.response
        assert (coordinator.error_code, coordinator.port) == (0, broker.port)
        first = conn.request(InitProducerIdRequest(transactional_id=txn_id,
                                                   transaction_timeout_ms=60_000))
        second = conn.request(InitProducerIdRequest(transactional_id=txn_id,
                                                    transaction_timeout_ms=60_000))
        assert first.error_code == second.error_code == 0
        # Both brokers keep the producer id and bump the epoch (BROKERS.md: re-init fences).
        assert second.producer_id == first.producer_id
        assert second.producer_epoch == first.producer_epoch + 1


def test_a_stale_epoch_in_the_kip360_form_bumps_on_noida_and_is_refused_on_tansu(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    # Why no KIP-588 probe (txn.py): on noida-db a zombie's probe fences the live instance.
    txn_id = unique_name("txn")
    with connect(broker) as conn:
        conn.request(wire.find_coordinator(txn_id, group=False))
        zombie = conn.request(wire.init_producer_id(txn_id, 60_000))
        live = conn.request(wire.init_producer_id(txn_id, 60_000))  # the successor takes over
        old = ProducerIdentity(zombie.producer_id, zombie.producer_epoch)
        current = ProducerIdentity(live.producer_id, live.producer_epoch)
        assert current == ProducerIdentity(old.producer_id, old.epoch + 1)
        if broker.kind == "noida":  # the zombie's own EndTxn is refused with 47 ...
            assert conn.request(wire.end_txn(txn_id, old, committed=False)).error_code == 47
        probe = conn.request(wire.init_producer_id(txn_id, 60_000, old))
        after = conn.request(wire.end_txn(txn_id, current, committed=False)).error_code
    if broker.kind == "noida":  # ... but the probe with that stale epoch bumps once more
        assert (probe.error_code, probe.producer_id, probe.producer_epoch) == (
            0, old.producer_id, old.epoch + 2)
        assert after == 47  # and the live instance is fenced by it
    else:  # Tansu refuses the form without bumping: the live instance goes on
        assert probe.error_code == -1
        assert after == 0


def test_connection_refused_is_a_retriable_connection_error() -> None:
    with pytest.raises(KafkaConnectionError, match="cannot connect"):
        BlockingConnection("127.0.0.1", 1, timeout=2)
