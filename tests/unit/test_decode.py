"""The fetch-side decoder, sans-IO: batches built with kafka-python's builder (control batches by
hand from the spec), fed whole, cut at every byte, corrupted at every byte, in every codec, and
cross-checked against kafka-python's own decoder."""

from __future__ import annotations

import pickle
import struct

import kafka.codec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka.record.util import calc_crc32c

from eosclient._core.decode import ConsumerRecord, ControlType, decode_batches
from eosclient._core.types import TopicPartition
from eosclient.errors import ApiKey, CorruptRecordError, FatalError

TP = TopicPartition("orders", 3)
T0 = 1_700_000_000_000
CODECS = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

Header = tuple[str, bytes | None]


def _patch(buf: bytearray, *, base_offset: int, attributes: int = 0) -> bytes:
    """Set the base offset (the producer writes 0) and extra attribute bits; redo the CRC."""
    struct.pack_into(">q", buf, 0, base_offset)
    if attributes:
        (attrs,) = struct.unpack_from(">h", buf, 21)
        struct.pack_into(">h", buf, 21, attrs | attributes)
        struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def batch(base_offset: int, values: list[bytes | None], *, pid: int = -1,
          transactional: bool = False, compression: int = 0, keys: list[bytes | None] | None = None,
          headers: list[Header] | None = None, timestamps: list[int] | None = None,
          attributes: int = 0) -> bytes:
    """One v2 batch as a broker would return it."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=transactional, producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
        batch_size=1 << 30)
    for i, value in enumerate(values):
        key = keys[i] if keys else None
        ts = timestamps[i] if timestamps else T0 + i
        builder.append(i, ts, key, value, headers or [])
    return _patch(bytearray(builder.build()), base_offset=base_offset, attributes=attributes)


def control(offset: int, pid: int, kind: int, *, key: bytes | None = None) -> bytes:
    """A control batch from the spec: one record, key (version int16, type int16), value
    (version int16, coordinator epoch int32); kafka-python's builder cannot set the flag."""
    key = struct.pack(">hh", 0, kind) if key is None else key
    return batch(offset, [struct.pack(">hi", 0, 7)], pid=pid, transactional=True, keys=[key],
                 attributes=0x20)


def sample() -> tuple[bytes, list[int]]:
    """Three batches: plain, transactional with headers, and its COMMIT marker; and their ends."""
    parts = [
        batch(10, [b"a", b"b"], keys=[b"k", None]),
        batch(12, [b"c", None, b"e"], pid=7, transactional=True,
              headers=[("h", b"v"), ("n", None)]),
        control(15, 7, 1),
    ]
    ends = [sum(len(p) for p in parts[: i + 1]) for i in range(len(parts))]
    return b"".join(parts), ends


def kafka_python_records(data: bytes) -> list[list[tuple[object, ...]]]:
    return [[(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in b]
            for b in MemoryRecords(data)]


def as_tuples(records: list[ConsumerRecord]) -> list[tuple[object, ...]]:
    """In kafka-python's order and shapes: (offset, timestamp, key, value, headers list)."""
    return [(r.offset, r.timestamp_ms, r.key, r.value, list(r.headers)) for r in records]


# --- whole -------------------------------------------------------------------------------------


def test_batch_fields_records_and_markers() -> None:
    data, _ = sample()
    decoded = decode_batches(data, TP)
    assert decoded.truncated_bytes == 0
    plain, txn, marker = decoded.batches
    assert (plain.base_offset, plain.last_offset, plain.producer_id) == (10, 11, -1)
    assert not plain.is_transactional and not plain.is_control and plain.control_type is None
    assert (txn.base_offset, txn.last_offset, txn.producer_id, txn.producer_epoch) == (12, 14, 7, 0)
    assert txn.is_transactional and not txn.is_control and txn.record_count == 3
    assert marker.is_control and marker.is_transactional
    assert (marker.control_type, marker.producer_id, marker.last_offset) == (
        ControlType.COMMIT, 7, 15)
    assert plain.records() == [ConsumerRecord("orders", 3, 10, b"k", b"a", (), T0),
                               ConsumerRecord("orders", 3, 11, None, b"b", (), T0 + 1)]
    assert [r.value for r in txn.records()] == [b"c", None, b"e"]
    assert txn.records()[0].headers == (("h", b"v"), ("n", None))
    assert sum(b.size_in_bytes for b in decoded.batches) == len(data)


def test_matches_kafka_pythons_decoder() -> None:
    data, _ = sample()
    assert [as_tuples(b.records()) for b in decode_batches(data, TP).batches] == \
        kafka_python_records(data)


@pytest.mark.parametrize(("kind", "expected"), [
    (0, ControlType.ABORT), (1, ControlType.COMMIT), (2, ControlType.UNKNOWN),
    (-3, ControlType.UNKNOWN)])
def test_control_types(kind: int, expected: ControlType) -> None:
    [marker] = decode_batches(control(5, 9, kind), TP).batches
    assert marker.control_type is expected
    if kind in (0, 1):  # kafka-python reads our hand-built control batch the same way
        [[record]] = [list(b) for b in MemoryRecords(control(5, 9, kind))]
        assert record.type == kind


def test_control_key_too_short_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="control record key"):
        decode_batches(control(5, 9, 0, key=b"\x00\x00"), TP)


