"""What the proxy tests (test_proxy_*.py) observe the proxy with, in front of noida-db and Tansu.

Three observers: confluent-kafka clients (librdkafka parses what the proxy rewrites or invents),
`BlockingConnection` (one kafka-python request at a time), and a raw socket for pipelined bursts.
Where no broker here behaves like Kafka (none of them leaves Produce with acks=0 unanswered), a
small stand-in upstream does (in test_proxy_connections.py).
"Did the broker act?" is asked of the broker itself: InitProducerId for a transactional id the
broker has never seen returns epoch 0 on both brokers, and each earlier InitProducerId that
reached it adds one, so the epoch counts the requests that got through.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.producer import InitProducerIdRequest

from eosclient._net.blocking import BlockingConnection
from eosclient._protocol.framing import FrameDecoder
from eosclient.testing.brokers import RunningBroker

TIMEOUT = 10.0
TXN_TIMEOUT_MS = 60_000
# Kafka error codes the tests use.
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_VERSION = 35
CONCURRENT_TRANSACTIONS = 51


class Address(Protocol):
    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


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
