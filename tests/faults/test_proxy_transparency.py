"""`eosclient.testing.proxy` as a transparent hop: confluent clients and transactions run
through it, Metadata and FindCoordinator name the proxy at every version, and a response it
decodes and encodes again is what the broker sent."""

from __future__ import annotations

from typing import Any

import pytest
from _proxy_clients import TIMEOUT, raw_exchange, read_values, txn_id
from confluent_kafka import Producer
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest

from eosclient._net.blocking import BlockingConnection
from eosclient._protocol.apis import api_for
from eosclient._protocol.framing import frame
from eosclient.errors import ApiKey
from eosclient.testing._proxy_rules import decode_response, encode_response
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.proxy import KafkaProxy

pytestmark = pytest.mark.proxy


def broker_versions(broker: RunningBroker) -> dict[int, tuple[int, int]]:
    with BlockingConnection(broker.host, broker.port, timeout=TIMEOUT) as conn:
        assert conn.protocol.versions is not None
        return dict(conn.protocol.versions.broker)


def shared_versions(broker: RunningBroker, key: ApiKey) -> range:
    low, high = broker_versions(broker)[key]
    return range(low, min(high, api_for(key).response.max_version) + 1)


# --- transparency and metadata rewriting ---------------------------------------------------


def test_confluent_clients_round_trip_through_the_proxy(
    broker: RunningBroker, proxy: KafkaProxy, topic_name: str
) -> None:
    producer = Producer({"bootstrap.servers": proxy.bootstrap_servers, "acks": "all"})
    metadata = producer.list_topics(timeout=TIMEOUT)
    assert {(b.host, b.port) for b in metadata.brokers.values()} == {(proxy.host, proxy.port)}
    values = [f"value-{i}".encode() for i in range(10)]
    errors: list[Any] = []
    for value in values:
        producer.produce(topic_name, value, partition=0, on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(TIMEOUT) == 0
    assert errors == [None] * len(values)

    assert read_values(proxy.bootstrap_servers, topic_name, len(values)) == values
    # Produce and Fetch go to the broker Metadata names; they came here, so it named the proxy.
    keys = {seen.api_key for seen in proxy.seen}
    assert {ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH} <= keys


def test_a_confluent_transaction_runs_through_the_proxy(
    broker: RunningBroker, proxy: KafkaProxy, topic_name: str
) -> None:
    producer = Producer(
        {"bootstrap.servers": proxy.bootstrap_servers, "transactional.id": txn_id()}
    )
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic_name, b"in a transaction", partition=0)
    producer.commit_transaction(TIMEOUT)
    keys = {seen.api_key for seen in proxy.seen}
    txn_keys = {ApiKey.FIND_COORDINATOR, ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN}
    assert txn_keys | {ApiKey.PRODUCE, ApiKey.END_TXN} <= keys


def test_metadata_and_coordinators_name_the_proxy_at_every_version(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    requests = [
        (ApiKey.METADATA, v, MetadataRequest(topics=None))
        for v in shared_versions(broker, ApiKey.METADATA)
    ]
    requests += [
        (
            ApiKey.FIND_COORDINATOR,
            v,
            FindCoordinatorRequest(key="g", key_type=0, coordinator_keys=["g"]),
        )
        for v in shared_versions(broker, ApiKey.FIND_COORDINATOR)
    ]
    assert len(requests) > 10
    for key, version, request in requests:
        api = api_for(key)
        direct = decode_response(api, version, raw_exchange(broker, request, version)).to_dict()
        proxied = decode_response(api, version, raw_exchange(proxy, request, version)).to_dict()
        addresses = {(e["host"], e["port"]) for e in address_entries(key, direct)}
        assert addresses == {(broker.host, broker.port)}, (key, version)
        for entry in address_entries(key, direct):
            entry.update(host=proxy.host, port=proxy.port)
        assert proxied == direct, (key, version)


def address_entries(key: ApiKey, response: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts of a response (as `to_dict()`) that name a broker."""
    if key == ApiKey.METADATA:
        brokers: list[dict[str, Any]] = response["brokers"]
        return brokers
    return response.get("coordinators") or [response]  # FindCoordinator v4+, or v0-3


def reencoded(key: ApiKey, version: int, body: bytes) -> bytes:
    """What the proxy sends on for a response it decodes and encodes again unchanged."""
    api = api_for(key)
    return encode_response(api, decode_response(api, version, body), version, 42)


@pytest.mark.parametrize("key", [ApiKey.METADATA, ApiKey.FIND_COORDINATOR], ids=str)
def test_reencoding_what_the_broker_sent_gives_the_same_bytes(
    broker: RunningBroker, key: ApiKey
) -> None:
    # Classic and flexible versions (tagged fields, response header v1), all the broker speaks.
    request = (
        MetadataRequest(topics=None)
        if key == ApiKey.METADATA
        else FindCoordinatorRequest(key="g", coordinator_keys=["g"])
    )
    for version in shared_versions(broker, key):
        body = raw_exchange(broker, request, version)
        assert reencoded(key, version, body) == frame(body), version


def test_reencoding_api_versions_keeps_its_classic_header(broker: RunningBroker) -> None:
    # ApiVersions responses carry response header v0 even in flexible versions (v3+).
    api = api_for(ApiKey.API_VERSIONS)
    request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    for version in range(4):
        body = raw_exchange(broker, request, version)
        again = reencoded(ApiKey.API_VERSIONS, version, body)
        assert again[4:8] == body[:4] and again[8:10] == body[4:6]  # correlation id, error code
        # Tansu writes v3's default-valued tagged fields (features, epoch -1), which kafka-python
        # leaves out; the message is the same, so compare it decoded.
        decoded = decode_response(api, version, again[4:]).to_dict()
        assert decoded == decode_response(api, version, body).to_dict(), version

