"""Inputs the wire cannot carry are refused where the application hands them over (issue 11, 5).

Each value here used to pass the argument or setting checks and fail later, encoding a request
or a record batch on the I/O thread, which then died and took the client with it (FatalError).
Now each is a typed usage or config error at the call, and nothing was queued or started.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from eosclient import (
    ConfigError,
    ConsumerGroupMetadata,
    RecordTypeError,
    TopicPartition,
    TransactionalProducer,
    UnknownPartitionError,
)
from eosclient._consumer import args as consumer_args
from eosclient._core.accumulator import RecordAccumulator
from eosclient._core.encoder import encode_batch
from eosclient._core.limits import INT64_MAX, string_problem
from eosclient._core.records import check_headers, check_timestamp
from eosclient._core.types import TopicPartition as TP
from eosclient._net.node import NodeConnection, Phase
from eosclient._producer import args as producer_args
from eosclient._protocol.apis import APIS
from eosclient.config import ConsumerConfig, ProducerConfig
from eosclient.errors import ApiKey, InvalidGroupIdError, KafkaConnectionError

TOO_LONG = "x" * 32_768
SURROGATE = "bad\udcffname"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- the limits --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a", "x" * 32_767, "é" * 16_383, "🦀" * 8_191])
def test_strings_that_fit_an_int16_length(value: str) -> None:
    assert string_problem(value) is None


@pytest.mark.parametrize("value", [TOO_LONG, "é" * 16_384, "🦀" * 8_192, SURROGATE,
                                   SURROGATE * 10_000])
def test_strings_that_do_not_fit(value: str) -> None:
    assert string_problem(value) is not None


# -- records: timestamps and headers -----------------------------------------------------------


@pytest.mark.parametrize("stamp", [2**63, 2**64, -1, -(2**63)])
def test_a_timestamp_outside_0_to_int64_is_refused(stamp: int) -> None:
    # 2**63 passed, then struct.error packing the batch's baseTimestamp killed the I/O thread.
    with pytest.raises(RecordTypeError, match="timestamp_ms"):
        check_timestamp(stamp)


def test_any_two_accepted_timestamps_encode_in_one_batch() -> None:
    # The int64 timestampDelta: the extremes of the accepted range, both ways round.
    for first, second in ((0, INT64_MAX), (INT64_MAX, 0)):
        assert (check_timestamp(first), check_timestamp(second)) == (first, second)
        data = encode_batch([(first, None, b"a", ()), (second, None, b"b", ())])
        assert len(data) > 61


def test_the_accumulator_refuses_a_bad_timestamp_and_queues_nothing() -> None:
    acc = RecordAccumulator()
    with pytest.raises(RecordTypeError):
        acc.append(TP("t", 0), None, b"v", timestamp_ms=2**63, now=0.0, generation=0)
    with pytest.raises(RecordTypeError):
        acc.append_many(TP("t", 0), [b"v"], timestamp_ms=-5, now=0.0, generation=0)
    assert acc.unsent_records() == 0


def test_a_header_key_utf8_cannot_encode_is_refused_and_queues_nothing() -> None:
    # It raised UnicodeEncodeError from the encoder, under the producer's lock, after an empty
    # batch had been opened for the record: a batch of 0 records left to drain.
    with pytest.raises(RecordTypeError, match="header key"):
        check_headers([(SURROGATE, b"v")])
    acc = RecordAccumulator()
    with pytest.raises(RecordTypeError):
        acc.append(TP("t", 0), None, b"v", [(SURROGATE, b"v")], timestamp_ms=1, now=0.0,
                   generation=0)
    assert list(acc._queues) == []


def test_send_refuses_a_bad_timestamp_before_anything_is_queued() -> None:
    producer = TransactionalProducer(f"127.0.0.1:{closed_port()}", transactional_id="t",
                                     max_block_ms=100)
    try:
        with pytest.raises(RecordTypeError, match="timestamp_ms"):
            producer.send("t", b"v", timestamp_ms=2**63)
        assert producer._sender.acc.unsent_records() == 0
    finally:
        producer.close(0)


# -- producer arguments that go into requests ---------------------------------------------------


@pytest.mark.parametrize("topic", [TOO_LONG, SURROGATE])
def test_a_topic_that_does_not_fit_a_string_is_refused(topic: str) -> None:
    # It went into the Metadata request (or AddPartitionsToTxn) and crashed its encoding.
    with pytest.raises(RecordTypeError, match="topic"):
        producer_args.topic_of(topic)
    with pytest.raises(RecordTypeError):
        producer_args.partitions_of([TopicPartition(topic, 0)])


def test_a_partition_past_int32_is_refused() -> None:
    # A declared partition went into AddPartitionsToTxn as an int32: struct.error there.
    with pytest.raises(UnknownPartitionError):
        producer_args.partition_of(2**31)
    with pytest.raises(UnknownPartitionError):
        producer_args.partitions_of([TopicPartition("t", 2**31)])
    assert producer_args.partition_of(2**31 - 1) == 2**31 - 1


def test_an_offset_past_int64_is_refused() -> None:
    # send_offsets_to_transaction put it into TxnOffsetCommit as an int64.
    with pytest.raises(ValueError, match="offset"):
        producer_args.offsets_of({TopicPartition("t", 0): 2**63})
    with pytest.raises(ValueError, match="offset"):
        consumer_args.offset_of(2**63, TopicPartition("t", 0))


@pytest.mark.parametrize("group", [TOO_LONG, SURROGATE])
def test_a_group_id_that_does_not_fit_a_string_is_refused(group: str) -> None:
    with pytest.raises(InvalidGroupIdError):
        producer_args.group_id_of(group)
    with pytest.raises(InvalidGroupIdError):
        producer_args.group_of(group)
    with pytest.raises(ValueError, match="group_id"):
        ConsumerGroupMetadata(group)


@pytest.mark.parametrize("fields", [{"member_id": TOO_LONG}, {"group_instance_id": SURROGATE},
                                    {"generation_id": 2**31}, {"generation_id": -2}])
def test_group_metadata_that_does_not_fit_the_wire_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ConsumerGroupMetadata("g", **fields)


def test_consumer_topics_and_partitions_are_checked_against_the_wire() -> None:
    with pytest.raises(ValueError, match="topic"):
        consumer_args.topics_of([TOO_LONG])
    with pytest.raises(ValueError, match="topic"):
        consumer_args.partition_of(TopicPartition(SURROGATE, 0))
    with pytest.raises(ValueError, match="partition"):
        consumer_args.partition_of(TopicPartition("t", 2**31))


# -- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("cls", "key"), [
    (ProducerConfig, "client_id"), (ProducerConfig, "transactional_id"),
    (ConsumerConfig, "client_id"), (ConsumerConfig, "group_id"),
    (ConsumerConfig, "group_instance_id"),
])
@pytest.mark.parametrize("value", [TOO_LONG, SURROGATE])
def test_a_text_setting_that_does_not_fit_a_string_is_a_config_error(
        cls: Any, key: str, value: str) -> None:
    # A client_id of 32,768 characters crashed the I/O thread at its first request header.
    with pytest.raises(ConfigError) as caught:
        cls(bootstrap_servers="127.0.0.1:9092", **{key: value})
    assert caught.value.key == key


def test_a_dotted_text_setting_is_named_as_spelled() -> None:
    with pytest.raises(ConfigError) as caught:
        ProducerConfig.from_kafka({"bootstrap.servers": "h:1", "client.id": TOO_LONG})
    assert caught.value.key == "client.id"


def test_the_producer_refuses_a_long_client_id_before_starting() -> None:
    with pytest.raises(ConfigError, match="client_id"):
        TransactionalProducer("127.0.0.1:9092", client_id=TOO_LONG)


@pytest.mark.parametrize("server", ["x..y:9092", f"{'a' * 64}.example:9092"])
def test_a_bootstrap_host_name_that_cannot_be_looked_up_is_a_config_error(server: str) -> None:
    # getaddrinfo raised UnicodeError (not OSError) on the I/O thread: it crashed.
    with pytest.raises(ConfigError, match="bootstrap"):
        ProducerConfig(bootstrap_servers=server)


def test_an_unencodable_host_from_metadata_is_a_failed_connect() -> None:
    # A broker's Metadata may name such a host: UnicodeError escaped start() and the I/O thread.
    # (Now on the resolver thread, its UnicodeError handed to the connection by the future.)
    conn = NodeConnection(1, ("x..y", 9092), client_id="c", setup_timeout=30.0, start_at=0.0)
    conn.start(0.0)
    for _ in range(500):
        conn.expire(0.0)
        if conn.phase is Phase.CLOSED:
            break
        time.sleep(0.01)
    assert conn.phase is Phase.CLOSED and "resolve" in str(conn.failure)
    got: list[Any] = []
    conn.send(_metadata_request(), got.append, 0.0, 1.0)
    assert isinstance(conn.take_answers()[0].error, KafkaConnectionError)


def _metadata_request() -> Any:
    return APIS[ApiKey.METADATA].request(topics=[], allow_auto_topic_creation=False)
