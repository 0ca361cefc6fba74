"""The record batch v2 encoder, cross-checked: golden bytes built by hand from the spec, and
kafka-python's decoder reading back every batch Hypothesis can think of (keys, values, headers,
timestamps, codecs, both append paths). confluent-kafka reads what it writes in
tests/integration/test_encoder_interop.py."""

from __future__ import annotations

import struct
from typing import Any

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import encode_varint

from eosclient._core.encoder import HEADER_SIZE, BatchWriter, encode_batch, varint
from eosclient._core.records import Compression, available_compressions, record_size_bound

TS = 1_700_000_000_000  # 0x0000018BCFE56800

# A transactional batch of three records, byte by byte from the v2 format (KIP-98). Every varint
# is zigzag: 1 -> 02, -1 -> 01, 5 -> 0a.
GOLDEN = bytes.fromhex(
    "0000000000000000"  # baseOffset 0 (the broker assigns offsets)
    "00000055"  # batchLength: 85 = 61 - 12 + 36 bytes of records
    "ffffffff"  # partitionLeaderEpoch -1, as Java's producer writes it
    "02"  # magic 2
    "f368b0f4"  # CRC-32C of attributes .. end
    "0010"  # attributes: no codec, CreateTime, transactional (bit 4)
    "00000002"  # lastOffsetDelta 2
    "0000018bcfe56800"  # baseTimestamp: the first record's
    "0000018bcfe56805"  # maxTimestamp: TS + 5
    "00000000000003e8"  # producerId 1000
    "0002"  # producerEpoch 2
    "00000007"  # baseSequence 7
    "00000003"  # recordsCount 3
    # r0: length 13 | attrs | ts +0 | offset 0 | key "k" | value "v1" | 1 header h=x
    "1a" "00" "00" "00" "026b" "047631" "02" "0268" "0278"
    # r1: length 14 | attrs | ts +5 | offset 1 | null key | value "value" | 1 header n=null
    "1c" "00" "0a" "02" "01" "0a76616c7565" "02" "026e" "01"
    # r2: length 6 | attrs | ts -1 | offset 2 | empty key | null value (tombstone) | 0 headers
    "0c" "00" "01" "04" "00" "01" "00"
)
GOLDEN_RECORDS: list[tuple[int, bytes | None, bytes | None, list[Any]]] = [
    (TS, b"k", b"v1", [("h", b"x")]),
    (TS + 5, None, b"value", [("n", None)]),
    (TS - 1, b"", None, []),
]


def decode(data: bytes) -> DefaultRecordBatch:
    records = MemoryRecords(data)
    batch = records.next_batch()
    assert batch is not None and records.next_batch() is None
    assert batch.validate_crc()
    return batch


def build(writer: BatchWriter, **kwargs: Any) -> bytes:
    state = {"producer_id": 4000, "producer_epoch": 3, "base_sequence": 11,
             "transactional": True} | kwargs
    return writer.build(**state)


# -- golden bytes ----------------------------------------------------------------------------


def test_golden_batch_is_encoded_byte_for_byte() -> None:
    data = encode_batch(GOLDEN_RECORDS, producer_id=1000, producer_epoch=2, base_sequence=7,
                        transactional=True)
    assert data == GOLDEN


def test_golden_batch_is_self_consistent_and_decodes_with_kafka_python() -> None:
    assert struct.unpack(">I", GOLDEN[17:21])[0] == crc32c.crc32c(GOLDEN[21:])
    assert len(GOLDEN) == HEADER_SIZE + 36
    batch = decode(GOLDEN)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1000, 2, 7)
    assert batch.is_transactional and not batch.is_control_batch
    got = [(r.timestamp, r.key, r.value, r.headers, r.offset) for r in batch]
    assert got == [(*record, offset) for offset, record in enumerate(GOLDEN_RECORDS)]


@pytest.mark.parametrize("n", [0, 1, -1, 63, 64, -64, -65, 8191, 8192, 2**31 - 1, -(2**31),
                               2**63 - 1, -(2**63)])
def test_varint_matches_kafka_python(n: int) -> None:
    expected = bytearray()
    encode_varint(n, expected.append)
    assert varint(n) == bytes(expected)


# -- size limits -----------------------------------------------------------------------------


def test_a_record_that_does_not_fit_changes_nothing_and_a_first_always_fits() -> None:
    writer = BatchWriter(limit=200)
    assert writer.append(TS, None, b"x" * 500)  # alone in its batch, however large
    assert not writer.append(TS, None, b"y")
    assert writer.count == 1 and writer.size == len(build(writer))
    small = BatchWriter(limit=HEADER_SIZE + 2 * 9)
    assert small.append(TS, None, b"ab") and small.append(TS, None, b"cd")
    assert not small.append(TS, None, b"ef")
    assert [r.value for r in decode(build(small))] == [b"ab", b"cd"]


