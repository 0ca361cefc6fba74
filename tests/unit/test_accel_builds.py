"""The two builds of the codec's hot modules, compiled (mypyc) and pure Python, side by side:
the same bytes in give the same records (or the same typed error) out, the same records give the
same bytes, the same keys the same hashes. And the switch between them: ``eosclient.accelerated``
and ``EOSCLIENT_PURE_PYTHON``."""

from __future__ import annotations

import os
import pickle
import re
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eosclient
from eosclient._core import _accel, decode, encoder, partitioner
from eosclient._core.types import TopicPartition
from eosclient.errors import EosError

TP = TopicPartition("orders", 3)
T0 = 1_700_000_000_000

COMPILED = _accel.compiled()
needs_compiled = pytest.mark.skipif(
    not all(COMPILED.values()),
    reason="the compiled build is not installed here (no C compiler at install, or "
           "EOSCLIENT_PURE_PYTHON=1): nothing to compare the pure build with")

PURE: dict[str, ModuleType] = {}


def pure(module: ModuleType) -> Any:
    """The pure-Python build of ``module``, loaded once beside the imported one."""
    if module.__name__ not in PURE:
        PURE[module.__name__] = _accel.load_pure(module.__name__)
    return PURE[module.__name__]


_HEADERS = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))),
                    max_size=3)
_RECORDS = st.lists(st.tuples(st.integers(0, 10_000), st.one_of(st.none(), st.binary(max_size=40)),
                              st.one_of(st.none(), st.binary(max_size=300)), _HEADERS),
                    min_size=1, max_size=40)


def _batch(records: list[Any], *, transactional: bool, base_offset: int, codec: int = 0) -> bytes:
    data = bytearray(pure(encoder).encode_batch(
        [(T0 + dt, k, v, h) for dt, k, v, h in records], producer_id=7, producer_epoch=1,
        base_sequence=0, transactional=transactional, compression=codec))
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def _recrc(data: bytearray, start: int = 0) -> None:
    """Recompute the CRC-32C of the batch at ``start``, so that a change past the header reaches
    the record parser instead of the CRC check."""
    (length,) = struct.unpack_from(">i", data, start + 8)
    end = start + 12 + length
    struct.pack_into(">I", data, start + 17, crc32c.crc32c(bytes(data[start + 21:end])))


def _outcome(module: Any, data: bytes, min_offset: int = 0) -> tuple[Any, ...]:
    """Everything one build makes of ``data``: its batches and their records, or the error."""
    try:
        decoded = module.decode_batches(data, TP)
        batches = [(b.base_offset, b.last_offset, b.producer_id, b.producer_epoch,
                    b.base_sequence, b.is_transactional, b.is_control,
                    None if b.control_type is None else int(b.control_type), b.compression,
                    b.record_count, b.size_in_bytes, [tuple(r) for r in b.records(min_offset)])
                   for b in decoded.batches]
        return ("ok", batches, decoded.truncated_bytes, decoded.partial_size)
    except EosError as exc:  # the typed errors: same class, same partition and offset
        return ("error", type(exc), getattr(exc, "offset", None), getattr(exc, "topic", None))


@needs_compiled
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_RECORDS, transactional=st.booleans(), base=st.integers(0, 2**40),
       min_delta=st.integers(0, 50), codec=st.sampled_from([0, 0, 1]))
def test_both_builds_decode_every_batch_alike(records: list[Any], transactional: bool, base: int,
                                              min_delta: int, codec: int) -> None:
    data = _batch(records, transactional=transactional, base_offset=base, codec=codec)
    both = [_outcome(m, data + data[:20], base + min_delta) for m in (decode, pure(decode))]
    assert both[0] == both[1]
    assert both[0][0] == "ok"


