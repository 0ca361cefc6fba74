"""The sink without Spark running or a broker: settings, the schema check, row conversion, the
ledger's decision, pickling, and that ``import eosclient`` leaves pyspark alone."""

from __future__ import annotations

import pickle
import subprocess
import sys
from typing import Any

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from eosclient._core.partitioner import partition_for
from eosclient.errors import ConfigError, RecordTypeError
from eosclient.spark import ExactlyOnceKafkaSink
from eosclient.spark._ledger import Decision, decide, ledger_group
from eosclient.spark._rows import Prepare, arrow_chunks, chunks, layout_of

pytestmark = pytest.mark.spark

GOOD = {"bootstrap_servers": "127.0.0.1:9092", "sink_id": "orders-sink", "topic": "out"}
HEADERS = ArrayType(StructType([StructField("key", StringType()),
                                StructField("value", BinaryType())]))


def schema(**columns: object) -> StructType:
    return StructType([StructField(name, kind) for name, kind in columns.items()])  # type: ignore[arg-type]


@pytest.mark.parametrize(("change", "key"), [
    ({"bootstrap_servers": ""}, "bootstrap_servers"),
    ({"sink_id": ""}, "sink_id"),
    ({"sink_id": "has space"}, "sink_id"),
    ({"topic": "bad/topic"}, "topic"),
    ({"mode": "exactly"}, "mode"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": True}, "timeout"),
    ({"chunk_size": 0}, "chunk_size"),
    ({"topic": None}, "ledger_topic"),
    ({"producer_config": {"transactional.id": "x"}}, "producer_config"),
    ({"producer_config": {"linger.mss": 5}}, "linger.mss"),
    ({"consumer_config": {"group.id": "g"}}, "consumer_config"),
])
def test_bad_settings_are_named(change: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ExactlyOnceKafkaSink(**{**GOOD, **change})  # type: ignore[arg-type]
    assert caught.value.key == key


def test_settings_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        ExactlyOnceKafkaSink("127.0.0.1:9092", "orders-sink")  # type: ignore[misc]


def test_a_pickled_sink_carries_its_settings_and_no_clients() -> None:
    sink = ExactlyOnceKafkaSink(**GOOD, mode="partitioned",  # type: ignore[arg-type]
                                producer_config={"linger.ms": 7})
    copy = pickle.loads(pickle.dumps(sink))
    assert (copy.sink_id, copy.mode, copy._spec) == (sink.sink_id, "partitioned", sink._spec)
    assert copy._producer is None and copy.outcomes == []


def test_import_eosclient_does_not_import_pyspark() -> None:
    code = "import sys, eosclient; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "False"


def test_without_pyspark_the_import_says_what_to_install() -> None:
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "try:\n    import eosclient.spark\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert 'pip install ".[spark]"' in out


# -- the schema -------------------------------------------------------------------------------

def test_the_layout_selects_the_sink_columns_in_order() -> None:
    full = schema(headers=HEADERS, partition=IntegerType(), topic=StringType(),
                  key=BinaryType(), value=StringType(), other=LongType())
    assert layout_of(full, None).columns == ("value", "key", "topic", "partition", "headers")
    assert layout_of(full, "out").columns == ("value", "key", "partition", "headers")


@pytest.mark.parametrize(("columns", "match"), [
    ({"key": StringType()}, "no 'value' column"),
    ({"value": LongType()}, "'value' must be string or binary, not bigint"),
    ({"value": StringType(), "key": IntegerType()}, "'key' must be string or binary"),
    ({"value": StringType(), "partition": LongType()}, "'partition' must be int"),
    ({"value": StringType(), "headers": ArrayType(StringType())}, "'headers' must be array"),
])
def test_a_bad_schema_names_the_column(columns: dict[str, object], match: str) -> None:
    with pytest.raises(RecordTypeError, match=match):
        layout_of(schema(**columns), "out")


def test_without_a_topic_a_topic_column_is_needed() -> None:
    with pytest.raises(RecordTypeError, match="no 'topic' column"):
        layout_of(schema(value=StringType()), None)
    with pytest.raises(RecordTypeError, match="'topic' must be string"):
        layout_of(schema(value=StringType(), topic=BinaryType()), None)


# -- rows -------------------------------------------------------------------------------------

def test_rows_become_bytes_grouped_for_send_batch() -> None:
    layout = layout_of(schema(value=StringType(), key=BinaryType()), "out")
    [chunk] = chunks([("é", b"k"), (None, None)], layout, 10)
    assert chunk.groups == {("out", None): ([b"k", None], ["é".encode(), None])}
    assert chunk.rows == 2 and chunk.singles == []


def test_rows_with_headers_go_one_by_one_and_topics_apart() -> None:
    layout = layout_of(schema(value=BinaryType(), topic=StringType(),
                              partition=IntegerType(), headers=HEADERS), None)
    rows = [(b"1", "a", 0, None), (b"2", "b", None, []), (b"3", "a", 0, [("h", b"x")])]
    chunk = next(chunks(rows, layout, 10))
    assert chunk.groups == {("a", 0): ([None], [b"1"]), ("b", None): ([None], [b"2"])}
    assert chunk.singles == [("a", 0, None, b"3", [("h", b"x")])]


def test_rows_come_in_chunks_of_the_size_asked() -> None:
    layout = layout_of(schema(value=StringType()), "out")
    assert [c.rows for c in chunks([("v",)] * 25, layout, 10)] == [10, 10, 5]


def test_a_null_topic_without_a_sink_topic_is_refused() -> None:
    layout = layout_of(schema(value=StringType(), topic=StringType()), None)
    with pytest.raises(RecordTypeError, match="null topic"):
        next(chunks([("v", None)], layout, 10))


@pytest.mark.parametrize("value_type", [StringType(), BinaryType()])
@pytest.mark.parametrize("key_type", [None, StringType(), BinaryType()])
def test_arrow_columns_become_the_chunks_rows_would(value_type: Any, key_type: Any) -> None:
    pa = pytest.importorskip("pyarrow")
    fields = {"value": value_type} | ({"key": key_type} if key_type is not None else {})
    layout = layout_of(schema(**fields), "out")
    values, keys = ["é", None, "v", "w", "x"], ["k", "k2", None, "k", "é"]

    def column(items: list[str | None], kind: Any) -> Any:
        if isinstance(kind, BinaryType):
            return pa.array([None if i is None else i.encode() for i in items], pa.binary())
        return pa.array(items, pa.string())

    arrays = [column(values, value_type)] + (
        [column(keys, key_type)] if key_type is not None else [])
    batch = pa.record_batch(arrays, names=list(layout.columns))
    rows = list(zip(*(a.to_pylist() for a in arrays), strict=True))
    expected = [(c.groups, c.singles, c.rows) for c in chunks(rows, layout, 2)]
    assert [(c.groups, c.singles, c.rows) for c in arrow_chunks(batch, layout, 2)] == expected


def test_other_arrow_layouts_go_row_by_row() -> None:
    pa = pytest.importorskip("pyarrow")
    layout = layout_of(schema(value=BinaryType(), topic=StringType(),
                              partition=IntegerType(), headers=HEADERS), None)
    batch = pa.record_batch(
        [pa.array([b"1", b"3"]), pa.array(["a", "a"]), pa.array([0, 0], pa.int32()),
         pa.array([None, [{"key": "h", "value": b"x"}]],
                  pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))],
        names=list(layout.columns))
    [chunk] = arrow_chunks(batch, layout, 10)
    assert chunk.groups == {("a", 0): ([None], [b"1"])}
    assert chunk.singles == [("a", 0, None, b"3", [("h", b"x")])]


# -- the ledger -------------------------------------------------------------------------------

def test_the_ledger_decides_write_skip_or_refuse() -> None:
    assert decide(None, 0, "s") is Decision.WRITE
    assert decide(3, 4, "s") is Decision.WRITE
    assert decide(3, 9, "s") is Decision.WRITE  # a gap is harmless: nothing is skipped
    assert decide(3, 3, "s") is Decision.SKIP  # the replay of a committed batch
    with pytest.raises(ConfigError, match="new checkpoint needs a new sink_id"):
        decide(3, 2, "s")


def test_ledger_groups_are_reserved_per_sink_and_partition() -> None:
    assert ledger_group("orders") == "orders.eosclient-sink"
    assert ledger_group("orders", 3) == "orders.eosclient-sink.p3"


def test_prepare_places_keyed_records_as_the_producer_would() -> None:
    layout = layout_of(schema(value=StringType(), key=StringType()), "out")
    [chunk] = Prepare(layout, 10, 4)([("a", "k1"), ("b", None), ("c", "k1")])
    assert chunk.groups == {("out", partition_for(b"k1", 4)): ([b"k1", b"k1"], [b"a", b"c"]),
                            ("out", None): ([None], [b"b"])}  # keyless: sticky, on the driver


def test_prepare_hands_a_bad_row_to_the_driver_as_an_error() -> None:
    layout = layout_of(schema(value=StringType(), topic=StringType()), None)
    [bad] = Prepare(layout, 10, None)([("v", None)])
    assert bad.rows == 0 and bad.error is not None and "null topic" in bad.error
