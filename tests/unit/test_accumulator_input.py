"""What the accumulator accepts, sans-IO: bad input refused before anything is queued, where
records go (murmur2 against Java's vectors, sticky partitions, custom partitioners), and what
``buffer.memory`` counts (every way a batch settles gives its bytes back: a leak would block
``send()`` for ever)."""

from __future__ import annotations

import random
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_murmur2
from kafka.record.memory_records import MemoryRecords

from eosclient._core.accumulator import AccumulatorSettings, ReadyBatch, RecordAccumulator
from eosclient._core.decode import decode_batches
from eosclient._core.delivery import RecordDelivery
from eosclient._core.encoder import BatchWriter
from eosclient._core.partitioner import (
    StickyPartitions,
    default_partitioner,
    murmur2,
    partition_for,
)
from eosclient._core.records import check_headers
from eosclient._core.types import ProducerIdentity, TopicPartition
from eosclient.errors import (
    AbortableError,
    ConfigError,
    RecordTooLargeError,
    RecordTypeError,
    UsageError,
)

ID, BUMPED = ProducerIdentity(7000, 3), ProducerIdentity(7000, 4)
TP0, TP1 = TopicPartition("out", 0), TopicPartition("out", 1)
TS = 1_700_000_000_000
VALUE = b"v" * 100


class Every:
    """A drain gate that allows everything."""

    def may_drain(self, tp: TopicPartition, generation: int) -> bool:
        return True

    def may_resend(self, tp: TopicPartition) -> bool:
        return True


def accumulator(**overrides: Any) -> RecordAccumulator:
    return RecordAccumulator(AccumulatorSettings(**overrides), identity=ID,
                             sticky=StickyPartitions(random.Random(0)))


def put(acc: RecordAccumulator, tp: TopicPartition = TP0, value: bytes | None = VALUE,
        **kwargs: Any) -> RecordDelivery:
    return acc.append(tp, kwargs.pop("key", None), value, kwargs.pop("headers", None),
                      timestamp_ms=TS, now=0.0, generation=0)


def flush(acc: RecordAccumulator) -> dict[TopicPartition, Any]:
    return acc.drain(Every(), 0.0, flush=True)


def decoded(acc: RecordAccumulator) -> list[Any]:
    batch = MemoryRecords(flush(acc)[TP0].data).next_batch()
    assert batch is not None
    return list(batch)


# -- bad input is rejected before anything is queued ---------------------------------------


def test_a_record_over_max_request_size_is_rejected_before_queueing() -> None:
    acc = accumulator(max_request_size=1000)
    with pytest.raises(RecordTooLargeError, match=r"max\.request\.size") as info:
        put(acc, value=b"x" * 1000)
    assert isinstance(info.value, UsageError) and isinstance(info.value, ValueError)
    assert acc.unsent_records() == 0 and flush(acc) == {}


def test_bulk_with_one_oversized_record_queues_none() -> None:
    acc = accumulator(max_request_size=1000)
    with pytest.raises(RecordTooLargeError):
        acc.append_many(TP0, [b"ok", b"ok", b"x" * 1000], timestamp_ms=TS, now=0, generation=0)
    assert acc.unsent_records() == 0


@pytest.mark.parametrize(("key", "value"), [(None, "text"), ("text", b"v"), (None, 42)])
def test_non_bytes_key_or_value_is_rejected(key: object, value: object) -> None:
    acc = accumulator()
    with pytest.raises(RecordTypeError, match="serializer") as info:
        acc.append(TP0, key, value, timestamp_ms=TS, now=0, generation=0)
    assert isinstance(info.value, UsageError) and isinstance(info.value, TypeError)
    with pytest.raises(RecordTypeError):
        acc.append_many(TP0, [b"ok", value], [b"k", key], timestamp_ms=TS, now=0, generation=0)
    assert acc.unsent_records() == 0


@pytest.mark.parametrize("headers", [[("k", 42)], [(b"k", b"v")], [("only-key",)],
                                     [("k", "\ud800")]])
def test_bad_headers_are_rejected(headers: Any) -> None:
    acc = accumulator()
    with pytest.raises(RecordTypeError):
        put(acc, headers=headers)
    assert acc.unsent_records() == 0


@pytest.mark.parametrize("stamp", [1.5e12, True, "now"])
def test_a_non_int_timestamp_is_rejected(stamp: Any) -> None:
    acc = accumulator()
    with pytest.raises(RecordTypeError, match="timestamp_ms"):
        acc.append(TP0, None, b"v", timestamp_ms=stamp, now=0, generation=0)


def test_serializers_turn_objects_into_bytes() -> None:
    acc = accumulator(key_serializer=lambda k: str(k).encode(),
                      value_serializer=lambda v: repr(v).encode())
    acc.append(TP0, 12, {"a": 1}, timestamp_ms=TS, now=0, generation=0)
    acc.append_many(TP0, [[1], [2]], ["x", "y"], timestamp_ms=TS, now=0, generation=0)
    records = decoded(acc)
    assert [(r.key, r.value) for r in records] == [
        (b"12", b"{'a': 1}"), (b"x", b"[1]"), (b"y", b"[2]")]


