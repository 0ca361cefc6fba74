"""``RecordColumns`` as ``poll_batch()`` makes them: records checked when delivered, decoded
only when a column is asked for, or copied into one buffer (``values_buffer()``). Both builds
(compiled and pure Python) must give the same rows, the same buffers and the same typed errors
as decoding at once does, on any batch and on corrupt ones."""

from __future__ import annotations

import pickle
import struct
from types import ModuleType
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eosclient._core import _accel, decode, encoder
from eosclient._core.types import TopicPartition
from eosclient.errors import EosError

TP = TopicPartition("orders", 3)
T0 = 1_700_000_000_000
FIELDS = ("offsets", "keys", "values", "timestamps", "headers", "timestamp_types")

_PURE: dict[str, ModuleType] = {}


def pure_decode() -> Any:
    if "decode" not in _PURE:
        _PURE["decode"] = _accel.load_pure(decode.__name__)
    return _PURE["decode"]


BUILDS = pytest.mark.parametrize("build", ["imported", "pure"])


def module_of(build: str) -> Any:
    return decode if build == "imported" else pure_decode()


_HEADERS = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=9))),
                    max_size=2)
_RECORD = st.tuples(st.integers(0, 5_000), st.one_of(st.none(), st.binary(max_size=30)),
                    st.one_of(st.none(), st.binary(max_size=200)), _HEADERS)


def encode(records: list[Any], base_offset: int, codec: int = 0, *,
           log_append: bool = False) -> bytes:
    data = bytearray(encoder.encode_batch(
        [(T0 + dt, k, v, h) for dt, k, v, h in records], producer_id=7, producer_epoch=1,
        base_sequence=0, transactional=False, compression=codec))
    struct.pack_into(">q", data, 0, base_offset)
    if log_append:  # what a broker writes for a topic with message.timestamp.type=LogAppendTime
        struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x08)
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def fields(columns: Any) -> tuple[Any, ...]:
    return tuple(getattr(columns, f) for f in FIELDS)


MODES = ("checked", "decoded", "records")  # how RecordBatch.columns takes a batch in


def delivered(module: Any, data: bytes, min_offset: int, *, how: str) -> Any:
    """Every batch of ``data`` onto one ``RecordColumns``: checked only, decoded into column
    lists, or made into records (``poll()``'s way) while checking."""
    columns = module.RecordColumns(*TP)
    for batch in module.decode_batches(data, TP).batches:
        batch.columns(columns, min_offset, decode=how == "decoded", records=how == "records")
    return columns


def everything(columns: Any) -> tuple[Any, ...]:
    """All a caller can read from ``columns``, without and then with decoding its lists."""
    size = len(columns)
    head = (size, [columns.offset_at(i) for i in range(size)],
            columns.next_offset if size else None, repr(columns))
    values, keys = columns.values_buffer(), columns.keys_buffer()
    buffers = [(b.data, list(b.offsets), b.nulls, list(b), len(b)) for b in (values, keys)]
    spans = [columns.records(a, b) for a, b in ((0, None), (1, 3), (size // 2, None), (2, 1))]
    return (head, buffers, [[tuple(r) for r in s] for s in spans], fields(columns))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(_RECORD, min_size=1, max_size=25), min_size=1, max_size=3),
       min_delta=st.integers(0, 30), codec=st.sampled_from([0, 0, 1]),
       log_append=st.lists(st.booleans(), min_size=3, max_size=3))
def test_checked_columns_read_as_decoded_ones_in_both_builds(
        batches: list[list[Any]], min_delta: int, codec: int, log_append: list[bool]) -> None:
    data, base = b"", 1000
    for records, appended in zip(batches, log_append, strict=False):
        data += encode(records, base, codec, log_append=appended)
        base += len(records) + 5  # a gap between batches: offsets not consecutive
    seen = [everything(delivered(m, data, 1000 + min_delta, how=how))
            for m in (decode, pure_decode()) for how in MODES]
    assert all(s == seen[0] for s in seen[1:])
    rows = seen[0][3]
    assert list(seen[0][1][0][3]) == rows[2]  # the values buffer holds the values column
    assert all(o >= 1000 + min_delta for o in rows[0])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(_RECORD, min_size=1, max_size=25), min_size=1, max_size=3),
       min_delta=st.integers(0, 30),
       modes=st.lists(st.sampled_from(MODES), min_size=3, max_size=3))
