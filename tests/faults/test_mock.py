"""Each fault `eosclient.testing.mock.MockCluster` injects is observed taking effect.

Two observers: confluent-kafka clients where the effect is client-visible (metadata, delivery
reports), and `_Wire`, a blocking socket that sends one kafka-python request at a time, where the
exact error code and its order matter. Every injection is checked against a request that would
have succeeded without it, so each test fails if its injection is a no-op.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

from eosclient.testing.mock import (
    LibrdkafkaNotFound,
    MockCluster,
    MockClusterError,
    find_librdkafka,
)

pytestmark = pytest.mark.mock

TOPIC = "orders"
TOPIC_PARTITIONS = 5  # not the mock's auto-create default of 4
NUM_BROKERS = 3
TIMEOUT_S = 5.0
RTT_MS = 200

PRODUCE = 0
FIND_COORDINATOR = FindCoordinatorRequest.API_KEY
INIT_PRODUCER_ID = InitProducerIdRequest.API_KEY

# Kafka error codes used below.
MESSAGE_TOO_LARGE = 10
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
TOPIC_ALREADY_EXISTS = 36
INVALID_RECORD = 87
BROKER_NOT_AVAILABLE = 8
UNKNOWN_TOPIC_OR_PART = 3
# librdkafka-local codes.
LOCAL_TRANSPORT = -195
LOCAL_UNKNOWN_BROKER = -146


class _Wire:
    """One blocking Kafka connection: send a kafka-python request, time and decode the answer."""

    def __init__(self, address: tuple[str, int]) -> None:
        self._sock = socket.create_connection(address, timeout=TIMEOUT_S)
        self._correlation_id = 0

    def close(self) -> None:
        self._sock.close()

    def call(self, request: Any, response_class: Any) -> tuple[Any, float]:
        """Send ``request`` (version already set); return the response and seconds waited."""
        self._correlation_id += 1
        request.with_header(correlation_id=self._correlation_id, client_id="eosclient-test")
        started = time.monotonic()
        self._sock.sendall(request.encode(header=True, framed=True))
        (size,) = struct.unpack(">i", self._read_exactly(4))
        body = self._read_exactly(size)
        elapsed = time.monotonic() - started
        response = response_class.decode(body, version=request.API_VERSION, header=True)
        assert response.header.correlation_id == self._correlation_id
        return response, elapsed

    def is_closed_by_peer(self) -> bool:
        """Whether the broker has closed this connection (EOF or reset within the timeout)."""
        try:
            return self._sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _read_exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self._sock.recv(size - len(chunks))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks += chunk
        return bytes(chunks)


def _addresses(cluster: MockCluster) -> list[tuple[str, int]]:
    """Broker addresses in bootstrap order, which is broker id order (checked below)."""
    hosts_ports = (entry.rsplit(":", 1) for entry in cluster.bootstrap_servers.split(","))
    return [(host, int(port)) for host, port in hosts_ports]


def _api_versions() -> Any:
    return ApiVersionsRequest(version=2)  # the mock's highest; v3 gets a v0 "unsupported" reply


def _find_coordinator() -> Any:
    return FindCoordinatorRequest(version=1, key="group-a", key_type=0)


def _init_producer_id() -> Any:
    return InitProducerIdRequest(version=1, transactional_id=None, transaction_timeout_ms=60000)


def _produce_one_by_one(producer: Any, partitions: list[int]) -> list[int | None]:
    """Produce one record per partition, each flushed alone; return each delivery error code."""
    codes: list[int | None] = []

    def report(err: Any, _msg: Any) -> None:
        codes.append(err.code() if err is not None else None)

    for partition in partitions:
        producer.produce(TOPIC, b"value", partition=partition, on_delivery=report)
        assert producer.flush(TIMEOUT_S) == 0
    return codes


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(NUM_BROKERS, topics={TOPIC: TOPIC_PARTITIONS}) as mock:
        yield mock


@pytest.fixture
def producer(cluster: MockCluster) -> Iterator[Any]:
    """A confluent-kafka producer on ``cluster``, closed before the cluster is."""
    client = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0, "log_level": 3}
    )
    yield client
    # Left to the garbage collector, a producer outliving its cluster blocks ~1 s in destroy.
    client.close()


@pytest.fixture
def connect(cluster: MockCluster) -> Iterator[Callable[[int], _Wire]]:
    """Open a `_Wire` to a broker id of ``cluster``; every wire is closed after the test."""
    wires: list[_Wire] = []

    def open_wire(broker_id: int) -> _Wire:
        wires.append(_Wire(_addresses(cluster)[broker_id - 1]))
        return wires[-1]

    yield open_wire
    for wire in wires:
        wire.close()


def test_bootstrap_servers_list_every_broker_and_a_client_connects(
    cluster: MockCluster, producer: Any
) -> None:
    addresses = _addresses(cluster)
    assert [host for host, _ in addresses] == ["127.0.0.1"] * NUM_BROKERS
    metadata = producer.list_topics(timeout=TIMEOUT_S)
    by_id = {broker.id: (broker.host, broker.port) for broker in metadata.brokers.values()}
    assert by_id == {broker_id: addresses[broker_id - 1] for broker_id in (1, 2, 3)}


def test_created_topics_have_the_requested_partition_counts(
    cluster: MockCluster, producer: Any
) -> None:
    cluster.create_topic("seven", partitions=7)
    topics = producer.list_topics(timeout=TIMEOUT_S).topics
    assert len(topics["seven"].partitions) == 7
    assert len(topics[TOPIC].partitions) == TOPIC_PARTITIONS
    with pytest.raises(MockClusterError) as caught:
        cluster.create_topic("seven", partitions=2)
    assert (caught.value.code, caught.value.code_name) == (
        TOPIC_ALREADY_EXISTS,
        "TOPIC_ALREADY_EXISTS",
    )


def test_cluster_wide_errors_answer_the_next_requests_in_order_on_any_broker(
    cluster: MockCluster, connect: Callable[[int], _Wire]
) -> None:
    cluster.push_request_errors(INIT_PRODUCER_ID, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR)
    first, second = connect(1), connect(2)
    answers = [
        first.call(_init_producer_id(), InitProducerIdResponse)[0],
        second.call(_init_producer_id(), InitProducerIdResponse)[0],
        first.call(_init_producer_id(), InitProducerIdResponse)[0],
    ]
    assert [answer.error_code for answer in answers] == [
        COORDINATOR_LOAD_IN_PROGRESS,
        NOT_COORDINATOR,
        0,
    ]
    assert answers[2].producer_id >= 0


def test_cluster_wide_produce_errors_reach_the_delivery_reports(
    cluster: MockCluster, producer: Any
) -> None:
    # Non-retriable codes, so librdkafka reports them instead of retrying. (TOPIC_AUTHORIZATION_
    # FAILED also shows up, but librdkafka then drops the topic and fails later records locally.)
    cluster.push_request_errors(PRODUCE, INVALID_RECORD, MESSAGE_TOO_LARGE)
    codes = _produce_one_by_one(producer, [0, 0, 0])
    assert codes == [INVALID_RECORD, MESSAGE_TOO_LARGE, None]


def test_broker_errors_are_delayed_by_their_rtt_and_shadow_cluster_errors(
    cluster: MockCluster, connect: Callable[[int], _Wire]
) -> None:
    cluster.push_request_errors(FIND_COORDINATOR, NOT_COORDINATOR)
    cluster.push_broker_request_errors(2, FIND_COORDINATOR, [(COORDINATOR_NOT_AVAILABLE, RTT_MS)])
    on_two, on_one = connect(2), connect(1)
    answer, elapsed = on_two.call(_find_coordinator(), FindCoordinatorResponse)
    assert answer.error_code == COORDINATOR_NOT_AVAILABLE
    assert elapsed >= RTT_MS / 1000
    # Broker 2's drained stack still shadows the cluster-wide one: broker 2 answers normally...
    assert on_two.call(_find_coordinator(), FindCoordinatorResponse)[0].error_code == 0
    # ...while the cluster-wide error is still waiting for another broker.
    assert on_one.call(_find_coordinator(), FindCoordinatorResponse)[0].error_code == (
        NOT_COORDINATOR
    )


def test_partition_errors_fail_only_that_partition_once(
    cluster: MockCluster, producer: Any
) -> None:
    cluster.push_partition_errors(TOPIC, 0, PRODUCE, INVALID_RECORD)
    codes = _produce_one_by_one(producer, [1, 0, 0])
    assert codes == [None, INVALID_RECORD, None]
    with pytest.raises(MockClusterError) as caught:
        cluster.push_partition_errors(TOPIC, TOPIC_PARTITIONS, PRODUCE, INVALID_RECORD)
    assert caught.value.code == UNKNOWN_TOPIC_OR_PART


def test_partition_errors_on_an_unknown_topic_create_it(
    cluster: MockCluster, producer: Any
) -> None:
    # Pins the librdkafka behaviour push_partition_errors warns about.
    cluster.push_partition_errors("surprise", 2, PRODUCE, INVALID_RECORD)
    topics = producer.list_topics(timeout=TIMEOUT_S).topics
    assert len(topics["surprise"].partitions) == 3


def test_transport_error_makes_the_broker_close_the_connection(
    cluster: MockCluster, connect: Callable[[int], _Wire]
) -> None:
    cluster.push_request_errors(FIND_COORDINATOR, LOCAL_TRANSPORT)
    wire = connect(1)
    with pytest.raises(ConnectionError):
        wire.call(_find_coordinator(), FindCoordinatorResponse)


def test_broker_down_drops_and_refuses_connections_until_up(
    cluster: MockCluster, connect: Callable[[int], _Wire]
) -> None:
    connected = connect(1)
    assert connected.call(_api_versions(), ApiVersionsResponse)[0].error_code == 0
    cluster.set_broker_down(1)
    assert connected.is_closed_by_peer()
    with pytest.raises(ConnectionRefusedError):
        connect(1)
    assert connect(2).call(_api_versions(), ApiVersionsResponse)[0].error_code == 0
    cluster.set_broker_up(1)
    assert connect(1).call(_api_versions(), ApiVersionsResponse)[0].error_code == 0


def test_set_rtt_delays_every_response_of_that_broker(
    cluster: MockCluster, connect: Callable[[int], _Wire]
) -> None:
    wire = connect(1)
    _, before = wire.call(_api_versions(), ApiVersionsResponse)
    assert before < RTT_MS / 1000  # loose: proves the delay below comes from set_rtt
    cluster.set_rtt(1, RTT_MS)
    for _ in range(2):
        answer, elapsed = wire.call(_api_versions(), ApiVersionsResponse)
        assert answer.error_code == 0
        assert elapsed >= RTT_MS / 1000


def test_unknown_broker_ids_raise_with_librdkafkas_code(cluster: MockCluster) -> None:
    with pytest.raises(MockClusterError) as down:
        cluster.set_broker_down(NUM_BROKERS + 1)
    with pytest.raises(MockClusterError) as rtt:
        cluster.set_rtt(NUM_BROKERS + 1, RTT_MS)
    with pytest.raises(MockClusterError) as pushed:
        cluster.push_broker_request_errors(NUM_BROKERS + 1, PRODUCE, [(INVALID_RECORD, 0)])
    assert (down.value.code, down.value.code_name) == (BROKER_NOT_AVAILABLE, "BROKER_NOT_AVAILABLE")
    assert rtt.value.code == BROKER_NOT_AVAILABLE
    assert (pushed.value.code, pushed.value.code_name) == (LOCAL_UNKNOWN_BROKER, "_UNKNOWN_BROKER")


def test_bad_arguments_are_refused_before_reaching_c(cluster: MockCluster) -> None:
    with pytest.raises(ValueError, match="num_brokers"):
        MockCluster(0)
    with pytest.raises(ValueError, match="at least one"):
        cluster.push_request_errors(PRODUCE)
    with pytest.raises(ValueError, match="api_key"):
        cluster.push_request_errors(2**16, INVALID_RECORD)  # would wrap to 0 in an int16_t
    with pytest.raises(ValueError, match="rtt_ms"):
        cluster.push_broker_request_errors(1, PRODUCE, [(0, -1)])
    with pytest.raises(ValueError, match="error code"):
        cluster.push_partition_errors(TOPIC, 0, PRODUCE, 2**31)
    with pytest.raises(ValueError, match="partition"):
        cluster.push_partition_errors(TOPIC, -1, PRODUCE, INVALID_RECORD)  # C indexes [-1]
    with pytest.raises(ValueError, match="broker_id"):
        cluster.set_rtt(0, RTT_MS)  # ids start at 1
    with pytest.raises(ValueError, match="partitions"):
        cluster.create_topic("empty", partitions=0)


def test_close_twice_is_fine_and_frees_the_ports() -> None:
    with MockCluster(2) as cluster:
        addresses = _addresses(cluster)
    assert cluster.closed
    cluster.close()
    cluster.close()
    for address in addresses:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(address, timeout=TIMEOUT_S)
    with pytest.raises(ValueError, match="closed"):
        cluster.set_broker_down(1)


def test_librdkafka_is_found_beside_confluent_kafka() -> None:
    library = find_librdkafka()
    assert library.name.startswith("librdkafka")
    site = Path(confluent_kafka.__file__).resolve().parent.parent
    assert library.is_relative_to(site)


def test_missing_confluent_kafka_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # makes the import fail
    with pytest.raises(LibrdkafkaNotFound, match=r'pip install "\.\[testing\]"'):
        find_librdkafka()
