"""The consumer's deserializers on drained records, without a broker: what is delivered, and
where each failed partition is rewound to."""

from __future__ import annotations

import json

from eosclient import DeserializationError, TopicPartition
from eosclient._consumer.deserialize import deserialize
from eosclient._consumer.ready import ConsumerRecord


def rec(partition: int, offset: int, value: bytes | None, key: bytes | None = b"k",
        ) -> ConsumerRecord:
    return ConsumerRecord("t", partition, offset, key, value, (), 0)


def test_a_failed_partition_stops_at_its_record_and_the_others_go_on() -> None:
    drained = [rec(0, 5, b"1"), rec(1, 7, b"oops"), rec(0, 6, b"bad"), rec(1, 8, b"2"),
               rec(0, 7, b"3"), rec(2, 0, None)]
    done = deserialize(drained, bytes.decode, json.loads)
    assert [(r.partition, r.offset, r.key, r.value) for r in done.records] == [
        (0, 5, "k", 1), (2, 0, "k", None)]  # a tombstone is not passed to the deserializer
    assert done.rewind == {TopicPartition("t", 1): 7, TopicPartition("t", 0): 6}
    error = done.error
    assert isinstance(error, DeserializationError)
    assert (error.partition, error.offset, error.field) == (1, 7, "value")  # the first one
    assert isinstance(error.__cause__, ValueError)


def test_a_key_deserializer_failure_names_the_key() -> None:
    def strict(data: bytes) -> str:
        raise UnicodeDecodeError("utf-8", data, 0, 1, "not text")

    done = deserialize([rec(3, 9, b"v", key=b"\xff")], strict, None)
    assert done.records == [] and done.rewind == {TopicPartition("t", 3): 9}
    assert done.error is not None and done.error.field == "key"
    assert "t-3 at offset 9: the key deserializer raised UnicodeDecodeError" in str(done.error)


def test_without_failures_nothing_is_rewound() -> None:
    done = deserialize([rec(0, 1, b"a", key=None)], None, bytes.upper)
    assert done.records == [rec(0, 1, b"A", key=None)]
    assert done.rewind == {} and done.error is None