def test_values_or_keys_alone_read_as_decoded_and_stay_the_columns_lists(
        batches: list[list[Any]], min_delta: int, modes: list[str]) -> None:
    """The values (or keys) asked for first are decoded alone, from batches taken in in any
    mode; they equal the decoded column, and stay the list the columns hold once the rest is
    decoded (a caller may hold it)."""
    data, base = b"", 1000
    for records in batches:
        data += encode(records, base)
        base += len(records) + 5
    for module in (decode, pure_decode()):
        expected = fields(delivered(module, data, 1000 + min_delta, how="decoded"))
        columns = module.RecordColumns(*TP)
        for batch, how in zip(module.decode_batches(data, TP).batches, modes, strict=False):
            batch.columns(columns, 1000 + min_delta, decode=how == "decoded",
                          records=how == "records")
        values, keys = columns.values, columns.keys
        assert (values, keys) == (expected[2], expected[1])
        assert fields(columns) == expected
        assert columns.values is values and columns.keys is keys


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(_RECORD, min_size=1, max_size=30), data=st.data())
def test_extend_and_truncate_keep_rows_alike_lazy_or_decoded(records: list[Any],
                                                             data: st.DataObject) -> None:
    raw = encode(records, 50) + encode(records, 50 + len(records))
    ops = data.draw(st.lists(st.tuples(st.sampled_from(["extend", "truncate", "decode"]),
                                       st.integers(0, 70), st.integers(0, 70)), max_size=6))
    outcomes = []
    for module in (decode, pure_decode()):
        for how in MODES:
            source = delivered(module, raw, 0, how=how)
            target = module.RecordColumns(*TP)
            for op, a, b in ops:
                if op == "extend":
                    target.extend(source, a, b)
                elif op == "truncate":
                    target.truncate(a)
                else:
                    target.values  # noqa: B018 - decodes its lists: later steps go on from them
            outcomes.append(everything(target))
    assert all(o == outcomes[0] for o in outcomes[1:])


def _corrupt(records: list[Any], data: st.DataObject) -> bytes:
    raw = bytearray(encode(records, 100))
    how = data.draw(st.sampled_from(["flip-and-recrc", "garbage-records", "lying-count"]))
    if how == "garbage-records":  # arbitrary bytes for records, under a valid CRC
        raw = raw[:61] + bytearray(data.draw(st.binary(min_size=1, max_size=200)))
        struct.pack_into(">i", raw, 8, len(raw) - 12)
    elif how == "lying-count":
        struct.pack_into(">i", raw, 57, data.draw(st.integers(0, 60)))
    else:
        at = data.draw(st.integers(61, len(raw) - 1))
        raw[at] ^= data.draw(st.integers(1, 255))
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(_RECORD, min_size=1, max_size=20), data=st.data())
def test_corrupt_records_fail_alike_when_checked_as_when_decoded(records: list[Any],
                                                                 data: st.DataObject) -> None:
    raw = _corrupt(records, data)

    def outcome(module: Any, how: str) -> tuple[Any, ...]:
        try:
            return ("ok", everything(delivered(module, raw, 0, how=how)))
        except EosError as exc:
            return ("error", type(exc).__name__, getattr(exc, "offset", None))

    seen = [outcome(m, how) for m in (decode, pure_decode()) for how in MODES]
    assert all(s == seen[0] for s in seen[1:])