def test_mismatched_keys_and_values_are_rejected() -> None:
    with pytest.raises(ValueError, match="2 keys for 1 values"):
        accumulator().append_many(TP0, [b"v"], [b"a", b"b"], timestamp_ms=TS, now=0,
                                  generation=0)


def test_bad_settings_name_the_kafka_key() -> None:
    with pytest.raises(ConfigError) as info:
        AccumulatorSettings(linger_ms=-1)
    assert info.value.key == "linger.ms"



# -- partitioning ----------------------------------------------------------------------------

# Kafka's UtilsTest.testMurmur2 (signed Java ints), plus Sarama's JVM-generated byte vector.
JAVA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    (bytes([12, 42, 56, 24, 109, 111]), 274204207),
]


@pytest.mark.parametrize(("key", "expected"), JAVA_MURMUR2)
def test_murmur2_matches_java(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected
    assert partition_for(key, 2**31 - 1) == (expected & 0x7FFFFFFF) % (2**31 - 1)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_murmur2_matches_kafka_pythons_on_any_key(key: bytes) -> None:
    # Our word-at-a-time version against kafka-python's byte-by-byte one (a port of Java's).
    expected = kafka_murmur2(key)
    assert murmur2(key) == (expected - (1 << 32) if expected & (1 << 31) else expected)
    assert murmur2(bytearray(key)) == murmur2(memoryview(key)) == murmur2(key)


def test_keyed_records_land_where_java_puts_them() -> None:
    assert [partition_for(k, 12) for k, _ in JAVA_MURMUR2] == [
        (h & 0x7FFFFFFF) % 12 for _, h in JAVA_MURMUR2]
    acc = accumulator()
    assert acc.choose_partition("t", b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for(b"k", 0)


def test_keyless_records_stick_to_a_partition_until_its_batch_fills() -> None:
    acc = accumulator(batch_size=1024)
    chosen = []
    for _ in range(30):
        partition = acc.choose_partition("out", None, 3)
        chosen.append(partition)
        put(acc, tp=TopicPartition("out", partition))
    runs = [p for i, p in enumerate(chosen) if i == 0 or p != chosen[i - 1]]
    assert len(runs) >= 3 and all(b == (a + 1) % 3 for a, b in pairwise(runs))


def test_a_custom_partitioner_is_used() -> None:
    acc = accumulator(partitioner=lambda topic, key, n: n - 1)
    assert acc.choose_partition("t", b"k", 4) == 3
    assert default_partitioner("t", None, 4) is None
    bad = accumulator(partitioner=lambda topic, key, n: n)
    with pytest.raises(ValueError, match="chose 4 of 4"):
        bad.choose_partition("t", b"k", 4)


# -- buffer.memory -----------------------------------------------------------------------------


def hold(acc: RecordAccumulator, tp: TopicPartition = TP0, value: bytes = VALUE,
         generation: int = 0, now: float = 0.0) -> None:
    acc.append(tp, None, value, None, timestamp_ms=0, now=now, generation=generation)


def test_each_open_batch_counts_what_it_may_take_until_it_settles() -> None:
    acc = accumulator(batch_size=1000, buffer_memory=2500)
    hold(acc)
    hold(acc)  # the same batch
    assert (acc.budget.used, acc.budget.full) == (1000, False)
    hold(acc, tp=TP1)
    hold(acc, tp=TP1, generation=1)  # a new generation opens a new batch
    assert (acc.budget.used, acc.budget.full) == (3000, True)
    ready = acc.drain(Every(), 0.0, flush=True)
    assert acc.budget.used == 3000  # drained is not settled: the bytes are still held
    acc.complete(ready[TP0], 0, base_offset=0)
    assert (acc.budget.used, acc.budget.full) == (2000, False)


def test_a_large_batch_size_costs_16_kib_a_batch_until_records_fill_it() -> None:
    # librdkafka's 1 MB batch.size would otherwise hold 32 open batches in 32 MB.
    acc = accumulator(batch_size=1_000_000, buffer_memory=33_554_432)
    for p in range(100):
        hold(acc, tp=TopicPartition("t", p))
    assert (acc.budget.used, acc.budget.full) == (100 * 16_384, False)


def fitting(limit: int, value: bytes = VALUE) -> int:
    """How many records of ``value`` one batch of ``limit`` bytes takes, made in one go."""
    writer = BatchWriter(limit)
    while writer.append(0, None, value):
        pass
    return writer.count


def test_a_batch_grows_by_doubling_up_to_batch_size() -> None:
    acc = accumulator(batch_size=100_000)
    seen = []
    for _ in range(1000):
        hold(acc)
        if acc.budget.used not in seen:
            seen.append(acc.budget.used)
    # the last: the first batch is full, a new one took the rest
    assert seen == [16_384, 32_768, 65_536, 100_000, 116_384]
    first = acc.drain(Every(), 0.0, flush=True)[TP0]
    assert first.ticket.record_count == fitting(100_000) and len(first.data) <= 100_000


def test_send_batch_records_grow_a_batch_too() -> None:
    acc = accumulator(batch_size=100_000)
    acc.append_many(TP0, [VALUE] * 1000, timestamp_ms=0, now=0.0, generation=0)
    assert acc.budget.used == 116_384
    assert acc.drain(Every(), 0.0, flush=True)[TP0].ticket.record_count == fitting(100_000)


def test_a_record_larger_than_batch_size_counts_its_own_size() -> None:
    acc = accumulator(batch_size=100, buffer_memory=10_000)
    hold(acc, value=b"x" * 5000)
    assert 5000 < acc.budget.used < 5100


def test_failed_expired_and_dropped_batches_give_their_bytes_back() -> None:
    acc = accumulator(batch_size=1000, delivery_timeout_ms=1000)
    hold(acc, generation=0)
    acc.fail_generation(0, AbortableError("aborted"))
    assert acc.budget.used == 0
    hold(acc, generation=1)
    hold(acc, tp=TP1, generation=1)
    acc.drain(Every(), 0.0, flush=True)
    acc.reset_identity(BUMPED)  # in flight under the old identity: failed
    assert acc.budget.used == 0
    hold(acc, generation=1, now=5.0)
    acc.expire(now=6.0)
    assert acc.budget.used == 0


def test_send_batch_headers_are_checked_like_sends_before_any_record_is_queued() -> None:
    acc = accumulator()
    with pytest.raises(RecordTypeError):
        acc.append_many(TP0, [b"a", b"b"], timestamp_ms=0, now=0.0, generation=0,
                        headers=[[("h", b"1")], [("h", 2)]])
    with pytest.raises(ValueError, match="header lists"):
        acc.append_many(TP0, [b"a", b"b"], timestamp_ms=0, now=0.0, generation=0,
                        headers=[[("h", b"1")]])
    assert acc.budget.used == 0  # nothing queued
    handle = acc.append_many(TP0, [b"a", b"b"], timestamp_ms=0, now=0.0, generation=0,
                             headers=[[("h", "x")], None])  # a str value goes as UTF-8
    ready = acc.drain(Every(), 0.0, flush=True)[TP0]
    assert [list(r.headers) for r in decode_batches(ready.data, TP0).batches[0].records()] == [
        [("h", b"x")], []]
    assert not handle.done()


def test_send_batch_records_count_per_batch() -> None:
    acc = accumulator(batch_size=1000)
    acc.append_many(TP0, [b"v" * 100] * 25, timestamp_ms=0, now=0.0, generation=0)
    opened = acc.budget.used // 1000
    assert opened >= 3  # ~9 records of 100 bytes a batch
    while ready := acc.drain(Every(), 0.0, flush=True):
        acc.complete(ready[TP0], 0, base_offset=0)
    assert acc.budget.used == 0


_OPS = st.lists(st.tuples(
    st.sampled_from(["append", "big", "drain", "ack", "retry", "fail", "bump", "expire"]),
    st.sampled_from([TP0, TP1])), max_size=50)


@settings(max_examples=200, deadline=None)
@given(_OPS)
def test_the_budget_is_what_unsettled_batches_hold(ops: list[tuple[str, TopicPartition]]) -> None:
    acc = accumulator(batch_size=400, delivery_timeout_ms=100_000)
    in_flight: list[ReadyBatch] = []
    generation, identity, now = 0, ID, 0.0
    for op, tp in ops:
        now += 1.0
        if op in ("append", "big"):
            hold(acc, tp=tp, value=b"v" * (1000 if op == "big" else 90), generation=generation,
                now=now)
        elif op == "drain":
            in_flight.extend(acc.drain(Every(), now, flush=True).values())
        elif op in ("ack", "retry") and in_flight:
            acc.complete(in_flight.pop(0), 0 if op == "ack" else 13, base_offset=0)
        elif op == "fail":
            acc.fail_generation(generation, AbortableError("aborted"))
            generation += 1
        elif op == "bump":
            identity = ProducerIdentity(identity.producer_id, identity.epoch + 1)
            acc.reset_identity(identity)
            in_flight.clear()
        elif op == "expire":
            acc.expire(now + 200.0)
            in_flight.clear()
        assert acc.budget.used >= 0
    acc.fail_generation(generation, AbortableError("aborted"))
    acc.expire(now + 1_000_000.0)  # whatever is still in flight or due for a resend
    assert acc.budget.used == 0 and not acc.budget.full


def test_str_header_values_are_encoded_as_utf8() -> None:
    # As confluent-kafka and kafka-python do; a str value used to be refused.
    assert check_headers([("a", "é"), ("b", b"x"), ("c", None)]) == [
        ("a", "é".encode()), ("b", b"x"), ("c", None)]
