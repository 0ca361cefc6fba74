"""The consumer's conveniences on real brokers: deserializers (and their errors' positions),
iteration, pause/resume, str header values on produce, and poll() before any assignment."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from eosclient import (
    ConsumerRecord,
    DeserializationError,
    IllegalStateError,
    ReadCommittedConsumer,
    RecordTypeError,
    TopicPartition,
    TransactionalProducer,
)
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = pytest.mark.broker

TIMEOUT = 20.0


def write(broker: RunningBroker, topic: str, records: list[tuple[int, bytes | None]],
          headers: list[tuple[str, object]] | None = None) -> None:
    """``(partition, value)`` records, committed in one transaction."""
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=f"{topic}-w") as producer:
        producer.init_transactions(TIMEOUT)
        with producer.transaction():
            for partition, value in records:
                producer.send(topic, value, key=b"k", partition=partition, headers=headers)


@contextmanager
def assigned(broker: RunningBroker, *tps: TopicPartition, **config: object,
             ) -> Iterator[ReadCommittedConsumer]:
    consumer = ReadCommittedConsumer(
        broker.bootstrap_servers, config={"auto.offset.reset": "earliest", "fetch.max.wait.ms": 100,
                                  **config})
    consumer.assign(list(tps))
    try:
        yield consumer
    finally:
        consumer.close()


def read(consumer: ReadCommittedConsumer, count: int) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.poll(0.2)
    return got


def test_deserializers_turn_keys_and_values_into_objects(broker: RunningBroker,
                                                          topic_name: str) -> None:
    topics.create_topic(broker, topic_name)
    write(broker, topic_name, [(0, b'{"n": 1}'), (0, None)])
    tp = TopicPartition(topic_name, 0)
    with assigned(broker, tp, **{"key.deserializer": bytes.decode}) as consumer:
        assert consumer.config.key_deserializer is bytes.decode  # the dotted key works too
    with ReadCommittedConsumer(broker.bootstrap_servers, key_deserializer=bytes.decode,
                               value_deserializer=json.loads,
                               config={"auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([tp])
        got = read(consumer, 2)
    assert [(r.key, r.value) for r in got] == [("k", {"n": 1}), ("k", None)]  # tombstone: None


def test_a_failing_deserializer_names_the_record_and_keeps_the_position(
        broker: RunningBroker, topic_name: str) -> None:
    topics.create_topic(broker, topic_name, 2)
    write(broker, topic_name, [(0, b"1"), (0, b"not json"), (0, b"3"), (1, b"10"), (1, b"11")])
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    with ReadCommittedConsumer(broker.bootstrap_servers, value_deserializer=json.loads,
                               config={"auto.offset.reset": "earliest",
                                       "fetch.max.wait.ms": 100}) as consumer:
        consumer.assign([tp0, tp1])
        got: list[ConsumerRecord] = []
        deadline = time.monotonic() + TIMEOUT
        with pytest.raises(DeserializationError) as caught:
            while time.monotonic() < deadline:
                got += consumer.poll(0.2)
        error = caught.value
        assert (error.topic, error.partition, error.offset, error.field) == (
            topic_name, 0, 1, "value")
        assert isinstance(error.__cause__, ValueError)
        assert topic_name in str(error) and "offset 1" in str(error)
        # Every record around it was delivered; nothing past it on its partition.
        assert sorted((r.partition, r.value) for r in got) == [(0, 1), (1, 10), (1, 11)]
        assert consumer.position(tp0) == 1  # a commit now would not skip the bad record
        with pytest.raises(DeserializationError):  # and it is met again
            consumer.poll(5.0)
        consumer.seek(tp0, 2)  # the application skips it
        assert [(r.offset, r.value) for r in read(consumer, 1)] == [(2, 3)]


def test_iteration_yields_each_record_and_stops_when_idle(broker: RunningBroker,
                                                          topic_name: str) -> None:
    topics.create_topic(broker, topic_name)
    write(broker, topic_name, [(0, b"a"), (0, b"b"), (0, b"c")])
    tp = TopicPartition(topic_name, 0)
    with assigned(broker, tp) as consumer:
        values = [r.value for r in consumer.records(idle_timeout=2.0)]
        assert values == [b"a", b"b", b"c"]
        consumer.seek(tp, 0)
        for record in consumer:  # a break leaves the position just past the last record seen
            if record.value == b"b":
                break
        assert consumer.position(tp) == 2
        for record in consumer:  # closing inside the loop ends it
            assert record.value == b"c"
            consumer.close()
        assert list(consumer) == []


def test_paused_partitions_deliver_nothing_until_resumed(broker: RunningBroker,
                                                         topic_name: str) -> None:
    topics.create_topic(broker, topic_name, 2)
    write(broker, topic_name, [(0, b"p0"), (1, b"p1")])
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    with assigned(broker, tp0, tp1) as consumer:
        consumer.pause([tp0])
        assert consumer.paused() == [tp0]
        got = read(consumer, 1)
        got += consumer.poll(1.0)  # time for partition 0 to come, were it not paused
        assert [r.value for r in got] == [b"p1"]
        assert consumer.position(tp0) == 0
        consumer.resume([tp0])
        assert consumer.paused() == []
        assert [r.value for r in read(consumer, 1)] == [b"p0"]
        with pytest.raises(IllegalStateError):
            consumer.pause([TopicPartition(topic_name, 5)])


def test_str_header_values_are_sent_as_utf8(broker: RunningBroker, topic_name: str) -> None:
    topics.create_topic(broker, topic_name)
    write(broker, topic_name, [(0, b"v")], headers=[("trace", "é-1"), ("raw", b"\x00")])
    with assigned(broker, TopicPartition(topic_name, 0)) as consumer:
        [record] = read(consumer, 1)
    assert record.headers == (("trace", "é-1".encode()), ("raw", b"\x00"))


def test_a_header_value_that_is_not_utf8_encodable_is_refused(broker: RunningBroker,
                                                               topic_name: str) -> None:
    with TransactionalProducer(broker.bootstrap_servers) as producer, pytest.raises(
            RecordTypeError, match="cannot be encoded as UTF-8"):
        producer.send(topic_name, b"v", headers=[("h", "\ud800")])


def test_poll_before_assign_or_subscribe_is_an_error(broker: RunningBroker) -> None:
    with ReadCommittedConsumer(broker.bootstrap_servers) as consumer:
        with pytest.raises(IllegalStateError, match=r"before assign\(\) or subscribe\(\)"):
            consumer.poll(0.1)
        consumer.assign([])  # owning no partitions on purpose is a state, not a mistake
        assert consumer.poll(0.1) == []


@pytest.mark.noida  # Tansu's group join takes ~23 s per rebalance; the pattern logic is the same
def test_a_pattern_subscription_follows_topics_created_later(noida_broker: RunningBroker,
                                                             unique_name: Any) -> None:
    broker, prefix = noida_broker, unique_name("pat")
    first, other = f"{prefix}-a", f"{prefix}x-b"  # the pattern wants "<prefix>-..." only
    for topic in (first, other):
        topics.create_topic(broker, topic)
        write(broker, topic, [(0, topic.encode())])
    seen: list[bytes | None] = []
    with ReadCommittedConsumer(broker.bootstrap_servers, group_id=unique_name("g"),
                               config={"auto.offset.reset": "earliest",
                                       "fetch.max.wait.ms": 100,
                                       "metadata.max.age.ms": 300}) as consumer:
        consumer.subscribe(re.compile(re.escape(prefix) + "-.*"))
        deadline = time.monotonic() + TIMEOUT
        while first.encode() not in seen and time.monotonic() < deadline:
            seen += [r.value for r in consumer.poll(0.2)]
        assert seen == [first.encode()]
        consumer.commit()  # the rejoin below starts each partition at its committed offset
        later = topics.create_topic(broker, f"{prefix}-later")
        write(broker, later, [(0, b"later")])
        deadline = time.monotonic() + TIMEOUT
        while b"later" not in seen and time.monotonic() < deadline:
            seen += [r.value for r in consumer.poll(0.2)]
        assert seen == [first.encode(), b"later"]
        assert {tp.topic for tp in consumer.assignment()} == {first, later}
