"""`eosclient.testing.proxy` in front of noida-db and Tansu: every fault is seen taking effect.

Three observers: confluent-kafka clients (librdkafka parses what the proxy rewrites or invents),
`BlockingConnection` (one kafka-python request at a time), and a raw socket for pipelined bursts.
Where no broker here behaves like Kafka (none of them leaves Produce with acks=0 unanswered), a
small stand-in upstream does.
"Did the broker act?" is asked of the broker itself: InitProducerId for a transactional id the
broker has never seen returns epoch 0 on both brokers, and each earlier InitProducerId that
reached it adds one, so the epoch counts the requests that got through.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    FindCoordinatorRequest,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from eosclient._net.blocking import BlockingConnection
from eosclient._protocol.apis import APIS, api_for
from eosclient._protocol.framing import FrameDecoder, frame
from eosclient.errors import ApiKey, KafkaConnectionError, KafkaTimeoutError
from eosclient.testing._proxy_rules import decode_response, encode_response, error_response
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.proxy import (
    ERROR_RESPONSE_APIS,
    Cut,
    Delay,
    DropResponse,
    ErrorResponse,
    KafkaProxy,
    RewriteError,
    Rule,
)

pytestmark = pytest.mark.proxy

TIMEOUT = 10.0
TXN_TIMEOUT_MS = 60_000
# Kafka error codes used below.
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_VERSION = 35
CONCURRENT_TRANSACTIONS = 51


class Address(Protocol):
    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int


@pytest.fixture
def make_proxy() -> Iterator[Callable[..., KafkaProxy]]:
    """A factory of started proxies, all closed after the test."""
    made: list[KafkaProxy] = []

    def make(upstream: Address, **options: Any) -> KafkaProxy:
        made.append(KafkaProxy(upstream.host, upstream.port, **options).start())
        return made[-1]

    yield make
    for proxy in made:
        proxy.close()


@pytest.fixture
def proxy(broker: RunningBroker, make_proxy: Callable[..., KafkaProxy]) -> KafkaProxy:
    return make_proxy(broker)


def txn_id() -> str:
    return f"proxy-txn-{uuid.uuid4().hex}"


def init_producer_id(
    target: Address, txn: str, *, timeout: float = TIMEOUT, version: int | None = None
) -> Any:
    """One InitProducerId on a new connection (negotiated version: v3+ on both brokers)."""
    request = InitProducerIdRequest(transactional_id=txn, transaction_timeout_ms=TXN_TIMEOUT_MS)
    with BlockingConnection(target.host, target.port, timeout=TIMEOUT) as conn:
        return conn.request(request, timeout=timeout, version=version)


def broker_epoch(broker: RunningBroker, txn: str) -> int:
    """Ask the broker directly: the epoch a fresh InitProducerId for `txn` gets."""
    response = init_producer_id(broker, txn)
    assert response.error_code == 0, response
    epoch: int = response.producer_epoch
    return epoch


def encoded(request: Any, version: int, correlation_id: int) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="proxy-test")
    return bytes(request.encode(header=True, framed=True))


class RawSocket:
    """A plain socket that writes frames as given and reads whole response frames."""

    def __init__(self, target: Address) -> None:
        self.sock = socket.create_connection((target.host, target.port), TIMEOUT)
        self.sock.settimeout(TIMEOUT)
        self.decoder = FrameDecoder()
        self.frames: list[bytes] = []

    def read_frame(self) -> bytes:
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.frames += self.decoder.feed(data)
        return self.frames.pop(0)

    def close(self) -> None:
        self.sock.close()


def raw_exchange(target: Address, request: Any, version: int) -> bytes:
    """Send one request on a new socket; return the response frame body, untouched."""
    raw = RawSocket(target)
    try:
        raw.sock.sendall(encoded(request, version, 42))
        return raw.read_frame()
    finally:
        raw.close()


def broker_versions(broker: RunningBroker) -> dict[int, tuple[int, int]]:
    with BlockingConnection(broker.host, broker.port, timeout=TIMEOUT) as conn:
        assert conn.protocol.versions is not None
        return dict(conn.protocol.versions.broker)


def shared_versions(broker: RunningBroker, key: ApiKey) -> range:
    low, high = broker_versions(broker)[key]
    return range(low, min(high, api_for(key).response.max_version) + 1)


def records(*values: bytes) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for value in values:
        builder.append(timestamp=int(time.time() * 1000), key=None, value=value)
    builder.close()
    return bytes(builder.buffer())


def produce_request(topic: str, acks: int, *values: bytes) -> Any:
    topic_data = ProduceRequest.TopicProduceData
    partition = topic_data.PartitionProduceData(index=0, records=records(*values))
    return ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=int(TIMEOUT * 1000),
        topic_data=[topic_data(name=topic, partition_data=[partition])],
    )


def read_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """Read `count` values from partition 0 of `topic` with assign() (no group join)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "proxy-test", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def produce_with_confluent(bootstrap: str, topic: str, value: bytes) -> tuple[Any, Any]:
    """Produce one record with no retries; return (error, message) from its delivery report."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0})
    reports: list[tuple[Any, Any]] = []
    producer.produce(topic, value, partition=0, on_delivery=lambda e, m: reports.append((e, m)))
    assert producer.flush(TIMEOUT) == 0
    [report] = reports
    return report


def wait_for(condition: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


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


# --- ErrorResponse -------------------------------------------------------------------------


def test_error_response_answers_without_the_broker(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    rule = proxy.add_rule(
        Rule(api_key=ApiKey.INIT_PRODUCER_ID, action=ErrorResponse(CONCURRENT_TRANSACTIONS))
    )
    txn = txn_id()
    answered = init_producer_id(proxy, txn)
    assert answered.error_code == CONCURRENT_TRANSACTIONS
    assert (answered.producer_id, answered.producer_epoch) == (-1, -1)
    assert rule.fired == 1
    assert broker_epoch(broker, txn) == 0  # the broker had never seen this transactional id


def test_error_response_on_produce_is_read_by_librdkafka(
    broker: RunningBroker, proxy: KafkaProxy, topic_name: str
) -> None:
    rule = proxy.add_rule(Rule(api_key=ApiKey.PRODUCE, action=ErrorResponse(MESSAGE_TOO_LARGE)))
    error, _ = produce_with_confluent(proxy.bootstrap_servers, topic_name, b"refused")
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert rule.fired == 1
    error, message = produce_with_confluent(proxy.bootstrap_servers, topic_name, b"stored")
    assert error is None
    assert message.offset() == 0  # the refused record never reached the log


def sample_request(key: ApiKey) -> dict[str, Any]:
    """A request of each API ErrorResponse answers, naming partitions 0, 3 (topic a), 1 (b)."""
    topics = [("a", [0, 3]), ("b", [1])]
    txn = {"transactional_id": "t", "producer_id": 7, "producer_epoch": 1}
    commit = [
        {"name": n, "partitions": [{"partition_index": p, "committed_offset": 5} for p in ps]}
        for n, ps in topics
    ]
    fetch = [{"name": n, "partition_indexes": ps} for n, ps in topics]
    group = {"group_id": "g", "generation_id": 1, "member_id": "m"}
    return {
        ApiKey.PRODUCE: {
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [
                {"name": n, "partition_data": [{"index": p, "records": None} for p in ps]}
                for n, ps in topics
            ],
        },
        ApiKey.INIT_PRODUCER_ID: {"transactional_id": "t", "transaction_timeout_ms": 1000},
        ApiKey.ADD_PARTITIONS_TO_TXN: {
            "v3_and_below_transactional_id": "t",
            "v3_and_below_producer_id": 7,
            "v3_and_below_producer_epoch": 1,
            "v3_and_below_topics": [{"name": n, "partitions": ps} for n, ps in topics],
        },
        ApiKey.ADD_OFFSETS_TO_TXN: {**txn, "group_id": "g"},
        ApiKey.END_TXN: {**txn, "committed": True},
        ApiKey.TXN_OFFSET_COMMIT: {**txn, "group_id": "g", "topics": commit},
        ApiKey.FIND_COORDINATOR: {"key": "g", "coordinator_keys": ["g", "h"]},
        ApiKey.HEARTBEAT: group,
        ApiKey.JOIN_GROUP: {
            "group_id": "g",
            "session_timeout_ms": 10_000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
        ApiKey.SYNC_GROUP: {**group, "assignments": []},
        ApiKey.OFFSET_COMMIT: {"group_id": "g", "member_id": "", "topics": commit},
        ApiKey.OFFSET_FETCH: {
            "group_id": "g",
            "topics": fetch,
            "groups": [{"group_id": "g", "topics": fetch}],
        },
    }[key]


def build(schema: Any, values: dict[str, Any], **extra: Any) -> Any:
    """A kafka-python message or struct from nested dicts, following its schema."""
    fields = {}
    for name, value in values.items():
        field = schema.fields[name]
        is_structs = field.is_struct_array() and value and isinstance(value[0], dict)
        fields[name] = [build(field, v) for v in value] if is_structs else value
    make = schema if hasattr(schema, "API_KEY") else schema.data_class
    return make(**fields, **extra)


def error_fields(item: Any) -> list[int]:
    """Every value under a key ending in error_code, at any depth of `to_dict()` output."""
    if isinstance(item, list):
        return [code for entry in item for code in error_fields(entry)]
    if not isinstance(item, dict):
        return []
    own = [v for k, v in item.items() if k.endswith("error_code")]
    return own + [code for v in item.values() for code in error_fields(v)]


def partition_indexes(item: Any) -> list[int]:
    if isinstance(item, list):
        return [p for entry in item for p in partition_indexes(entry)]
    if not isinstance(item, dict):
        return []
    own = [v for k, v in item.items() if k in ("index", "partition_index")]
    return own + [p for v in item.values() for p in partition_indexes(v)]


def expected_partitions(key: ApiKey) -> list[int]:
    per_partition = {
        ApiKey.PRODUCE,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
    }
    return [0, 1, 3] if key in per_partition else []


@pytest.mark.parametrize("key", sorted(ApiKey(k) for k in ERROR_RESPONSE_APIS), ids=str)
def test_error_response_mirrors_the_request_at_every_version(key: ApiKey) -> None:
    api = APIS[key]
    for version in range(api.min_version, api.max_version + 1):
        request = build(api.request, sample_request(key), version=version)
        body = encoded(request, version, 1234)[4:]
        built = error_response(api, version, body, CONCURRENT_TRANSACTIONS)
        wire = encode_response(api, built, version, 1234)
        response = api.response.decode(wire[4:], version=version, header=True)
        assert response.header.correlation_id == 1234
        fields = response.to_dict()
        codes = error_fields(fields)
        assert codes and set(codes) == {CONCURRENT_TRANSACTIONS}, (version, fields)
        assert sorted(partition_indexes(fields)) == expected_partitions(key), version
        if key == ApiKey.FIND_COORDINATOR and version >= 4:
            assert [c["key"] for c in fields["coordinators"]] == ["g", "h"]


def test_rules_that_cannot_be_encoded_are_refused() -> None:
    with pytest.raises(ValueError, match="Fetch"):
        Rule(api_key=ApiKey.FETCH, action=ErrorResponse(1))
    with pytest.raises(ValueError, match="api_key"):
        Rule(action=ErrorResponse(1))
    with pytest.raises(ValueError, match="api_key"):
        Rule(action=RewriteError(1))
    with pytest.raises(ValueError, match="outside"):
        Rule(api_key=ApiKey.END_TXN, api_version=99, action=ErrorResponse(1))
    with pytest.raises(ValueError, match="nth"):
        Rule(action=DropResponse(), nth=0)
    with pytest.raises(ValueError, match="direction"):
        Delay(1.0, direction="sideways")  # type: ignore[arg-type]


# --- DropResponse, Cut, RewriteError ----------------------------------------------------------


def test_drop_response_lets_the_broker_act_and_the_client_time_out(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    rule = proxy.add_rule(Rule(api_key=ApiKey.INIT_PRODUCER_ID, action=DropResponse()))
    txn = txn_id()
    with pytest.raises(KafkaTimeoutError):
        init_producer_id(proxy, txn, timeout=1.0)
    assert rule.fired == 1
    assert broker_epoch(broker, txn) == 1  # the dropped InitProducerId got epoch 0


def test_responses_after_a_dropped_one_still_arrive_in_order(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    proxy.add_rule(Rule(api_key=ApiKey.INIT_PRODUCER_ID, action=DropResponse()))
    init = InitProducerIdRequest(transactional_id=txn_id(), transaction_timeout_ms=TXN_TIMEOUT_MS)
    raw = RawSocket(proxy)
    try:
        raw.sock.sendall(
            encoded(MetadataRequest(topics=[]), 1, 1)
            + encoded(init, 3, 2)
            + encoded(MetadataRequest(topics=[]), 1, 3)
        )
        ids = [int.from_bytes(raw.read_frame()[:4], "big") for _ in range(2)]
    finally:
        raw.close()
    assert ids == [1, 3]


def test_a_local_answer_waits_for_the_responses_before_it(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    # The ErrorResponse is ready at once; the Metadata answer before it is held 0.2 s.
    proxy.add_rule(Rule(api_key=ApiKey.METADATA, action=Delay(0.2, "response")))
    proxy.add_rule(Rule(api_key=ApiKey.INIT_PRODUCER_ID, action=ErrorResponse(1)))
    init = InitProducerIdRequest(transactional_id=txn_id(), transaction_timeout_ms=TXN_TIMEOUT_MS)
    raw = RawSocket(proxy)
    try:
        raw.sock.sendall(encoded(MetadataRequest(topics=[]), 1, 1) + encoded(init, 3, 2))
        ids = [int.from_bytes(raw.read_frame()[:4], "big") for _ in range(2)]
    finally:
        raw.close()
    assert ids == [1, 2]


@pytest.mark.parametrize(("when", "epoch_after"), [("before", 0), ("after", 1)])
def test_cut_closes_the_connection_before_or_after_the_broker_acts(
    broker: RunningBroker, proxy: KafkaProxy, when: Any, epoch_after: int
) -> None:
    rule = proxy.add_rule(Rule(api_key=ApiKey.INIT_PRODUCER_ID, action=Cut(when)))
    txn = txn_id()
    with pytest.raises(KafkaConnectionError):
        init_producer_id(proxy, txn)
    assert rule.fired == 1
    assert broker_epoch(broker, txn) == epoch_after
    assert wait_for(lambda: proxy.connections == 0)


def test_rewrite_error_hides_a_stored_record_from_the_producer(
    broker: RunningBroker, proxy: KafkaProxy, topic_name: str
) -> None:
    rule = proxy.add_rule(Rule(api_key=ApiKey.PRODUCE, action=RewriteError(MESSAGE_TOO_LARGE)))
    error, _ = produce_with_confluent(proxy.bootstrap_servers, topic_name, b"stored anyway")
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert rule.fired == 1
    assert read_values(broker.bootstrap_servers, topic_name, 1) == [b"stored anyway"]


def test_rewrite_error_on_api_versions_sends_a_v0_body(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    proxy.add_rule(Rule(api_key=ApiKey.API_VERSIONS, action=RewriteError(UNSUPPORTED_VERSION)))
    request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    api = api_for(ApiKey.API_VERSIONS)
    response = decode_response(api, 3, raw_exchange(proxy, request, 3))
    assert response.error_code == UNSUPPORTED_VERSION
    assert response.version == 0
    assert ApiKey.PRODUCE in {entry.api_key for entry in response.api_keys}


# --- rule matching -----------------------------------------------------------------------


def init_codes(proxy: KafkaProxy, count: int, version: int | None = None) -> list[int]:
    return [init_producer_id(proxy, txn_id(), version=version).error_code for _ in range(count)]


def test_nth_fires_on_that_request_only(broker: RunningBroker, proxy: KafkaProxy) -> None:
    rule = proxy.add_rule(
        Rule(
            api_key=ApiKey.INIT_PRODUCER_ID,
            nth=2,
            times=None,
            action=ErrorResponse(CONCURRENT_TRANSACTIONS),
        )
    )
    assert init_codes(proxy, 4) == [0, CONCURRENT_TRANSACTIONS, 0, 0]
    assert (rule.matched, rule.fired) == (4, 1)


def test_times_limits_firings_and_none_never_stops(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    code = CONCURRENT_TRANSACTIONS
    twice = proxy.add_rule(Rule(api_key=ApiKey.INIT_PRODUCER_ID, times=2, action=ErrorResponse(1)))
    forever = proxy.add_rule(
        Rule(api_key=ApiKey.INIT_PRODUCER_ID, times=None, action=ErrorResponse(code))
    )
    # The first rule added acts; once it is spent, the next one takes over for good.
    assert init_codes(proxy, 6) == [1, 1, code, code, code, code]
    assert (twice.fired, forever.fired) == (2, 4)
    assert proxy.wait_fired(forever, timeout=0.0, count=4)
    assert not proxy.wait_fired(forever, timeout=0.01, count=5)
    proxy.clear_rules()
    assert init_codes(proxy, 1) == [0]


def test_api_version_filter(broker: RunningBroker, proxy: KafkaProxy) -> None:
    rule = proxy.add_rule(
        Rule(
            api_key=ApiKey.INIT_PRODUCER_ID,
            api_version=4,
            times=None,
            action=ErrorResponse(CONCURRENT_TRANSACTIONS),
        )
    )
    assert init_codes(proxy, 1, version=3) == [0]
    assert init_codes(proxy, 1, version=4) == [CONCURRENT_TRANSACTIONS]
    assert (rule.matched, rule.fired) == (1, 1)


@pytest.mark.parametrize("direction", ["request", "response"])
def test_delay_holds_the_exchange(broker: RunningBroker, proxy: KafkaProxy, direction: Any) -> None:
    rule = proxy.add_rule(Rule(api_key=ApiKey.METADATA, action=Delay(0.3, direction)))
    with BlockingConnection(proxy.host, proxy.port, timeout=TIMEOUT) as conn:
        started = time.monotonic()
        conn.request(MetadataRequest(topics=[]))
        elapsed = time.monotonic() - started
    assert rule.fired == 1
    assert elapsed >= 0.3


# --- latency, requests without responses, broken streams ----------------------------------


def test_latency_delays_a_pipelined_burst_once(
    broker: RunningBroker, make_proxy: Callable[..., KafkaProxy]
) -> None:
    latency, burst = 0.05, 20
    slow = make_proxy(broker, latency=latency)
    raw = RawSocket(slow)
    try:
        started = time.monotonic()
        raw.sock.sendall(b"".join(encoded(MetadataRequest(topics=[]), 1, i) for i in range(burst)))
        ids = [int.from_bytes(raw.read_frame()[:4], "big") for _ in range(burst)]
        elapsed = time.monotonic() - started
    finally:
        raw.close()
    assert ids == list(range(burst))
    # One round trip is 2 * latency; serialised, the burst would take burst * 2 * latency = 2 s.
    assert 2 * latency <= elapsed < 0.6


def correlation_ids_after_acks_0(target: Address, topic: str, version: int) -> list[int]:
    """Send Produce acks=0 (id 1) and Metadata (id 2) at once; return the ids answered."""
    raw = RawSocket(target)
    try:
        produce = encoded(produce_request(topic, 0, b"fire and forget"), version, 1)
        raw.sock.sendall(produce + encoded(MetadataRequest(topics=[]), 1, 2))
        ids = [int.from_bytes(raw.read_frame()[:4], "big")]
        while ids[-1] != 2 and len(ids) < 2:
            ids.append(int.from_bytes(raw.read_frame()[:4], "big"))
        return ids
    finally:
        raw.close()


@pytest.mark.parametrize("version", [3, 9])  # classic and flexible request headers
def test_produce_with_acks_0_passes_as_the_broker_answers_it(
    broker: RunningBroker, proxy: KafkaProxy, topic_name: str, version: int
) -> None:
    # Kafka never answers acks=0; noida-db, Tansu (and librdkafka's mock) do. Either way the
    # client must get what the broker sent.
    direct = correlation_ids_after_acks_0(broker, topic_name, version)
    assert direct[-1] == 2
    assert correlation_ids_after_acks_0(proxy, topic_name, version) == direct


class ConformantUpstream:
    """A stand-in broker that answers like Kafka: never Produce with acks=0, everything else
    with an empty Metadata v1 response. With `hang_up`, it closes each connection at once."""

    def __init__(self, *, hang_up: bool = False) -> None:
        self.hang_up = hang_up
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(TIMEOUT)
        self.host, self.port = self.listener.getsockname()[:2]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        decoder = FrameDecoder()
        with conn:
            while not self.hang_up and (data := conn.recv(65536)):
                for body in decoder.feed(data):
                    conn.sendall(self._answer(body))

    @staticmethod
    def _answer(body: bytes) -> bytes:
        key, version, correlation_id = struct.unpack_from(">hhi", body)
        produce = ProduceRequest.decode(body, version=version, header=True) if key == 0 else None
        if produce is not None and produce.acks == 0:
            return b""
        response = MetadataResponse(version=1, brokers=[], controller_id=-1, topics=[])
        response.with_header(correlation_id=correlation_id)
        return bytes(response.encode(header=True, framed=True))

    def close(self) -> None:
        self.listener.close()
        self.thread.join(TIMEOUT)


@pytest.mark.parametrize("version", [3, 9])
def test_unanswered_acks_0_produce_does_not_stall_later_responses(
    make_proxy: Callable[..., KafkaProxy], version: int
) -> None:
    upstream = ConformantUpstream()
    try:
        proxy = make_proxy(upstream)
        raw = RawSocket(proxy)
        try:
            produce = encoded(produce_request("t", 0, b"x"), version, 1)
            metadata = encoded(MetadataRequest(topics=[]), 1, 3)
            raw.sock.sendall(produce + encoded(produce_request("t", 0, b"y"), version, 2))
            raw.sock.sendall(metadata)
            assert int.from_bytes(raw.read_frame()[:4], "big") == 3
        finally:
            raw.close()
        assert [s.correlation_id for s in proxy.seen] == [1, 2, 3]
    finally:
        upstream.close()


def test_a_broker_closing_an_idle_connection_closes_the_client(
    make_proxy: Callable[..., KafkaProxy],
) -> None:
    upstream = ConformantUpstream(hang_up=True)
    try:
        raw = RawSocket(make_proxy(upstream))
        try:
            with pytest.raises(ConnectionError):  # not a timeout: nothing was pending
                raw.read_frame()
        finally:
            raw.close()
    finally:
        upstream.close()


def test_a_broken_client_stream_is_logged_and_closed(
    proxy: KafkaProxy, caplog: pytest.LogCaptureFixture
) -> None:
    raw = RawSocket(proxy)
    try:
        raw.sock.sendall(b"\xff\xff\xff\xf0not kafka")  # a negative frame size
        with pytest.raises(ConnectionError):
            raw.read_frame()
    finally:
        raw.close()
    assert wait_for(lambda: any(r.levelno == logging.ERROR for r in caplog.records))
    [record] = [r for r in caplog.records if r.name == "eosclient.testing.proxy"]
    assert "frame size" in str(record.exc_info[1] if record.exc_info else record.getMessage())


def test_an_unreachable_upstream_closes_the_client(
    make_proxy: Callable[..., KafkaProxy], caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    nowhere = make_proxy(Endpoint("127.0.0.1", port))
    with pytest.raises(KafkaConnectionError):
        BlockingConnection(nowhere.host, nowhere.port, timeout=TIMEOUT)
    assert any("cannot reach upstream" in r.getMessage() for r in caplog.records)


def test_a_broker_that_drops_the_connection_cuts_the_client(
    tansu_broker: RunningBroker, make_proxy: Callable[..., KafkaProxy]
) -> None:
    from kafka.protocol.admin import ListTransactionsRequest  # noqa: PLC0415

    proxy = make_proxy(tansu_broker)
    conn = BlockingConnection(proxy.host, proxy.port, timeout=TIMEOUT)
    with conn, pytest.raises(KafkaConnectionError):  # Tansu does not implement ListTransactions
        conn.request(ListTransactionsRequest(), version=0, timeout=TIMEOUT)
    assert wait_for(lambda: proxy.connections == 0)


# --- lifecycle -----------------------------------------------------------------------------


def proxy_threads(port: int) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"eosclient-proxy-{port}"]


def test_cut_all_closes_every_live_connection(broker: RunningBroker, proxy: KafkaProxy) -> None:
    conns = [BlockingConnection(proxy.host, proxy.port, timeout=TIMEOUT) for _ in range(3)]
    try:
        assert proxy.connections == 3
        assert proxy.cut_all() == 3
        assert proxy.connections == 0
        for conn in conns:
            with pytest.raises(KafkaConnectionError):
                conn.request(MetadataRequest(topics=[]))
        assert init_producer_id(proxy, txn_id()).error_code == 0  # new connections still work
    finally:
        for conn in conns:
            conn.close()


def test_close_is_idempotent_and_leaves_nothing_behind(broker: RunningBroker) -> None:
    KafkaProxy(broker.host, broker.port).close()  # never started: nothing to do
    proxy = KafkaProxy(broker.host, broker.port).start()
    port = proxy.port
    conns: list[BlockingConnection] = []
    try:
        conns += [BlockingConnection(proxy.host, proxy.port, timeout=TIMEOUT) for _ in range(2)]
        assert proxy.connections == 2
        assert len(proxy_threads(port)) == 1
        started = time.monotonic()
        proxy.close()
        assert time.monotonic() - started < 5.0
        proxy.close()
        assert proxy_threads(port) == []
        assert proxy.connections == 0
        for conn in conns:
            with pytest.raises(KafkaConnectionError):
                conn.request(MetadataRequest(topics=[]))
        with pytest.raises(OSError):
            socket.create_connection((proxy.host, port), timeout=1.0).close()
        with pytest.raises(RuntimeError):
            proxy.start()
    finally:
        proxy.close()
        for conn in conns:
            conn.close()
