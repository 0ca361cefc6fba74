"""The proxy's connections: latency on a pipelined burst, Produce with acks=0 answered or not,
broken streams and closed connections on either side, cut_all() and close() leaving nothing
behind."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from _proxy_clients import TIMEOUT, Address, RawSocket, encoded, init_producer_id, txn_id, wait_for
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from eosclient._net.blocking import BlockingConnection
from eosclient._protocol.framing import FrameDecoder
from eosclient.errors import ApiKey, KafkaConnectionError
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.proxy import Delay, KafkaProxy, Rule

pytestmark = pytest.mark.proxy


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int


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


def test_timings_split_each_exchange_into_latency_and_broker_time(
    broker: RunningBroker, make_proxy: Callable[..., KafkaProxy]
) -> None:
    latency = 0.02
    slow = make_proxy(broker, latency=latency)
    slow.add_rule(Rule(api_key=ApiKey.METADATA, action=Delay(0.05, "response")))
    with BlockingConnection(slow.host, slow.port, timeout=TIMEOUT) as conn:
        started = time.monotonic()
        conn.request(MetadataRequest(topics=[]))
        ended = time.monotonic()
    versions, metadata = slow.take_timings()
    assert slow.timings == []  # taken, so forgotten
    assert (versions.api_key, metadata.api_key) == (ApiKey.API_VERSIONS, ApiKey.METADATA)
    assert versions.connection == metadata.connection
    assert metadata.forwarded is not None and metadata.answered is not None
    assert metadata.delivered is not None
    # The client's clock is the proxy's: each point lies inside the client's own wait, in order.
    assert started <= metadata.arrived <= metadata.forwarded <= metadata.answered
    assert metadata.delivered <= ended
    assert metadata.forwarded - metadata.arrived >= latency
    assert metadata.delivered - metadata.answered >= latency + 0.05  # the Delay rule's hold


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
