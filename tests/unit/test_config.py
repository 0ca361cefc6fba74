"""ProducerConfig: keywords and Kafka's dotted keys, checked at construction, errors naming keys."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from eosclient import ConfigError, ProducerConfig, TransactionalProducer
from eosclient.config import ClientConfig, build

SERVERS = "127.0.0.1:9092"


def producer_config(config: dict[str, Any] | None = None, **given: Any) -> ProducerConfig:
    given.setdefault("bootstrap_servers", SERVERS)
    return build(ProducerConfig, given, config)


def test_defaults_are_kafkas() -> None:
    cfg = producer_config()
    assert cfg.bootstrap_servers == (SERVERS,)
    assert (cfg.linger_ms, cfg.batch_size, cfg.acks) == (5.0, 1_000_000, -1)
    assert (cfg.request_timeout_ms, cfg.delivery_timeout_ms) == (30_000, 120_000)
    assert cfg.max_in_flight_requests_per_connection == 5
    assert cfg.transactional_id is None and not cfg.transactional


def test_keywords_and_dotted_keys_set_the_same_fields() -> None:
    by_keyword = producer_config(linger_ms=7, transactional_id="t", compression_type="gzip")
    by_key = producer_config({"linger.ms": 7, "transactional.id": "t",
                              "compression.type": "GZIP"})
    assert by_keyword == by_key
    assert by_key.compression_type == "gzip"


def test_every_field_has_a_unique_kafka_key_and_a_check() -> None:
    keys = ProducerConfig.keys()
    assert len(keys) == len(dataclasses.fields(ProducerConfig))
    assert set(ClientConfig.keys()) < set(keys)
    for spec in dataclasses.fields(ProducerConfig):
        assert callable(spec.metadata["check"]) and spec.metadata["doc"]


def test_bootstrap_servers_accepts_a_string_or_a_list() -> None:
    assert producer_config(bootstrap_servers="a:1, b:2").bootstrap_servers == ("a:1", "b:2")
    assert producer_config(bootstrap_servers=["a:1", "[::1]:3"]).bootstrap_servers == (
        "a:1", "[::1]:3")


@pytest.mark.parametrize(("key", "suggestion"), [
    ("linger_ms", "linger.ms"),  # the Pythonic spelling inside the dotted dict
    ("lingr.ms", "linger.ms"),
    ("transactionalid", "transactional.id"),
    ("max.in.flight.request.per.connection", "max.in.flight.requests.per.connection"),
])
def test_a_typo_names_the_key_and_suggests_the_nearest(key: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as raised:
        producer_config({key: 1})
    assert raised.value.key == key
    assert f"did you mean {suggestion!r}" in str(raised.value)


def test_an_unknown_key_without_a_near_one_is_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown setting 'zzz'$"):
        producer_config({"zzz": 1})


@pytest.mark.parametrize(("key", "value"), [
    ("linger.ms", "5"), ("linger.ms", -1), ("linger.ms", float("nan")),
    ("batch.size", 0), ("batch.size", True), ("batch.size", 1.5),
    ("max.in.flight.requests.per.connection", 6), ("max.in.flight.requests.per.connection", 0),
    ("acks", 1), ("acks", 0), ("acks", "1"), ("enable.idempotence", False),
    ("compression.type", "brotli"), ("compression.type", 1),
    ("client.id", ""), ("transactional.id", 5), ("bootstrap.servers", "nohost"),
    ("bootstrap.servers", "h:99999"), ("bootstrap.servers", []),
    ("key.serializer", "str"), ("partitioner", None), ("request.timeout.ms", 0),
])
def test_a_wrong_type_or_value_names_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as raised:
        producer_config({key: value})
    assert raised.value.key == key
    assert str(raised.value).startswith(key)


@pytest.mark.parametrize("acks", ["all", -1, "-1"])
def test_acks_all_in_every_spelling(acks: object) -> None:
    assert producer_config({"acks": acks}).acks == -1


def test_keyword_errors_name_the_keyword() -> None:
    with pytest.raises(ConfigError) as raised:
        producer_config(linger_ms=-3)
    assert raised.value.key == "linger_ms"


def test_the_same_setting_twice_must_agree() -> None:
    assert producer_config({"linger.ms": 5}, linger_ms=5).linger_ms == 5
    with pytest.raises(ConfigError, match="given twice") as raised:
        producer_config({"linger.ms": 6}, linger_ms=5)
    assert raised.value.key == "linger.ms"


def test_settings_checked_together() -> None:
    with pytest.raises(ConfigError) as raised:
        producer_config({"delivery.timeout.ms": 1_000, "request.timeout.ms": 5_000})
    assert raised.value.key == "delivery.timeout.ms"
    with pytest.raises(ConfigError) as raised:
        producer_config({"retry.backoff.ms": 500, "retry.backoff.max.ms": 100})
    assert raised.value.key == "retry.backoff.max.ms"


def test_bootstrap_servers_is_required() -> None:
    with pytest.raises(ConfigError) as raised:
        build(ProducerConfig, {}, {})
    assert raised.value.key == "bootstrap.servers"


def test_direct_construction_and_from_kafka_check_too() -> None:
    with pytest.raises(ConfigError, match="batch_size"):
        ProducerConfig(bootstrap_servers=(SERVERS,), batch_size=0)
    cfg = ProducerConfig.from_kafka({"bootstrap.servers": SERVERS, "client.id": "me"})
    assert cfg.client_id == "me"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.client_id = "other"  # type: ignore[misc]


def test_the_producer_refuses_bad_settings_before_starting_anything() -> None:
    with pytest.raises(ConfigError, match="acks"):
        TransactionalProducer(SERVERS, config={"acks": 1})
    with pytest.raises(ConfigError, match="not both"):
        TransactionalProducer(SERVERS, config=producer_config())
    with pytest.raises(ConfigError, match="given twice"):
        TransactionalProducer(SERVERS, transactional_id="a", config={"transactional.id": "b"})


def test_serializers_and_partitioner_are_callables() -> None:
    def partition_zero(topic: str, key: bytes | None, count: int) -> int:
        return 0

    cfg = producer_config({"key.serializer": str.encode, "partitioner": partition_zero})
    assert cfg.key_serializer is str.encode and cfg.partitioner is partition_zero
