"""ConsumerConfig and the consumer's argument checks: errors at the call, naming what is wrong.

No broker: the consumer is pointed at a port nobody listens on, and every check here runs before
anything would be sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from eosclient import (
    ConfigError,
    ConsumerConfig,
    IllegalStateError,
    ReadCommittedConsumer,
    TopicPartition,
)
from eosclient._consumer.assignors import ASSIGNORS, COOPERATIVE_STICKY
from eosclient.config import ClientConfig, build

SERVERS = "127.0.0.1:1"
TP = TopicPartition("t", 0)


def consumer_config(config: dict[str, Any] | None = None, **given: Any) -> ConsumerConfig:
    given.setdefault("bootstrap_servers", SERVERS)
    return build(ConsumerConfig, given, config)


def test_defaults_are_kafkas_except_where_exactly_once_needs_otherwise() -> None:
    cfg = consumer_config()
    assert (cfg.isolation_level, cfg.auto_offset_reset, cfg.enable_auto_commit) == (
        "read_committed", "latest", False)
    assert (cfg.fetch_max_bytes, cfg.max_partition_fetch_bytes, cfg.fetch_max_wait_ms) == (
        52_428_800, 1_048_576, 500)
    assert (cfg.session_timeout_ms, cfg.heartbeat_interval_ms, cfg.max_poll_interval_ms) == (
        45_000, 3_000, 300_000)
    assert cfg.partition_assignment_strategy == ("range", "roundrobin") and cfg.read_committed
    assert cfg.check_crcs is True  # Java's default; librdkafka's is False (see config.py)


def test_every_field_has_a_unique_kafka_key() -> None:
    keys = ConsumerConfig.keys()
    assert len(keys) == len(dataclasses.fields(ConsumerConfig))
    assert set(ClientConfig.keys()) < set(keys)


def test_dotted_keys_and_keywords_agree() -> None:
    by_key = consumer_config({"group.id": "g", "isolation.level": "READ_UNCOMMITTED",
                              "partition.assignment.strategy": "roundrobin, range",
                              "check.crcs": False})
    by_keyword = consumer_config(group_id="g", isolation_level="read_uncommitted",
                                 partition_assignment_strategy=["roundrobin", "range"],
                                 check_crcs=False)
    assert by_key == by_keyword and not by_key.read_committed


@pytest.mark.parametrize(("key", "value"), [
    ("isolation.level", "read_dirty"), ("auto.offset.reset", "smallest"),
    ("enable.auto.commit", True), ("fetch.max.bytes", 0), ("max.poll.records", 0),
    ("partition.assignment.strategy", "stiky"), ("partition.assignment.strategy", []),
    ("partition.assignment.strategy", "sticky,cooperative_sticky"),
    ("partition.assignment.strategy", "range,range"), ("group.id", ""),
    ("session.timeout.ms", "45000"), ("read.committed.max.held.bytes", 0),
    ("check.crcs", "false"), ("check.crcs", 0),
])
def test_a_bad_value_names_its_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as raised:
        consumer_config({key: value})
    assert raised.value.key == key and str(raised.value).startswith(key)


def test_the_settings_offer_exactly_the_assignors_the_membership_runs() -> None:
    assert consumer_config(partition_assignment_strategy="sticky, range") \
        .partition_assignment_strategy == ("sticky", "range")
    for names in ASSIGNORS:
        assert consumer_config(partition_assignment_strategy=names)
    assert COOPERATIVE_STICKY in ASSIGNORS


def test_cooperative_sticky_is_offered_alone_or_beside_an_eager_assignor() -> None:
    # It used to be refused while the membership spoke only the eager protocol.
    assert consumer_config(partition_assignment_strategy="cooperative-sticky") \
        .partition_assignment_strategy == ("cooperative-sticky",)
    assert consumer_config(partition_assignment_strategy=["cooperative-sticky", "range"]) \
        .partition_assignment_strategy == ("cooperative-sticky", "range")


def test_settings_checked_together() -> None:
    with pytest.raises(ConfigError) as raised:
        consumer_config({"heartbeat.interval.ms": 10_000, "session.timeout.ms": 6_000})
    assert raised.value.key == "heartbeat.interval.ms"
    with pytest.raises(ConfigError) as raised:
        consumer_config({"fetch.max.wait.ms": 40_000})
    assert raised.value.key == "fetch.max.wait.ms"


def test_the_consumer_refuses_bad_settings_before_starting_anything() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'fetch\.max\.bytes'"):
        ReadCommittedConsumer(SERVERS, config={"fetch.max.byte": 1})
    with pytest.raises(ConfigError, match="isolation_level"):
        ReadCommittedConsumer(SERVERS, isolation_level="dirty")
    with pytest.raises(ConfigError, match="not both"):
        ReadCommittedConsumer(SERVERS, group_id="g", config=consumer_config())


@pytest.fixture
def consumer() -> Iterator[ReadCommittedConsumer]:
    c = ReadCommittedConsumer(SERVERS, group_id="g")
    yield c
    c.close(timeout=1)


@pytest.mark.parametrize(("call", "error"), [
    (lambda c: c.assign([("t", -1)]), ValueError),
    (lambda c: c.assign(["t"]), TypeError),
    (lambda c: c.assign(TP), TypeError),
    (lambda c: c.subscribe("t"), TypeError),
    (lambda c: c.subscribe([]), ValueError),
    (lambda c: c.poll(timeout=-1), ValueError),
    (lambda c: c.poll(max_records=0), ValueError),
    (lambda c: c.commit({TP: -1}), ValueError),
    (lambda c: c.commit({TP: 1.5}), TypeError),
    (lambda c: c.seek(TP, 0), IllegalStateError),  # not assigned
    (lambda c: c.position(TP), IllegalStateError),
])
def test_bad_input_is_refused_at_the_call(consumer: ReadCommittedConsumer, call: Any,
                                          error: type[Exception]) -> None:
    with pytest.raises(error):
        call(consumer)


def test_a_negative_seek_is_refused_and_changes_nothing(consumer: ReadCommittedConsumer) -> None:
    consumer.assign([TP])
    consumer.seek(TP, 3)
    with pytest.raises(ValueError, match="seek_to_beginning"):
        consumer.seek(TP, -2)
    assert consumer.position(TP, timeout=1) == 3


def test_assign_and_subscribe_do_not_mix(consumer: ReadCommittedConsumer) -> None:
    consumer.assign([TP])
    with pytest.raises(IllegalStateError, match="subscribe"):
        consumer.subscribe(["t"])
    consumer.assign([])
    consumer.subscribe(["t"])
    with pytest.raises(IllegalStateError, match="assign"):
        consumer.assign([TP])


def test_group_calls_need_a_group_id() -> None:
    with ReadCommittedConsumer(SERVERS) as c:
        for call in (lambda: c.subscribe(["t"]), c.commit, lambda: c.committed([TP]),
                     c.group_metadata):
            with pytest.raises(IllegalStateError, match="group_id"):
                call()


def test_a_closed_consumer_refuses_every_call() -> None:
    c = ReadCommittedConsumer(SERVERS, group_id="g")
    c.close()
    c.close()  # idempotent
    for call in (c.poll, lambda: c.assign([TP]), lambda: c.commit({TP: 1}),
                 lambda: c.committed([TP])):
        with pytest.raises(IllegalStateError, match="closed"):
            call()


def test_group_metadata_outside_the_group_carries_no_generation(
        consumer: ReadCommittedConsumer) -> None:
    metadata = consumer.group_metadata()
    assert (metadata.group_id, metadata.generation_id, metadata.member_id) == ("g", -1, "")


def test_group_instance_id_by_key_and_keyword() -> None:
    assert consumer_config({"group.instance.id": "i-1"}) == consumer_config(
        group_instance_id="i-1")
    assert consumer_config().group_instance_id is None
    with pytest.raises(ConfigError) as info:
        consumer_config({"group.instance.id": ""})
    assert info.value.key == "group.instance.id"