def test_add_answers_the_offset_delta_or_minus_one_changing_nothing() -> None:
    writer = BatchWriter(limit=HEADER_SIZE + 2 * 9)
    assert writer.add(TS, None, b"ab") == 0
    assert writer.add(TS + 1, b"k", None, [("h", b"v")]) == -1  # does not fit
    assert writer.add(TS + 1, None, b"cd") == 1
    assert writer.add(TS + 1, None, b"ef") == -1
    assert [r.value for r in decode(build(writer))] == [b"ab", b"cd"]


def test_a_sealed_or_built_writer_refuses_every_later_record() -> None:
    # send()'s shortcut holds a batch's add(): once the batch is closed or drained, a record
    # put there would be lost or land behind a newer batch's records.
    sealed = BatchWriter(limit=1 << 20)
    sealed.append(TS, None, b"a")
    sealed.seal()
    assert sealed.add(TS, None, b"b") == -1 and not sealed.append(TS, b"k", b"b", [("h", None)])
    assert [r.value for r in decode(build(sealed))] == [b"a"]
    built = BatchWriter(limit=1 << 20)
    built.append(TS, None, b"a")
    build(built)
    assert built.add(TS, None, b"b") == -1 and built.count == 1


def test_append_values_stops_where_the_batch_is_full_and_resumes_there() -> None:
    values = [b"v%03d" % i for i in range(300)]
    batches, start = [], 0
    while start < len(values):
        writer = BatchWriter(limit=1024)
        start = writer.append_values(TS, None, values, start)
        assert writer.size <= 1024
        batches.append(build(writer))
    assert [r.value for data in batches for r in decode(data)] == values


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=200)), max_size=80),
       st.one_of(st.none(), st.integers(0, 200)))
def test_append_values_writes_the_same_bytes_as_appending_one_by_one(
        values: list[bytes | None], delta: int | None) -> None:
    # The bulk loop is a second encoder of the same format: it must agree with the first.
    one, many = BatchWriter(limit=4096), BatchWriter(limit=4096)
    if delta is not None:  # an open batch whose first record is older
        one.append(TS - delta, b"first", b"record")
        many.append(TS - delta, b"first", b"record")
    appended = 0
    while appended < len(values) and one.append(TS, None, values[appended]):
        appended += 1
    assert many.append_values(TS, None, values) == appended
    if one.count:
        assert build(one) == build(many)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=300)),
                          st.one_of(st.none(), st.binary(max_size=300))), max_size=80),
       st.one_of(st.none(), st.integers(0, 200)), st.sampled_from([600, 4096, 1 << 16]))
def test_keyed_append_values_writes_the_same_bytes_as_appending_one_by_one(
        records: list[tuple[bytes | None, bytes | None]], delta: int | None, limit: int) -> None:
    keys, values = [k for k, _ in records], [v for _, v in records]
    one, many = BatchWriter(limit=limit), BatchWriter(limit=limit)
    if delta is not None:
        one.append(TS - delta, b"first", b"record")
        many.append(TS - delta, b"first", b"record")
    appended = 0
    while appended < len(values) and one.append(TS, keys[appended], values[appended]):
        appended += 1
    assert many.append_values(TS, keys, values) == appended
    assert (many.count, many.size) == (one.count, one.size)
    if one.count:
        assert build(one) == build(many)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=40)),
                          st.one_of(st.none(), st.binary(max_size=200)),
                          st.lists(st.tuples(st.text(max_size=8),
                                             st.one_of(st.none(), st.binary(max_size=30))),
                                   max_size=2)), max_size=60),
       st.booleans(), st.sampled_from([600, 4096]))
def test_append_values_with_headers_writes_the_same_bytes_as_appending_one_by_one(
        records: list[Any], keyed: bool, limit: int) -> None:
    # send_batch(headers=...) (the processor's copy): each record with its own headers.
    keys = [k for k, _, _ in records] if keyed else None
    values, headers = [v for _, v, _ in records], [h for _, _, h in records]
    one, many = BatchWriter(limit=limit), BatchWriter(limit=limit)
    appended = 0
    while appended < len(values) and one.append(TS, keys[appended] if keys else None,
                                                values[appended], headers[appended]):
        appended += 1
    assert many.append_values(TS, keys, values, 0, headers) == appended
    if one.count:
        data = build(many)  # (a writer builds once)
        assert build(one) == data
        assert [list(r.headers) for r in decode(data)] == headers[:appended]


def test_keyed_append_values_takes_long_fields_the_slow_way() -> None:
    keys, values = [b"k", b"K" * 9000, b"k3"], [b"v1", b"v2", b"V" * 20_000]
    writer = BatchWriter(limit=1 << 20)
    assert writer.append_values(TS, keys, values) == 3
    assert [(r.key, r.value) for r in decode(build(writer))] == list(zip(keys, values, strict=True))


