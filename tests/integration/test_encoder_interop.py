"""confluent-kafka (librdkafka) reads what eosclient's own record batch encoder wrote.

Both brokers, every codec installed, both append paths (``send()`` with keys, headers, nulls,
explicit and out-of-order timestamps, values past the encoder's varint tables; ``send_batch()``),
committed in one transaction, then read with confluent-kafka's consumer through ``assign()``:
every record must come back with the same key, value, headers, timestamp and order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentTP

from eosclient import TopicPartition, TransactionalProducer
from eosclient._core.records import available_compressions
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.topics import create_topic

pytestmark = pytest.mark.broker

TIMEOUT = 15.0
TS = 1_700_000_000_000

Expected = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]




def write(producer: TransactionalProducer, topic: str) -> list[Expected]:
    """One committed transaction through both append paths; what each record should read as."""
    expected: list[Expected] = []
    producer.begin_transaction(partitions=[TopicPartition(topic, 0)])
    for i in range(150):  # offsets past 63 and values past 63 bytes: two-byte varints
        key = None if i % 3 == 0 else b"key-%d" % i
        value = None if i % 17 == 5 else b"value-%d-" % i + b"x" * (i % 90)
        headers = [("trace", b"t%d" % i), ("empty", None)] if i % 4 == 0 else []
        stamp = TS + i if i % 10 else TS - 7  # some older than the batch's first record
        producer.send(topic, value, key, partition=0, headers=headers or None, timestamp_ms=stamp)
        expected.append((key, value, headers, stamp))
    big = b"B" * 20_000  # past the varint tables
    producer.send(topic, big, b"big", partition=0, timestamp_ms=TS)
    expected.append((b"big", big, [], TS))
    bulk = [b"bulk-%d" % i * 3 for i in range(500)]
    producer.send_batch(topic, bulk, partition=0).result(TIMEOUT)
    expected += [(None, v, [], -1) for v in bulk]  # -1: send_batch stamps them itself
    producer.commit_transaction(TIMEOUT)
    return expected


def read(broker: RunningBroker, topic: str, count: int) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "interop",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([ConfluentTP(topic, 0, 0)])
    messages: list[Any] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(messages) < count and time.monotonic() < deadline:
            message = consumer.poll(0.1)
            if message is not None:
                assert message.error() is None, message.error()
                messages.append(message)
    finally:
        consumer.close()
    return messages


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_reads_what_the_encoder_wrote(
        broker: RunningBroker, unique_name: Callable[[str], str], codec: str) -> None:
    if codec not in available_compressions():
        pytest.skip(f"{codec}: its library is not installed")
    topic = unique_name("interop")
    create_topic(broker, topic)
    producer = TransactionalProducer(broker.bootstrap_servers,
                                     transactional_id=unique_name("txn"),
                                     compression_type=codec, batch_size=4096)
    try:
        producer.init_transactions(TIMEOUT)
        expected = write(producer, topic)
    finally:
        producer.close(TIMEOUT)
    messages = read(broker, topic, len(expected))
    assert len(messages) == len(expected)
    assert [m.offset() for m in messages] == sorted(m.offset() for m in messages)
    for message, (key, value, headers, stamp) in zip(messages, expected, strict=True):
        assert (message.key(), message.value()) == (key, value)
        assert (message.headers() or []) == headers
        kind, got = message.timestamp()
        assert kind == 1 and stamp in (got, -1)  # 1: CreateTime; -1: stamped by send_batch