@needs_compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_RECORDS, data=st.data())
def test_both_builds_fail_alike_on_corrupt_and_truncated_input(records: list[Any],
                                                               data: st.DataObject) -> None:
    raw = bytearray(_batch(records, transactional=True, base_offset=100))
    how = data.draw(st.sampled_from(["cut", "flip", "flip-and-recrc", "garbage-records"]))
    if how == "cut":
        raw = raw[:data.draw(st.integers(0, len(raw)))]
    elif how == "garbage-records":  # arbitrary bytes for records, under a valid CRC
        raw = raw[:61] + bytearray(data.draw(st.binary(min_size=1, max_size=200)))
        struct.pack_into(">i", raw, 8, len(raw) - 12)
        _recrc(raw)
    else:
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] ^= data.draw(st.integers(1, 255))
        if how == "flip-and-recrc" and at >= 21:
            _recrc(raw)
    assert _outcome(decode, bytes(raw)) == _outcome(pure(decode), bytes(raw))


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(records=_RECORDS, transactional=st.booleans(), codec=st.sampled_from([0, 1]))
def test_both_builds_encode_every_batch_alike(records: list[Any], transactional: bool,
                                              codec: int) -> None:
    stamped = [(T0 + dt, k, v, h) for dt, k, v, h in records]
    kwargs = {"producer_id": 9, "producer_epoch": 2, "base_sequence": 5,
              "transactional": transactional, "compression": codec}
    ours, theirs = encoder.encode_batch(stamped, **kwargs), pure(encoder).encode_batch(
        stamped, **kwargs)
    if codec == 0:
        assert ours == theirs
    else:  # gzip stamps its header with the time: compare what both decode to
        assert _outcome(decode, ours) == _outcome(decode, theirs)


@needs_compiled
@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.binary(max_size=120)), min_size=1, max_size=200),
       keyed=st.booleans(), limit=st.integers(100, 5000))
def test_both_builds_fill_batches_alike(values: list[bytes | None], keyed: bool,
                                        limit: int) -> None:
    keys = [v[:3] if v else None for v in values] if keyed else None
    out = []
    for module in (encoder, pure(encoder)):
        writer = module.BatchWriter(limit)
        taken = writer.append_values(T0, keys, values)
        out.append((taken, writer.build(producer_id=1, producer_epoch=0, base_sequence=0,
                                        transactional=True)))
    assert out[0] == out[1]


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=600), partitions=st.integers(1, 1000))
def test_both_builds_hash_every_key_alike(key: bytes, partitions: int) -> None:
    assert partitioner.murmur2(key) == pure(partitioner).murmur2(key)
    assert partitioner.partition_for(key, partitions) == pure(partitioner).partition_for(
        key, partitions)


def test_the_pure_build_is_loaded_from_source() -> None:
    # What the comparisons above stand on: the copy they compare with is the .py file.
    loaded = pure(decode)
    assert loaded.__file__.endswith("decode.py")
    assert loaded.decode_batches is not decode.decode_batches


def test_accelerated_is_true_exactly_when_every_hot_module_is_compiled() -> None:
    assert eosclient.accelerated == all(COMPILED.values())
    assert set(COMPILED) == set(_accel.HOT)


def test_the_build_that_runs_is_the_one_the_environment_asks_for() -> None:
    # scripts/test sets EOSCLIENT_EXPECT_ACCELERATED=1 where it built with a C compiler, so a
    # build that silently fell back to pure Python fails CI instead of passing slowly.
    forced = os.environ.get(_accel.ENV) == "1"
    if forced:
        assert not any(COMPILED.values())
    elif os.environ.get("EOSCLIENT_EXPECT_ACCELERATED") == "1":
        assert eosclient.accelerated, COMPILED
    else:
        pytest.skip("neither EOSCLIENT_PURE_PYTHON nor EOSCLIENT_EXPECT_ACCELERATED is set")


def test_the_environment_variable_forces_the_pure_build() -> None:
    code = ("import eosclient, eosclient._core._accel as a; "
            "print(eosclient.accelerated, sorted(a.compiled().values()))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, _accel.ENV: "1"},
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "[False,", "False,", "False]"]


def test_record_columns_pickle_alike_in_both_builds() -> None:
    # Spark and multiprocessing pickle them: the compiled class used to refuse.
    for module in (decode, pure(decode)):
        columns = module.RecordColumns("t", 1, [3, 4], [None, b"k"], [b"a", None], [5, 6],
                                       [(), (("h", b"v"),)])
        back = pickle.loads(pickle.dumps(columns))
        assert type(back) is type(columns)
        assert [getattr(back, f) for f in FIELDS] == [getattr(columns, f) for f in FIELDS]
        assert back.records() == columns.records()


FIELDS = ("topic", "partition", "offsets", "keys", "values", "timestamps", "headers")


def test_setup_compiles_exactly_the_modules_the_switch_knows() -> None:
    # setup.py runs before the package can be imported, so it keeps its own list: the two must
    # name the same modules, or one would be compiled and never checked (or the reverse).
    setup = (Path(__file__).resolve().parents[2] / "setup.py").read_text()
    compiled = re.findall(r'"src/(eosclient/[\w/]+)\.py"', setup)
    assert sorted(p.replace("/", ".") for p in compiled) == sorted(_accel.HOT)