# -- kafka-python decodes whatever it writes -------------------------------------------------

_HEADERS = st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))),
                    max_size=3)
# Small timestamp deltas and repeated value lengths make runs (the encoder's hot path); wide
# ones and odd lengths the general path; both mixed within one batch.
_RECORDS = st.lists(
    st.tuples(st.one_of(st.integers(0, 2), st.integers(-10_000, 10_000)),
              st.one_of(st.none(), st.binary(max_size=50)),
              st.one_of(st.none(), st.sampled_from([b"", b"v" * 100]), st.binary(max_size=300)),
              st.one_of(st.just([]), _HEADERS)),
    min_size=1, max_size=90)


@settings(max_examples=150, deadline=None)
@given(records=_RECORDS, codec=st.sampled_from(available_compressions()),
       producer=st.tuples(st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1),
                          st.integers(-1, 2**31 - 1)),
       transactional=st.booleans())
def test_kafka_python_decodes_every_batch_to_the_same_records(
        records: list[tuple[int, bytes | None, bytes | None, list[Any]]], codec: str,
        producer: tuple[int, int, int], transactional: bool) -> None:
    stamped = [(TS + delta, key, value, headers) for delta, key, value, headers in records]
    producer_id, epoch, sequence = producer
    compression = Compression[codec.upper()]
    data = encode_batch(stamped, producer_id=producer_id, producer_epoch=epoch,
                        base_sequence=sequence, transactional=transactional,
                        compression=int(compression))
    batch = decode(data)
    assert batch.compression_type in (0, int(compression))  # none if it did not shrink
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
    assert batch.is_transactional == transactional and batch.base_offset == 0
    assert batch.records_count == len(records) and batch.last_offset_delta == len(records) - 1
    assert (batch.first_timestamp, batch.max_timestamp) == (
        stamped[0][0], max(stamped[0][0], *(s[0] for s in stamped)))
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    assert got == [(i, *record) for i, record in enumerate(stamped)]


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.none(), st.binary(max_size=300)), st.one_of(st.none(), st.binary()),
       _HEADERS)
def test_the_size_bound_is_java_and_kafka_pythons_and_holds(
        key: bytes | None, value: bytes | None, headers: list[Any]) -> None:
    # max.request.size is checked against this bound, which used kafka-python's builder.
    bound = record_size_bound(key, value, headers)
    assert bound == DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers)
    assert len(encode_batch([(TS, key, value, headers)])) <= bound


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_compresses_a_compressible_batch(codec: str) -> None:
    if codec not in available_compressions():
        pytest.skip(f"{codec}: its library is not installed")
    writer = BatchWriter(limit=1 << 20)
    values = [b"the same value, again and again %d" % (i % 7) for i in range(500)]
    assert writer.append_values(TS, None, values) == 500
    plain = writer.size
    data = build(writer, compression=int(Compression[codec.upper()]))
    batch = decode(data)
    assert batch.compression_type == Compression[codec.upper()] and len(data) < plain
    assert [r.value for r in batch] == values


def test_a_negative_timestamp_delta_is_never_taken_for_a_run() -> None:
    # The "no run yet" marker was -1, which (-1 << 13) | 8191 equals: such a record took the
    # run path with empty run pieces and corrupted the batch.
    writer = BatchWriter(limit=1 << 20)
    writer.append(TS, b"key", b"first")  # keyed: no run starts
    writer.append(TS - 1, None, b"x" * 8191)
    assert [r.value for r in decode(build(writer))] == [b"first", b"x" * 8191]


def test_a_long_value_is_never_taken_for_another_run() -> None:
    # With run keys (delta << 13) | length, a value of 8192 bytes at delta 0 had the key of
    # run (delta 1, length 0), and was written with that run's length prefix.
    writer = BatchWriter(limit=1 << 20)
    for stamp, value in ((TS, b"a" * 10), (TS + 1, b""), (TS, b"b" * 8192)):
        assert writer.append(stamp, None, value)
    assert [r.value for r in decode(build(writer))] == [b"a" * 10, b"", b"b" * 8192]


def test_large_values_and_many_records_leave_the_varint_tables() -> None:
    writer = BatchWriter(limit=1 << 30)
    values = [b"z" * 20_000, *(b"%d" % i for i in range(9_000)), b"y" * 9_000]
    assert writer.append_values(TS, None, values) == len(values)
    writer.append(TS + 100_000, b"k" * 10_000, b"late")
    records = list(decode(build(writer)))
    assert [r.value for r in records] == [*values, b"late"]
    assert records[-1].offset == len(values) and records[-1].timestamp == TS + 100_000