def test_empty_and_none_are_no_batches() -> None:
    assert decode_batches(None, TP) == ([], 0, 0)
    assert decode_batches(b"", TP) == ([], 0, 0)


def test_bytearray_and_memoryview_inputs() -> None:
    data, _ = sample()
    for form in (bytearray(data), memoryview(data)):
        assert len(decode_batches(form, TP).batches) == 3  # type: ignore[arg-type]


def test_min_offset_skips_the_head_of_a_batch() -> None:
    # A Fetch returns the whole batch holding the fetch offset.
    [b] = decode_batches(batch(100, [b"0", b"1", b"2", b"3"]), TP).batches
    assert [r.offset for r in b.records(102)] == [102, 103]
    assert b.records(200) == []


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    data = batch(0, [b"a", b"b"], timestamps=[T0, T0 + 50], attributes=0x08)
    [b] = decode_batches(data, TP).batches
    assert [r.timestamp_ms for r in b.records()] == [T0 + 50, T0 + 50]
    assert [r.timestamp_ms for r in b.records()] == [r[1] for r in kafka_python_records(data)[0]]


def test_long_varints_large_values_and_many_records() -> None:
    # Three-byte varints: a 20 kB value, offset deltas past 8191, far-apart timestamps.
    values: list[bytes | None] = [bytes(20_000), *(b"x" * (i % 7) for i in range(9000))]
    stamps = [T0 - 10**9, *(T0 + i * 10**6 for i in range(9000))]
    data = batch(5, values, timestamps=stamps, keys=[b"k" * 300] * len(values))
    [b] = decode_batches(data, TP).batches
    assert as_tuples(b.records()) == kafka_python_records(data)[0]


def test_detach_copies_the_batch_out_of_the_response() -> None:
    data, _ = sample()
    b = decode_batches(data, TP).batches[1]
    before = b.records()
    b.detach()
    assert b.records() == before
    assert b._buf is not data and len(b._buf) == b.size_in_bytes


@pytest.mark.parametrize("codec", list(CODECS), ids=list(CODECS.values()))
def test_every_codec(codec: int) -> None:
    if not getattr(kafka.codec, f"has_{CODECS[codec]}")():
        pytest.skip(f"{CODECS[codec]} not installed")
    values: list[bytes | None] = [b"abc" * 50 + bytes([i]) for i in range(50)]
    data = batch(0, values, compression=codec, pid=3, transactional=True,
                 headers=[("trace", b"1" * 20)]) + control(50, 3, 1)
    first, marker = decode_batches(data, TP).batches
    assert first.compression == codec  # the builder compressed it (it skips when it does not pay)
    assert as_tuples(first.records()) == kafka_python_records(data)[0]
    assert marker.control_type is ControlType.COMMIT


def test_garbage_that_does_not_decompress_is_corrupt() -> None:
    data = bytearray(batch(0, [b"abc" * 50] * 5, compression=1))
    data[70:80] = b"\xff" * 10
    struct.pack_into(">I", data, 17, calc_crc32c(memoryview(data)[21:]))
    [b] = decode_batches(bytes(data), TP).batches
    with pytest.raises(CorruptRecordError, match="decompress"):
        b.records()


# --- decompression is bounded ------------------------------------------------------------------


def compressed_batch(codec: int, payload: bytes, count: int = 1) -> bytes:
    """A v2 batch whose records field is ``payload`` as given, under codec ``codec``."""
    body = struct.pack(">hiqqqhii", codec, count - 1, T0, T0, -1, -1, -1, count) + payload
    head = struct.pack(">qiib", 0, len(body) + 9, 0, 2)
    return head + struct.pack(">I", calc_crc32c(body)) + body


@pytest.mark.parametrize("codec", list(CODECS), ids=list(CODECS.values()))
def test_a_batch_decompressing_past_the_bound_is_corrupt(codec: int) -> None:
    # A 16 KiB zstd batch became 512 MiB in memory: nothing bounded what a batch inflates to.
    if not getattr(kafka.codec, f"has_{CODECS[codec]}")():
        pytest.skip(f"{CODECS[codec]} not installed")
    data = batch(0, [b"\x00" * 10_000] * 100, compression=codec)
    assert len(data) < 100_000  # a megabyte of records in it
    [b] = decode_batches(data, TP, max_decompressed=100_000).batches
    with pytest.raises(CorruptRecordError, match=r"receive\.message\.max\.bytes \(100000\)"):
        b.records()
    [roomy] = decode_batches(data, TP, max_decompressed=2_000_000).batches
    assert len(roomy.records()) == 100


