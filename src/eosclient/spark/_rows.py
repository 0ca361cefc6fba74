"""Spark rows to Kafka records: the schema check, and the conversion on the hot path.

The columns are those of Spark's own Kafka sink, so a DataFrame written there can be written here
unchanged:

============  ===============================================  ==========
column        type                                             required
============  ===============================================  ==========
``value``     string or binary                                 yes
``key``       string or binary                                 no
``topic``     string (ignored when the sink has a ``topic``)   no
``partition`` int                                              no
``headers``   array<struct<key: string, value: binary>>        no
============  ===============================================  ==========

A string is written as its UTF-8 bytes, binary as is, null as a null key or value. The schema is
checked before any transaction is touched (:func:`layout_of`), so a DataFrame of the wrong shape
fails its batch with nothing begun. Rows are then taken in chunks and grouped by (topic,
partition) for ``send_batch`` (the producer's fast path); a row with headers goes through
``send``, which is the only call that takes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from eosclient._core.partitioner import partition_for
from eosclient.errors import RecordTypeError

__all__ = ["Chunk", "Layout", "Prepare", "arrow_chunks", "chunks", "layout_of"]

_TEXT_OR_BYTES = (StringType, BinaryType)
Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Layout:
    """Which of the sink's columns a DataFrame has; ``columns`` is the select list, in order
    (value first, then key, topic, partition, headers, those present)."""

    columns: tuple[str, ...]
    topic: str | None  # the sink's topic: when set, a topic column is not read

    def index(self, name: str) -> int | None:
        """The position of ``name`` in a selected row, or None if it is not selected."""
        return self.columns.index(name) if name in self.columns else None


@dataclass(slots=True)
class Chunk:
    """Rows converted to records: header-less ones grouped for ``send_batch``, the rest one by
    one. ``groups`` maps (topic, partition or None) to (keys, values)."""

    groups: dict[tuple[str, int | None], tuple[list[bytes | None], list[bytes | None]]]
    singles: list[tuple[str, int | None, bytes | None, bytes | None, list[Header]]]
    rows: int
    error: str | None = None  # a RecordTypeError on an executor, raised again on the driver


def layout_of(schema: StructType, topic: str | None) -> Layout:
    """Check a DataFrame's schema against the sink's columns; return what to select.

    Raises:
        RecordTypeError: no ``value`` column, a column of the wrong type, or neither a
            ``topic`` column nor a sink ``topic``; names the column.
    """
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise RecordTypeError(f"the DataFrame has no 'value' column (columns: "
                              f"{', '.join(types) or 'none'}); the sink takes value, key, "
                              f"topic, partition, headers")
    columns = ["value"]
    for name, check in (("key", _text_or_bytes), ("topic", _string), ("partition", _int),
                        ("headers", _headers)):
        if name in types and not (name == "topic" and topic is not None):
            check(name, types[name])
            columns.append(name)
    _text_or_bytes("value", types["value"])
    if topic is None and "topic" not in columns:
        raise RecordTypeError("no 'topic' column and no topic given to the sink: set one")
    return Layout(tuple(columns), topic)


def chunks(rows: Iterable[Sequence[Any]], layout: Layout, size: int) -> Iterator[Chunk]:
    """The selected rows, ``size`` at a time, converted to records.

    Raises:
        RecordTypeError: a row's topic is null (and the sink has none), or a header is malformed.
    """
    convert = _converter(layout)
    it = iter(rows)
    while True:
        block = list(islice(it, size))
        if not block:
            return
        yield convert(block)


def arrow_chunks(record_batch: Any, layout: Layout, size: int) -> Iterator[Chunk]:
    """An Arrow record batch's rows (the data source writer's input), ``size`` at a time, as
    :func:`chunks` converts them.

    In the common layout (the sink's topic; ``value`` and perhaps ``key``) each column
    becomes bytes in Arrow (a string column is cast to binary: its UTF-8 bytes as they are)
    and is sliced, with no Python work per row; other layouts go row by row.

    Raises:
        RecordTypeError: as :func:`chunks`.
    """
    if layout.topic is not None and set(layout.columns) <= {"value", "key"}:
        values = _bytes_column(record_batch.column("value"))
        keys: list[bytes | None] = _bytes_column(record_batch.column("key")) \
            if "key" in layout.columns else [None] * len(values)
        for start in range(0, len(values), size):
            block = values[start:start + size]
            yield Chunk({(layout.topic, None): (keys[start:start + size], block)}, [],
                        len(block))
        return
    columns = [record_batch.column(name).to_pylist() for name in layout.columns]
    if "headers" in layout.columns:
        at = layout.columns.index("headers")
        columns[at] = [None if hs is None else [(h["key"], h["value"]) for h in hs]
                       for hs in columns[at]]
    yield from chunks(zip(*columns, strict=True), layout, size)


_BINARY_OF = {"string": "binary", "large_string": "large_binary"}  # Arrow type names


def _bytes_column(column: Any) -> list[bytes | None]:
    """A string or binary Arrow array as bytes objects (None for null); by type name, so this
    module does not import pyarrow (the foreachBatch modes run without it)."""
    binary = _BINARY_OF.get(str(column.type))
    result: list[bytes | None] = (column if binary is None else column.cast(binary)).to_pylist()
    return result


@dataclass(frozen=True, slots=True)
class Prepare:
    """Rows to placed chunks (atomic mode, on the driver): with a sink topic of ``partitions``
    partitions, keyed records are given their partition (murmur2, as the producer would) among
    the partitions the transaction pre-registered. A malformed row becomes a chunk carrying
    its error, which :func:`eosclient.spark._task.write_chunks` raises."""

    layout: Layout
    size: int
    partitions: int | None

    def __call__(self, rows: Iterable[Sequence[Any]]) -> Iterator[Chunk]:
        try:
            for chunk in chunks(rows, self.layout, self.size):
                yield _placed(chunk, self.partitions) if self.partitions else chunk
        except RecordTypeError as exc:  # carried as a chunk: the form also survives pickling
            yield Chunk({}, [], 0, str(exc))


def _placed(chunk: Chunk, count: int) -> Chunk:
    """``chunk`` with its keyed records of unplaced groups grouped by their partition."""
    groups: dict[tuple[str, int | None], tuple[list[bytes | None], list[bytes | None]]] = {}
    for (topic, partition), (keys, values) in chunk.groups.items():
        if partition is not None:
            _extend(groups, (topic, partition), [keys], [values])
            continue
        for key, value in zip(keys, values, strict=True):
            where = (topic, None if key is None else partition_for(key, count))
            found = groups.get(where)
            if found is None:
                groups[where] = ([key], [value])
            else:
                found[0].append(key)
                found[1].append(value)
    return Chunk(groups, chunk.singles, chunk.rows)


def _extend(groups: dict[tuple[str, int | None], tuple[list[bytes | None], list[bytes | None]]],
            where: tuple[str, int | None], keys: list[list[bytes | None]],
            values: list[list[bytes | None]]) -> None:
    found = groups.setdefault(where, ([], []))
    for k, v in zip(keys, values, strict=True):
        found[0].extend(k)
        found[1].extend(v)


def _converter(layout: Layout) -> Any:
    ki, ti, pi, hi = (layout.index(n) for n in ("key", "topic", "partition", "headers"))
    fixed = layout.topic

    def convert(block: list[Sequence[Any]]) -> Chunk:
        if ti is None and pi is None and hi is None and fixed is not None:  # the common case
            values = [_bytes(r[0]) for r in block]
            keys: list[bytes | None] = [_bytes(r[ki]) for r in block] if ki is not None \
                else [None] * len(block)
            return Chunk({(fixed, None): (keys, values)}, [], len(block))
        chunk = Chunk({}, [], len(block))
        for r in block:
            topic = fixed or (r[ti] if ti is not None else None)
            if topic is None:
                raise RecordTypeError("a row has a null topic and the sink has no topic")
            partition = r[pi] if pi is not None else None
            key, value = _bytes(r[ki]) if ki is not None else None, _bytes(r[0])
            headers = r[hi] if hi is not None else None
            if headers:
                chunk.singles.append((topic, partition, key, value, _headers_of(headers)))
            else:
                keys, values = chunk.groups.setdefault((topic, partition), ([], []))
                keys.append(key)
                values.append(value)
        return chunk

    return convert


def _bytes(item: object) -> bytes | None:
    if item is None or type(item) is bytes:
        return item
    if type(item) is str:
        return item.encode()
    return bytes(item)  # type: ignore[call-overload,no-any-return]  # bytearray: older pysparks


def _headers_of(headers: Iterable[Any]) -> list[Header]:
    out: list[Header] = []
    for header in headers:
        if header is None or header[0] is None:
            raise RecordTypeError("a header with a null key")
        out.append((header[0], _bytes(header[1])))
    return out


def _text_or_bytes(name: str, kind: DataType) -> None:
    if not isinstance(kind, _TEXT_OR_BYTES):
        raise RecordTypeError(f"column {name!r} must be string or binary, not "
                              f"{kind.simpleString()}")


def _string(name: str, kind: DataType) -> None:
    if not isinstance(kind, StringType):
        raise RecordTypeError(f"column {name!r} must be string, not {kind.simpleString()}")


def _int(name: str, kind: DataType) -> None:
    if not isinstance(kind, IntegerType):
        raise RecordTypeError(f"column {name!r} must be int, not {kind.simpleString()}")


def _headers(name: str, kind: DataType) -> None:
    element = kind.elementType if isinstance(kind, ArrayType) else None
    fields = {f.name: f.dataType for f in element.fields} if isinstance(element, StructType) \
        else {}
    if set(fields) != {"key", "value"} or not isinstance(fields["key"], StringType) \
            or not isinstance(fields["value"], BinaryType):
        raise RecordTypeError(f"column {name!r} must be array<struct<key: string, value: "
                              f"binary>>, not {kind.simpleString()}")