def test_a_failed_check_leaves_the_columns_as_they_were() -> None:
    good, bad = bytearray(encode([(0, None, b"a", [])] * 3, 0)), bytearray(
        encode([(0, None, b"b", [])] * 3, 3))
    struct.pack_into(">i", bad, 57, 4)  # one record more than it holds; the CRC is redone
    struct.pack_into(">I", bad, 17, crc32c.crc32c(bytes(bad[21:])))
    for build in (decode, pure_decode()):
        columns = build.RecordColumns(*TP)
        [first] = build.decode_batches(bytes(good), TP).batches
        [second] = build.decode_batches(bytes(bad), TP).batches
        first.columns(columns)
        with pytest.raises(EosError):
            second.columns(columns)
        assert len(columns) == 3 and columns.values == [b"a"] * 3


@BUILDS
def test_len_and_next_offset_need_no_decoding(build: str) -> None:
    module = module_of(build)
    raw = encode([(i, None, b"v%d" % i, []) for i in range(10)], 40)
    columns = delivered(module, raw, 44, how="checked")
    assert (len(columns), columns.next_offset, columns.offset_at(0)) == (6, 50, 44)
    with pytest.raises(IndexError):
        columns.offset_at(6)
    with pytest.raises(IndexError):
        module.RecordColumns(*TP).next_offset  # noqa: B018 - no rows: nothing to commit


@BUILDS
def test_values_buffer_is_arrows_binary_layout(build: str) -> None:
    module = module_of(build)
    raw = encode([(0, b"k", b"one", []), (1, None, None, []), (2, b"", b"", [])], 0)
    for how in MODES:
        values = delivered(module, raw, 0, how=how).values_buffer()
        assert (values.data, list(values.offsets), values.nulls) == (b"one", [0, 3, 3, 3], [1])
        assert (values[0], values[1], values[2], values[-3]) == (b"one", None, b"", b"one")
        with pytest.raises(IndexError):
            values[3]
        array = values.to_arrow()
        assert array.to_pylist() == [b"one", None, b""]


@BUILDS
def test_columns_given_as_lists_pickle_and_convert(build: str) -> None:
    module = module_of(build)
    columns = module.RecordColumns("t", 1, [3, 4], [None, b"k"], [b"a", None], [5, 6],
                                   [(), (("h", b"v"),)])
    back = pickle.loads(pickle.dumps(columns))
    assert fields(back) == fields(columns) and back.records() == columns.records()
    assert list(columns.values_buffer()) == [b"a", None]
    assert list(columns.keys_buffer()) == [None, b"k"]
    lazy = delivered(module, encode([(0, None, b"x", [("h", b"v")])], 9), 0, how="checked")
    assert fields(pickle.loads(pickle.dumps(lazy))) == fields(lazy)


@BUILDS
def test_each_row_carries_its_batchs_timestamp_type_lazy_or_decoded(build: str) -> None:
    # The Spark source's timestampType column: RecordColumns had no way to tell it.
    module = module_of(build)
    raw = (encode([(0, None, b"c", []), (5, None, b"c", [])], 10)
           + encode([(0, None, b"l", []), (9, None, b"l", [])], 12, log_append=True))
    for how in MODES:
        columns = delivered(module, raw, 11, how=how)
        assert columns.timestamp_types == [module.CREATE_TIME] + [module.LOG_APPEND_TIME] * 2
        assert columns.timestamp_types == [0, 1, 1]
        assert columns.timestamps[1] == columns.timestamps[2]  # LogAppendTime: one per batch
        back = pickle.loads(pickle.dumps(delivered(module, raw, 0, how=how)))
        assert back.timestamp_types == [0, 0, 1, 1]
        back.truncate(3)
        target = module.RecordColumns(*TP)
        target.extend(delivered(module, raw, 0, how=how), 1, 3)
        assert (back.timestamp_types, target.timestamp_types) == ([0, 0, 1], [0, 1])
    given_lists = module.RecordColumns("t", 1, [3, 4], [None, None], [b"a", b"b"], [5, 6],
                                       [(), ()])
    assert given_lists.timestamp_types == [0, 0]  # lists given without types: CreateTime