@pytest.mark.parametrize("codec", list(CODECS), ids=list(CODECS.values()))
def test_a_batch_decompressing_to_exactly_the_bound_is_read(codec: int) -> None:
    if not getattr(kafka.codec, f"has_{CODECS[codec]}")():
        pytest.skip(f"{CODECS[codec]} not installed")
    data = batch(0, [b"x" * 1000] * 3, compression=codec)
    [b] = decode_batches(data, TP).batches
    size = len(b._payload()[0])  # the decompressed size
    assert len(decode_batches(data, TP, max_decompressed=size).batches[0].records()) == 3
    with pytest.raises(CorruptRecordError):
        decode_batches(data, TP, max_decompressed=size - 1).batches[0].records()


@pytest.mark.parametrize("xerial", [False, True])
def test_a_snappy_length_claiming_4_gib_is_refused_before_any_allocation(
        xerial: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # The library allocated the claimed length first: under an address-space limit (PySpark
    # sets one) the process aborted.
    snappy = pytest.importorskip("snappy")
    claim = bytes([0x80, 0x80, 0x80, 0x80, 0x10]) + b"\x00" * 16  # varint 2**32, then garbage
    payload = (b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(claim))
               + claim) if xerial else claim
    calls: list[int] = []
    monkeypatch.setattr(snappy, "decompress", lambda data: calls.append(len(data)) or b"")
    [b] = decode_batches(compressed_batch(2, payload), TP).batches
    with pytest.raises(CorruptRecordError, match=r"receive\.message\.max\.bytes"):
        b.records()
    assert calls == []


def test_gzip_members_one_after_another_are_all_read() -> None:
    # Java's GZIPInputStream reads concatenated members; a bounded inflater must too.
    import gzip  # noqa: PLC0415

    records = batch(0, [b"a", b"b"])[61:]  # the records of an uncompressed 2-record batch
    half = len(records) // 2
    payload = gzip.compress(records[:half]) + gzip.compress(records[half:])
    [b] = decode_batches(compressed_batch(1, payload, count=2), TP).batches
    assert [r.value for r in b.records()] == [b"a", b"b"]


# --- in pieces ---------------------------------------------------------------------------------


def test_every_prefix_keeps_the_whole_batches_and_counts_the_rest() -> None:
    # A Fetch may end in the middle of a batch (it cuts at max_bytes): not an error.
    data, ends = sample()
    for cut in range(len(data) + 1):
        decoded = decode_batches(data[:cut], TP)
        whole = sum(1 for end in ends if end <= cut)
        assert len(decoded.batches) == whole
        assert decoded.truncated_bytes == cut - (ends[whole - 1] if whole else 0)


def test_a_batch_larger_than_the_response_yields_nothing_but_its_bytes() -> None:
    data = batch(0, [bytes(1000)])
    assert decode_batches(data[:500], TP) == ([], 500, 1070)  # and the size it claims


def test_trailing_garbage_with_a_small_length_is_corrupt_not_skipped() -> None:
    data, _ = sample()
    garbage = struct.pack(">qi", 99, 20) + b"\xee" * 20
    with pytest.raises(CorruptRecordError, match="magic"):
        decode_batches(data + garbage, TP)


# --- corruption --------------------------------------------------------------------------------


def test_every_flipped_byte_under_the_crc_raises_naming_topic_partition_offset() -> None:
    data, ends = sample()
    start = ends[0]  # corrupt the second batch, at offset 12
    for pos in range(start + 21, ends[1]):
        bad = bytearray(data)
        bad[pos] ^= 0x40
        with pytest.raises(CorruptRecordError) as info:
            decode_batches(bytes(bad), TP)
        err = info.value
        assert (err.topic, err.partition, err.offset) == ("orders", 3, 12), pos
        assert "orders-3 at offset 12" in str(err) and "CRC-32C" in str(err)
        assert isinstance(err, FatalError) and err.api == ApiKey.FETCH


def with_crc(data: bytes, at: int, crc: int) -> bytes:
    """``data`` with the CRC field of the batch starting at ``at`` set to ``crc``."""
    bad = bytearray(data)
    struct.pack_into(">I", bad, at + 17, crc)
    return bytes(bad)


def test_check_crcs_off_decodes_batches_whose_crc_is_wrong() -> None:
    # librdkafka's mock writes control batches with wrong CRCs: the consumer stopped at the
    # first one, with no way to read on (check.crcs, librdkafka's setting, now is that way).
    data, ends = sample()
    bad = with_crc(with_crc(data, ends[0], 0xDEADBEEF), ends[1], 0)  # the data and the marker
    with pytest.raises(CorruptRecordError, match=r"CRC-32C.*check\.crcs=False") as info:
        decode_batches(bad, TP)
    assert info.value.offset == 12
    unchecked = decode_batches(bad, TP, check_crcs=False)
    assert [as_tuples(b.records()) for b in unchecked.batches] == \
        [as_tuples(b.records()) for b in decode_batches(data, TP).batches]
    assert unchecked.batches[2].control_type is ControlType.COMMIT
    assert unchecked.truncated_bytes == 0


def test_check_crcs_off_still_checks_the_framing() -> None:
    data, ends = sample()
    bad = bytearray(with_crc(data, ends[0], 0))
    bad[ends[0] + 16] = 3  # the magic
    with pytest.raises(CorruptRecordError, match="magic"):
        decode_batches(bytes(bad), TP, check_crcs=False)
    backwards = batch(10, [b"a", b"b"]) + with_crc(batch(5, [b"c"]), 0, 0)
    with pytest.raises(CorruptRecordError, match="backwards"):
        decode_batches(backwards, TP, check_crcs=False)
    bad_key = with_crc(control(5, 9, 0, key=b"\x00\x00"), 0, 0)
    with pytest.raises(CorruptRecordError, match="control record key"):
        decode_batches(bad_key, TP, check_crcs=False)


def test_flipped_magic_is_never_skipped() -> None:
    data, ends = sample()
    for magic in (3, 0x82):
        bad = bytearray(data)
        bad[ends[0] + 16] = magic
        with pytest.raises(CorruptRecordError, match="magic"):
            decode_batches(bytes(bad), TP)


def test_offsets_running_backwards_are_corrupt() -> None:
    # The base offset is outside the CRC; a flipped high bit must not reorder the log.
    data = batch(10, [b"a", b"b"]) + batch(5, [b"c"])
    with pytest.raises(CorruptRecordError, match="backwards"):
        decode_batches(data, TP)


def test_a_length_shorter_than_the_header_is_corrupt() -> None:
    bad = bytearray(batch(0, [b"a"]))
    struct.pack_into(">i", bad, 8, 30)
    with pytest.raises(CorruptRecordError, match="shorter than its header"):
        decode_batches(bytes(bad[:42]), TP)


def test_records_that_do_not_parse_are_corrupt_when_read() -> None:
    # A producer bug: the CRC matches, the records do not. Reported when they are decoded.
    bad = bytearray(batch(20, [b"a", b"b"]))
    struct.pack_into(">i", bad, 57, 3)  # claims three records
    struct.pack_into(">I", bad, 17, calc_crc32c(memoryview(bad)[21:]))
    [b] = decode_batches(bytes(bad), TP).batches
    with pytest.raises(CorruptRecordError, match="orders-3 at offset 20"):
        b.records()


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_formats_are_a_clear_fatal_error(magic: int) -> None:
    builder = MemoryRecordsBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    builder.append(T0, None, b"old")
    builder.close()
    with pytest.raises(FatalError, match=f"format v{magic}.*record batch v2") as info:
        decode_batches(bytes(builder.buffer()), TP)
    assert not isinstance(info.value, CorruptRecordError)


def test_corrupt_record_error_pickles_with_its_fields() -> None:
    err = CorruptRecordError("bad CRC", topic="t", partition=1, offset=42)
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.topic, back.partition, back.offset) == (
        CorruptRecordError, "t-1 at offset 42: bad CRC", "t", 1, 42)


# --- property ----------------------------------------------------------------------------------

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
records_st = st.lists(st.tuples(maybe_bytes, maybe_bytes,
                                st.lists(st.tuples(st.text(max_size=10), maybe_bytes), max_size=3),
                                st.integers(-(2**40), 2**40)),
                      min_size=1, max_size=40)


@settings(deadline=None, max_examples=150)
@given(records=records_st, base=st.integers(0, 2**62), codec=st.sampled_from([0, 1, 2, 3, 4]))
def test_any_records_round_trip_like_kafka_python(
    records: list[tuple[bytes | None, bytes | None, list[Header], int]], base: int, codec: int,
) -> None:
    keys = [r[0] for r in records]
    values = [r[1] for r in records]
    stamps = [T0 + r[3] for r in records]
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i, (key, value, headers, _) in enumerate(records):
        builder.append(i, stamps[i], key, value, headers)
    data = _patch(bytearray(builder.build()), base_offset=base)
    [b] = decode_batches(data, TP).batches
    got = b.records()
    assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in got] == [
        (base + i, keys[i], values[i], stamps[i]) for i in range(len(records))]
    assert [r.headers for r in got] == [tuple(r[2]) for r in records]
    assert as_tuples(got) == kafka_python_records(data)[0]
