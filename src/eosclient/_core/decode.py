"""Fetched bytes -> record batches (format v2), checked, with records decoded on demand.

Theory of operation
-------------------
A Fetch partition's ``records`` field is a run of record batches laid end to end. Each starts with
its base offset (int64) and the length of the rest (int32); the magic byte at byte 16 says the
format. Only v2 (magic 2, KIP-98) carries a producer id, an epoch and the transactional and
control flags, so a partition in the older formats cannot be read with transactions and is a
:class:`~eosclient.errors.FatalError` here.

:func:`decode_batches` splits the bytes, checks every batch's CRC-32C (it covers everything from
the attributes on; the base offset, length, leader epoch and magic are outside it, so offsets
running backwards are checked separately; ``check.crcs=False`` skips the CRC, never the rest)
and reads the 61-byte header. A batch whose bytes run past the end is the partial batch a Fetch
may end with (the broker cuts at ``max_bytes``): it is not an error, it is dropped, and fetching
resumes at its offset. Control batches (KIP-98) are parsed at once into their marker, since the
read_committed filter needs every marker; other batches decode their records only when
:meth:`RecordBatch.records` is called, so a batch the filter drops as aborted is never
decompressed or parsed. Decompression streams into at most ``receive.message.max.bytes``
(snappy: its claimed length is checked first); a batch that would make more is corrupt (or
hostile), and refused before the memory is taken.

The record loop is this module's own (kafka-python's ``DefaultRecordBatch`` reads about 200k
records/s here, a third of this loop's rate): the common one- and two-byte varints are read inline.
kafka-python's decoder and builder cross-check it in the tests.
"""

from __future__ import annotations

import enum
import importlib
import struct
import zlib
from array import array
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import Any, Final, Generic, NamedTuple

from kafka import codec as _codec
from kafka.record.util import calc_crc32c

from eosclient._core.records import Header, KeyT, ValueT
from eosclient._core.types import TopicPartition
from eosclient._extras import install_extra
from eosclient.errors import CorruptRecordError, FatalError

__all__ = ["CREATE_TIME", "LOG_APPEND_TIME", "BinaryColumn", "ConsumerRecord", "ControlType",
           "DecodedBatches", "RecordBatch", "RecordColumns", "decode_batches"]

# BaseOffset Length PartitionLeaderEpoch Magic CRC Attributes LastOffsetDelta FirstTimestamp
# MaxTimestamp ProducerId ProducerEpoch BaseSequence RecordCount
_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_PREFIX: Final = struct.Struct(">qi")  # base offset and length: every format starts so
_LOG_OVERHEAD: Final = 12
_MAGIC_AT: Final = 16
_CRC_FROM: Final = 21  # the CRC covers the attributes onwards
_CRC_AT: Final = 17
_CRC: Final = struct.Struct(">I")
_CONTROL_KEY: Final = struct.Struct(">hh")  # version, type
_BAD_CRC: Final = (
    "record batch fails its CRC-32C check: corrupt in transit or on the broker's disk. A broker "
    "known to write bad CRCs (librdkafka's mock cluster does, in its control batches) is read "
    "with check.crcs=False")

#: ``receive.message.max.bytes``' default: what a batch may decompress to unless told otherwise.
DEFAULT_MAX_DECOMPRESSED: Final = 100_000_000

#: Whether checking a batch's records makes no object per record (then a column asked for
#: parses them again). True where this module runs compiled; pure Python parses at a third of
#: the speed, so there a second pass would cost as much as the first: it decodes while checking.
_LAZY: Final = not __file__.endswith(".py")

_CODEC_MASK: Final = 0x07
_LOG_APPEND_TIME: Final = 0x08
_TRANSACTIONAL: Final = 0x10
_CONTROL: Final = 0x20

#: A record's timestamp type (its batch's attributes bit 3): set by its producer.
CREATE_TIME: Final = 0
#: A record's timestamp type: set by the broker when it appended the batch (the topic's
#: ``message.timestamp.type=LogAppendTime``); all the batch's records carry the same.
LOG_APPEND_TIME: Final = 1


class ControlType(enum.IntEnum):
    """What a control batch's one record says (KIP-98); its key is (version int16, type int16)."""

    UNKNOWN = -1
    """A type this client does not know (KRaft's internal types); the batch is skipped."""
    ABORT = 0
    COMMIT = 1


class ConsumerRecord(NamedTuple, Generic[KeyT, ValueT]):
    """One record, as the decoder makes it and ``poll()`` delivers it (no copy in between).

    Generic in what its key and value are: ``ConsumerRecord[str, Any]`` is what a consumer
    with ``key_deserializer=bytes.decode, value_deserializer=json.loads`` delivers; a bare
    ``ConsumerRecord`` is ``ConsumerRecord[bytes, bytes]`` (no deserializer). Only the type
    checker sees the parameters: every record is this one class, made the same way.

    Attributes:
        topic: The topic.
        partition: The partition.
        offset: Its offset; commit ``offset + 1`` (or the consumer's ``position``) after it.
        key: The key (bytes, or what the key deserializer made of them), or None.
        value: The value (likewise), or None (a tombstone).
        headers: ``(key, value)`` pairs, in the order written (a tuple).
        timestamp_ms: CreateTime, or the broker's LogAppendTime if the topic uses that.
    """

    topic: str
    partition: int
    offset: int
    key: KeyT | None
    value: ValueT | None
    headers: tuple[Header, ...]
    timestamp_ms: int


class BinaryColumn:
    """A column of ``bytes | None`` in Arrow's binary layout: all the bytes end to end in
    :attr:`data`, row ``i`` being ``data[offsets[i]:offsets[i + 1]]``, or None if ``i`` is in
    :attr:`nulls`. Indexing or iterating makes the ``bytes`` objects, one per row asked for;
    :meth:`to_arrow` makes a ``pyarrow`` array without them.

    Attributes:
        data: The bytes of every row, in row order.
        offsets: ``len + 1`` int64 offsets into :attr:`data` (an ``array('q')``).
        nulls: The rows that are None, ascending (their span is empty).
    """

    __slots__ = ("_null_rows", "data", "nulls", "offsets")

    def __init__(self, data: bytes, offsets: array[int], nulls: list[int]) -> None:
        self.data = data
        self.offsets = offsets
        self.nulls = nulls
        self._null_rows = frozenset(nulls)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, row: int) -> bytes | None:
        if row < 0:
            row += len(self)
        if not 0 <= row < len(self):
            raise IndexError(f"row {row} of {len(self)}")
        if row in self._null_rows:
            return None
        return self.data[self.offsets[row]:self.offsets[row + 1]]

    def __iter__(self) -> Iterator[bytes | None]:
        data, offsets, null = self.data, self.offsets, self._null_rows
        for row in range(len(offsets) - 1):
            yield None if row in null else data[offsets[row]:offsets[row + 1]]

    def to_arrow(self) -> Any:
        """A ``pyarrow`` binary array over these buffers (:attr:`data` is not copied).

        Raises:
            ImportError: pyarrow is not installed.
        """
        pa = importlib.import_module("pyarrow")
        size = len(self)
        validity = None
        if self.nulls:
            mask = [True] * size
            for row in self.nulls:
                mask[row] = False
            validity = pa.array(mask, pa.bool_()).buffers()[1]
        return pa.Array.from_buffers(
            pa.large_binary(), size, [validity, pa.py_buffer(self.offsets),
                                      pa.py_buffer(self.data)], len(self.nulls)).cast(
            pa.binary())

    def __repr__(self) -> str:
        return f"<BinaryColumn {len(self)} rows, {len(self.data)} bytes, {len(self.nulls)} null>"


class _Rows:
    """Decoded rows as six parallel lists (row ``i`` is one record)."""

    __slots__ = ("headers", "keys", "offsets", "timestamp_types", "timestamps", "values")

    def __init__(self, offsets: list[int], keys: list[bytes | None],  # noqa: PLR0917
                 values: list[bytes | None], timestamps: list[int],
                 headers: list[tuple[Header, ...]], timestamp_types: list[int]) -> None:
        self.offsets = offsets
        self.keys = keys
        self.values = values
        self.timestamps = timestamps
        self.headers = headers
        self.timestamp_types = timestamp_types

    def extend(self, other: _Rows, start: int, stop: int) -> None:
        self.offsets += other.offsets[start:stop]
        self.keys += other.keys[start:stop]
        self.values += other.values[start:stop]
        self.timestamps += other.timestamps[start:stop]
        self.headers += other.headers[start:stop]
        self.timestamp_types += other.timestamp_types[start:stop]


def _no_rows() -> _Rows:
    return _Rows([], [], [], [], [], [])


class _Checked:
    """One batch's records from ``min_offset`` on, checked (every record parsed) but not made
    into objects until asked (:meth:`rows`), or made into :class:`ConsumerRecord` tuples while
    checking (``records_of``: for a caller that wants records, not columns). Shared by the
    columns that deliver its rows."""

    __slots__ = ("base_offset", "buf", "count", "decoded_records", "decoded_rows", "dense",
                 "end", "first", "last", "log_append", "min_offset", "pos", "rows", "timestamp")

    def __init__(self, buf: bytes, pos: int, end: int,  # noqa: PLR0917 - _decode's inputs
                 count: int, base_offset: int, timestamp: int, log_append: bool,
                 min_offset: int, keep: bool, records_of: TopicPartition | None = None) -> None:
        self.buf, self.pos, self.end, self.count = buf, pos, end, count
        self.base_offset, self.timestamp, self.log_append = base_offset, timestamp, log_append
        self.min_offset = min_offset
        records: list[ConsumerRecord] | None = None if records_of is None else []
        into = _no_rows() if records is None and (keep or not _LAZY) else None
        self.rows, self.first, self.last, self.dense = _decode(
            buf, pos, end, count, base_offset, timestamp, log_append, min_offset, into, None,
            records, records_of)
        self.decoded_rows = into  # None until decoded
        self.decoded_records = records  # made only while checking, when asked for

    def decoded(self) -> _Rows:
        """Its rows as lists (decoded on the first call; it parsed once already)."""
        rows = self.decoded_rows
        if rows is None:
            rows = _no_rows()
            _decode(self.buf, self.pos, self.end, self.count, self.base_offset, self.timestamp,
                    self.log_append, self.min_offset, rows)
            self.decoded_rows = rows
        return rows

    def offset_at(self, row: int) -> int:
        if self.dense:
            return self.first + row
        records = self.decoded_records
        return records[row].offset if records is not None else self.decoded().offsets[row]


class _Slice:
    """Rows ``start`` to ``stop`` of a checked batch."""

    __slots__ = ("source", "start", "stop")

    def __init__(self, source: _Checked, start: int, stop: int) -> None:
        self.source, self.start, self.stop = source, start, stop


class RecordColumns:
    """One partition's records as columns: one sequence per field, row ``i`` being one record.

    What ``poll_batch()`` delivers. Its records are checked (parsed, CRC-checked) when they
    are delivered, but no Python object is made per record until a column is asked for:
    :attr:`offsets`, :attr:`keys`, :attr:`values`, :attr:`timestamps` and :attr:`headers` are
    lists built (once) on first access; :meth:`values_buffer` and :meth:`keys_buffer` give a
    column as one contiguous buffer and offsets (Arrow's binary layout) without them;
    :meth:`to_arrow` makes a ``pyarrow.RecordBatch``. ``len()`` and :attr:`next_offset` need
    no column at all.

    Attributes:
        topic: The topic.
        partition: The partition.
        offsets: Each record's offset, ascending.
        keys: Each record's key bytes, or None.
        values: Each record's value bytes, or None (a tombstone).
        timestamps: Each record's timestamp in ms (CreateTime, or the broker's LogAppendTime).
        headers: Each record's ``(key, value)`` header pairs (a tuple, often empty).
        timestamp_types: What each record's timestamp is: :data:`CREATE_TIME` (0) or
            :data:`LOG_APPEND_TIME` (1), from its batch's attributes (the topic's
            ``message.timestamp.type``); Spark's Kafka source's ``timestampType`` column.
    """

    __slots__ = ("_keys", "_parts", "_rows", "_size", "_values", "partition", "topic")

    def __init__(self, topic: str, partition: int,  # noqa: PLR0917 - the fields, in order
                 offsets: list[int] | None = None, keys: list[bytes | None] | None = None,
                 values: list[bytes | None] | None = None, timestamps: list[int] | None = None,
                 headers: list[tuple[Header, ...]] | None = None,
                 timestamp_types: list[int] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        # The rows are either lists (_rows: given, or decoded on first access) or, until a
        # column is asked for, slices of checked batches (_parts, _size rows in all).
        self._rows: _Rows | None = None
        self._parts: list[_Slice] = []
        self._size = 0
        # While lazy, the keys or values column alone, made on first access of it (the others
        # stay undecoded: a reader of values alone pays for no offsets, timestamps, headers).
        self._keys: list[bytes | None] | None = None
        self._values: list[bytes | None] | None = None
        if offsets is not None or keys is not None or values is not None or (
                timestamps is not None or headers is not None or timestamp_types is not None):
            offsets = [] if offsets is None else offsets
            self._rows = _Rows(offsets, [] if keys is None else keys,
                               [] if values is None else values,
                               [] if timestamps is None else timestamps,
                               [] if headers is None else headers,
                               [CREATE_TIME] * len(offsets) if timestamp_types is None
                               else timestamp_types)

    @property
    def offsets(self) -> list[int]:
        """Each record's offset, ascending (decoded on first access)."""
        return self._decoded().offsets

    @property
    def keys(self) -> list[bytes | None]:
        """Each record's key bytes, or None (decoded on first access)."""
        if self._rows is not None:
            return self._rows.keys
        if self._keys is None:
            self._keys = self._column(False)
        return self._keys

    @property
    def values(self) -> list[bytes | None]:
        """Each record's value bytes, or None: a tombstone (decoded on first access)."""
        if self._rows is not None:
            return self._rows.values
        if self._values is None:
            self._values = self._column(True)
        return self._values

    @property
    def timestamps(self) -> list[int]:
        """Each record's timestamp in ms (decoded on first access)."""
        return self._decoded().timestamps

    @property
    def headers(self) -> list[tuple[Header, ...]]:
        """Each record's ``(key, value)`` header pairs (decoded on first access)."""
        return self._decoded().headers

    @property
    def timestamp_types(self) -> list[int]:
        """Each record's timestamp type: 0 CreateTime, 1 LogAppendTime (decoded on first
        access; one value per batch, repeated for its rows)."""
        return self._decoded().timestamp_types

    def _decoded(self) -> _Rows:
        rows = self._rows
        if rows is None:
            rows = _no_rows()
            for part in self._parts:
                rows.extend(part.source.decoded(), part.start, part.stop)
            # A column handed out already stays the one this object holds.
            if self._keys is not None:
                rows.keys = self._keys
            if self._values is not None:
                rows.values = self._values
            self._rows, self._parts, self._size = rows, [], 0
            self._keys = self._values = None
        return rows

    def _column(self, values: bool) -> list[bytes | None]:
        """The values (or keys) of the lazy rows as a list, decoding that column alone."""
        out: list[bytes | None] = []
        for part in self._parts:
            source = part.source
            rows = source.decoded_rows
            if rows is not None:  # decoded already (the pure build, or asked)
                out += (rows.values if values else rows.keys)[part.start:part.stop]
                continue
            gather = _Gather(values, part.start, part.stop, out)
            _decode(source.buf, source.pos, source.end, source.count, source.base_offset,
                    source.timestamp, source.log_append, source.min_offset, None, gather)
        return out

    def __reduce__(self) -> tuple[type[RecordColumns], tuple[Any, ...]]:
        # Pickled by its fields, alike in both builds (a compiled class has no default way).
        return RecordColumns, (self.topic, self.partition, self.offsets, self.keys, self.values,
                               self.timestamps, self.headers, self.timestamp_types)

    def __len__(self) -> int:
        rows = self._rows
        return self._size if rows is None else len(rows.offsets)

    @property
    def next_offset(self) -> int:
        """The offset after the last record: what to commit once all of them are processed
        (equal to the consumer's position unless more was delivered from the partition
        since). Raises IndexError when there are no records."""
        return self.offset_at(len(self) - 1) + 1

    def offset_at(self, row: int) -> int:
        """Row ``row``'s offset (0 <= row < len), without decoding the offsets column.

        Raises:
            IndexError: there is no such row.
        """
        if self._rows is not None:
            return self._rows.offsets[row]
        if not 0 <= row < self._size:
            raise IndexError(f"row {row} of {self._size}")
        for part in self._parts:
            if row < part.stop - part.start:
                return part.source.offset_at(part.start + row)
            row -= part.stop - part.start
        raise IndexError(row)  # not reached: the sizes add up

    def _between(self, start: int, stop: int) -> _Rows:
        """Rows ``start`` to ``stop`` as lists, decoding only the batches they come from and
        leaving this object as it is (lazy or not)."""
        rows = self._rows
        if rows is not None:
            out = _no_rows()
            out.extend(rows, start, stop)
            return out
        out = _no_rows()
        for part in self._clipped(start, stop):
            out.extend(part.source.decoded(), part.start, part.stop)
        return out

    def _clipped(self, start: int, stop: int) -> list[_Slice]:
        """Lazy rows ``start`` to ``stop`` as slices of the checked batches they are in."""
        out: list[_Slice] = []
        at = 0
        for part in self._parts:
            size = part.stop - part.start
            lo, hi = max(start - at, 0), min(stop - at, size)
            if lo < hi:
                out.append(_Slice(part.source, part.start + lo, part.start + hi))
            at += size
        return out

    def _span(self, start: int, stop: int | None) -> tuple[int, int]:
        return slice(start, stop).indices(len(self))[:2]

    def records(self, start: int = 0, stop: int | None = None) -> list[ConsumerRecord]:
        """Rows ``start`` to ``stop`` (the end when None) as :class:`ConsumerRecord` tuples
        (one object per record)."""
        if self._rows is None and all(p.source.decoded_records is not None for p in self._parts):
            # made while checking (``RecordBatch.columns(records=True)``): slices of them
            start, stop = self._span(start, stop)
            out: list[ConsumerRecord] = []
            for part in self._clipped(start, stop):
                made = part.source.decoded_records
                assert made is not None  # (checked above; for mypy)
                out += made[part.start:part.stop]
            return out
        rows = self._rows if self._rows is not None and not start and stop is None else (
            self._between(*self._span(start, stop)))
        return list(map(tuple.__new__, repeat(ConsumerRecord), zip(
            repeat(self.topic), repeat(self.partition), rows.offsets, rows.keys, rows.values,
            rows.headers, rows.timestamps)))

    def extend(self, other: RecordColumns, start: int = 0, stop: int | None = None) -> None:
        """Append ``other``'s rows ``start`` to ``stop`` (the end when None). Rows not yet
        decoded stay so when both sides are."""
        start, stop = other._span(start, stop)
        if self._keys is not None or self._values is not None:
            self._decoded()  # a column handed out grows with the rows
        if self._rows is not None or other._rows is not None:
            self._decoded().extend(other._between(start, stop), 0, stop - start)
            return
        parts = other._clipped(start, stop)
        self._parts += parts
        self._size += sum(part.stop - part.start for part in parts)

    def _append(self, source: _Checked) -> None:
        """Append every row of a checked batch (not decoded)."""
        if source.rows:
            if self._keys is not None or self._values is not None:
                self._decoded()  # a column handed out grows with the rows
            if self._rows is not None:
                self._rows.extend(source.decoded(), 0, source.rows)
            else:
                self._parts.append(_Slice(source, 0, source.rows))
                self._size += source.rows

    def truncate(self, rows: int) -> None:
        """Keep the first ``rows`` rows only."""
        if self._keys is not None or self._values is not None:
            self._decoded()  # a column handed out shrinks with the rows
        if self._rows is not None:
            for column in (self.offsets, self.keys, self.values, self.timestamps, self.headers,
                           self.timestamp_types):
                del column[rows:]
            return
        self._parts, self._size = self._clipped(0, rows), min(self._size, max(rows, 0))

    def values_buffer(self) -> BinaryColumn:
        """The values as one contiguous buffer (Arrow's binary layout), without a Python
        object per value: see :class:`BinaryColumn`."""
        return self._buffer(True)

    def keys_buffer(self) -> BinaryColumn:
        """The keys as one contiguous buffer (Arrow's binary layout): see :class:`BinaryColumn`."""
        return self._buffer(False)

    def _buffer(self, values: bool) -> BinaryColumn:
        out = _Gather(values, 0, 0)
        if self._rows is not None:
            _gather_rows(self._rows, 0, len(self._rows.offsets), out)
        for part in self._parts:
            source = part.source
            if source.decoded_rows is not None:  # decoded already (the pure build, or asked)
                _gather_rows(source.decoded_rows, part.start, part.stop, out)
                continue
            # straight onto the end of out: its rows part.start..part.stop, numbered on
            out.start, out.stop, out.base = part.start, part.stop, len(out.ends) - 1
            _decode(source.buf, source.pos, source.end, source.count, source.base_offset,
                    source.timestamp, source.log_append, source.min_offset, None, out)
        return BinaryColumn(bytes(out.data), array("q", out.ends), out.nulls)

    def to_arrow(self) -> Any:
        """The columns as a ``pyarrow.RecordBatch`` (``offset`` int64, ``key`` and ``value``
        binary, ``timestamp`` timestamp[ms], ``headers`` list of {key string, value binary}).

        Raises:
            ImportError: pyarrow is not installed (``pip install pyarrow``).
        """
        try:
            pa = importlib.import_module("pyarrow")  # optional: only this needs it
        except ImportError as exc:
            raise ImportError("RecordColumns.to_arrow() needs pyarrow: pip install pyarrow"
                              ) from exc
        header = pa.struct([("key", pa.string()), ("value", pa.binary())])
        return pa.RecordBatch.from_arrays(
            [pa.array(self.offsets, pa.int64()), self.keys_buffer().to_arrow(),
             self.values_buffer().to_arrow(), pa.array(self.timestamps, pa.timestamp("ms")),
             pa.array([[{"key": k, "value": v} for k, v in h] for h in self.headers],
                      pa.list_(header))],
            names=["offset", "key", "value", "timestamp", "headers"])

    def __repr__(self) -> str:
        span = f"{self.offset_at(0)}..{self.offset_at(len(self) - 1)}" if len(self) else "empty"
        return f"<RecordColumns {self.topic}-{self.partition} {len(self)} records {span}>"


class RecordBatch:
    """One checked v2 record batch: its header read, its records decoded on demand.

    :meth:`records` decompresses and decodes on every call and keeps nothing, so a batch that is
    held costs its wire size and one that is dropped costs only its header.

    Attributes:
        tp: The partition it was fetched from (named in errors).
        base_offset: The first offset it covers.
        last_offset: The last offset it covers (records may be missing below it: compaction).
        producer_id: The producer id, or -1 for a producer without one.
        producer_epoch: The producer epoch, or -1.
        base_sequence: The first record's sequence number, or -1.
        is_transactional: Written inside a transaction (KIP-98).
        is_control: A control batch: its one record is a marker, never delivered.
        control_type: The marker of a control batch, else None.
        compression: The codec number (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
        max_decompressed: The most its records may decompress to (``receive.message.max.bytes``):
            more is a :class:`~eosclient.errors.CorruptRecordError`, raised before it is
            allocated.
        record_count: How many records it holds.
        size_in_bytes: Its size on the wire, header included.
    """

    __slots__ = ("_buf", "_end", "_start", "_timestamps", "base_offset", "base_sequence",
                 "compression", "control_type", "is_control", "is_transactional", "last_offset",
                 "max_decompressed", "producer_epoch", "producer_id", "record_count",
                 "size_in_bytes", "tp")

    def __init__(self, tp: TopicPartition, buf: bytes, start: int, end: int,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> None:
        (self.base_offset, _, _, _, _, attributes, last_delta, first_ts, max_ts, self.producer_id,
         self.producer_epoch, self.base_sequence, self.record_count) = _HEADER.unpack_from(
            buf, start)
        self.tp = tp
        self.max_decompressed = max_decompressed
        self.last_offset: int = self.base_offset + last_delta
        self.size_in_bytes = end - start
        self.compression: int = attributes & _CODEC_MASK
        self.is_transactional = bool(attributes & _TRANSACTIONAL)
        self.is_control = bool(attributes & _CONTROL)
        # LogAppendTime: every record carries the batch's max timestamp, whatever its delta.
        self._timestamps: tuple[int, bool] = (
            (max_ts, True) if attributes & _LOG_APPEND_TIME else (first_ts, False))
        self._buf = buf
        self._start = start + _HEADER.size
        self._end = end
        self.control_type: ControlType | None = self._read_marker() if self.is_control else None

    def records(self, min_offset: int = 0) -> list[ConsumerRecord]:
        """Decompress and decode the records, skipping those below ``min_offset``.

        A Fetch answers with the whole batch that holds the fetch offset, so the first batch of a
        response can start before it; ``min_offset`` drops that head.

        Raises:
            CorruptRecordError: the records do not parse (a producer bug: the CRC matched), or
                decompress to more than :attr:`max_decompressed`.
        """
        return self.columns(RecordColumns(*self.tp), min_offset, records=True).records()

    def columns(self, into: RecordColumns, min_offset: int = 0, *,
                decode: bool = False, records: bool = False) -> RecordColumns:
        """Decompress and check the records, and append those from ``min_offset`` on to the end
        of ``into`` (returned); on an error ``into`` is left as it was.

        Every record is parsed here, so a batch that does not parse fails now; but the compiled
        build makes no object per record until a column is asked for, unless ``decode`` (the
        caller wants every column: decoding while checking saves a pass) or ``records`` (the
        caller wants :meth:`RecordColumns.records`: each record is made a
        :class:`ConsumerRecord` while checking, with no column lists in between). The pure
        build decodes while checking always (a second pass would cost it as much as the first).

        Raises:
            CorruptRecordError: as :meth:`records`.
        """
        buf, pos, end = self._payload()
        try:
            checked = _Checked(buf, pos, end, self.record_count, self.base_offset,
                               *self._timestamps, min_offset, decode,
                               self.tp if records else None)
        except (IndexError, ValueError) as exc:  # ran off the end, or bad UTF-8 in a header key
            raise self._corrupt(f"records do not parse: {exc}") from exc
        into._append(checked)
        return into

    def detach(self) -> None:
        """Copy this batch's bytes out of the response buffer they share, so that holding it
        does not keep the whole response alive."""
        if self._start != _HEADER.size or self._end != len(self._buf):
            start = self._start - _HEADER.size
            self._buf = self._buf[start:self._end]
            self._start, self._end = _HEADER.size, len(self._buf)

    def __repr__(self) -> str:
        kind = (f"control {self.control_type.name}" if self.control_type is not None
                else "transactional" if self.is_transactional else "plain")
        return (f"<RecordBatch {self.tp.topic}-{self.tp.partition} "
                f"{self.base_offset}..{self.last_offset} {kind} pid={self.producer_id}>")

    def _payload(self) -> tuple[bytes, int, int]:
        if self.compression == 0:
            return self._buf, self._start, self._end
        codec = _DECOMPRESSORS.get(self.compression)
        if codec is None:
            raise self._corrupt(f"unknown compression codec {self.compression}")
        name, decompress = codec
        try:
            _needs(name)
            data = decompress(self._buf[self._start:self._end], self.max_decompressed)
        except ImportError as exc:
            raise FatalError(f"{self._where()}: {exc}") from exc
        except _TooLargeError as exc:
            raise self._corrupt(f"{name} payload refused: {exc}; a corrupt or hostile batch "
                                "(raise the setting if it is genuine)") from exc
        except Exception as exc:  # each codec library raises its own types
            raise self._corrupt(f"does not decompress: {exc!r}") from exc
        return data, 0, len(data)

    def _read_marker(self) -> ControlType:
        if self.record_count <= 0:
            return ControlType.UNKNOWN  # Java skips an empty control batch too
        if self.compression:  # (Kafka never compresses markers)
            key = self.records()[0].key
        else:  # the key alone: a marker per transaction and partition, records made cost 3x
            try:
                key = _control_key(self._buf, self._start, self._end)
            except (IndexError, ValueError) as exc:
                raise self._corrupt(f"records do not parse: {exc}") from exc
        if key is None or len(key) < _CONTROL_KEY.size:
            raise self._corrupt(f"control record key {key!r} is not (version, type)")
        _, kind = _CONTROL_KEY.unpack_from(key)
        return _MARKERS.get(kind, ControlType.UNKNOWN)

    def _where(self) -> str:
        return f"{self.tp.topic}-{self.tp.partition} at offset {self.base_offset}"

    def _corrupt(self, message: str) -> CorruptRecordError:
        return CorruptRecordError(message, topic=self.tp.topic, partition=self.tp.partition,
                                  offset=self.base_offset)


_MARKERS: Final = {0: ControlType.ABORT, 1: ControlType.COMMIT}


def _control_key(buf: bytes, pos: int, end: int) -> bytes | None:
    """The key of the first record of an uncompressed payload at ``pos``..``end``."""
    _, pos = _uvarint(buf, pos)  # its length
    _, pos = _uvarint(buf, pos + 1)  # the timestamp delta, after the attributes byte
    _, pos = _uvarint(buf, pos)  # the offset delta
    n, pos = _uvarint(buf, pos)
    size = (n >> 1) ^ -(n & 1)
    if size < 0:
        return None
    if pos + size > end:
        raise IndexError("the key runs past the batch")
    return buf[pos:pos + size]


class _TooLargeError(ValueError):
    """A payload decompresses to more than the bound; raised before the excess is allocated."""


def _needs(name: str) -> None:
    if not getattr(_codec, f"has_{name}")():
        raise ImportError(f"a batch is {name}-compressed and its library is not installed: "
                          + install_extra("compression"))


def _over(limit: int) -> _TooLargeError:
    return _TooLargeError(f"it decompresses to more than receive.message.max.bytes ({limit})")


# Each codec streams into at most `limit` bytes (a few KiB of compressed input can claim
# gigabytes: a 16 KiB zstd batch made 512 MiB, a snappy header claiming 4 GiB aborted a process
# under an address-space limit). One byte past the limit is read to tell "exactly" from "more".

def _gunzip(data: bytes, limit: int) -> bytes:
    out = bytearray()
    while data:  # a payload may hold several gzip members, as Java's GZIPInputStream reads
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out += inflater.decompress(data, limit + 1 - len(out))
        if len(out) > limit or inflater.unconsumed_tail:
            raise _over(limit)
        if not inflater.eof:
            raise ValueError("the gzip stream ends early")
        data = inflater.unused_data
    return bytes(out)


_XERIAL: Final = b"\x82SNAPPY\x00"  # Java's snappy-java framing: magic, 2 versions, blocks


def _unsnappy(data: bytes, limit: int) -> bytes:
    import snappy  # noqa: PLC0415 - optional; _needs checked it is there

    blocks = [data]
    if data.startswith(_XERIAL):
        blocks, pos = [], 16
        while pos < len(data):
            (size,) = struct.unpack_from(">i", data, pos)
            blocks.append(data[pos + 4:pos + 4 + size])
            pos += 4 + size
    # A raw snappy block starts with its decompressed length (a varint): check it before the
    # library allocates that much.
    claimed = sum(_uvarint(block, 0)[0] for block in blocks)
    if claimed > limit:
        raise _over(limit)
    return b"".join(snappy.decompress(block) for block in blocks)


def _unlz4(data: bytes, limit: int) -> bytes:
    import lz4.frame  # noqa: PLC0415 - optional; _needs checked it is there

    inflater = lz4.frame.LZ4FrameDecompressor()
    out: bytes = inflater.decompress(data, max_length=limit + 1)
    if len(out) > limit:
        raise _over(limit)
    if not inflater.eof:
        raise ValueError("the lz4 frame ends early")
    return out


def _unzstd(data: bytes, limit: int) -> bytes:
    import zstandard  # noqa: PLC0415 - optional; _needs checked it is there

    # A stream reader, not decompress(): that one allocates the frame's claimed content size.
    with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
        out: bytes = reader.read(limit + 1)
    if len(out) > limit:
        raise _over(limit)
    return out


_DECOMPRESSORS: Final[dict[int, tuple[str, Callable[[bytes, int], bytes]]]] = {
    1: ("gzip", _gunzip), 2: ("snappy", _unsnappy), 3: ("lz4", _unlz4), 4: ("zstd", _unzstd)}


class DecodedBatches(NamedTuple):
    """The whole batches of one Fetch partition, and how many bytes of a partial one followed.

    Attributes:
        batches: The batches, in offset order.
        truncated_bytes: Bytes of a partial last batch, dropped; fetching resumes at its offset.
            Non-zero with no batch at all means one batch is larger than the fetch's byte limit,
            or that its length field is corrupt (the caller tells which: see ``partial_size``).
        partial_size: The size the partial batch claims, header included (0 when there is
            none, or its length field was cut off too).
    """

    batches: list[RecordBatch]
    truncated_bytes: int
    partial_size: int = 0


def decode_batches(data: bytes | bytearray | memoryview | None, tp: TopicPartition,
                   max_decompressed: int = DEFAULT_MAX_DECOMPRESSED, *,
                   check_crcs: bool = True) -> DecodedBatches:
    """Split a Fetch partition's ``records`` bytes into checked record batches.

    Args:
        data: The bytes (None or empty when the partition had nothing).
        tp: The partition, named in errors and kept on every batch.
        max_decompressed: Each batch's bound on its decompressed records
            (``receive.message.max.bytes``).
        check_crcs: Whether to check each batch's CRC-32C (``check.crcs``). Off, a batch whose
            CRC does not match is decoded as it is; its framing is checked all the same.

    Returns:
        The whole batches in order; a partial batch at the end is dropped and counted.

    Raises:
        CorruptRecordError: a batch failed its CRC-32C (``check_crcs`` only), is too short, has
            an unknown magic, or offsets run backwards. The message names topic, partition and
            offset.
        FatalError: the partition holds the legacy message formats v0/v1.
    """
    if not data:
        return DecodedBatches([], 0)
    if not isinstance(data, bytes):
        data = bytes(data)
    view = memoryview(data)
    batches: list[RecordBatch] = []
    pos, size, last, partial = 0, len(data), -1, 0
    while size - pos >= _LOG_OVERHEAD:
        base, length = _PREFIX.unpack_from(data, pos)
        end = pos + _LOG_OVERHEAD + length
        if end > size:
            partial = end - pos
            break  # the partial batch a Fetch may end with (KIP-74)
        if length < _HEADER.size - _LOG_OVERHEAD or data[pos + _MAGIC_AT] != 2 or base <= last:
            _check_frame(data, pos, last, tp)  # raises the error that fits
        if check_crcs and calc_crc32c(view[pos + _CRC_FROM:end]) != \
                _CRC.unpack_from(data, pos + _CRC_AT)[0]:
            raise CorruptRecordError(_BAD_CRC, topic=tp.topic, partition=tp.partition,
                                     offset=base)
        batch = RecordBatch(tp, data, pos, end, max_decompressed)
        last = batch.last_offset
        batches.append(batch)
        pos = end
    return DecodedBatches(batches, size - pos, partial)


def _check_frame(data: bytes, pos: int, last: int, tp: TopicPartition) -> None:
    """Check the fields the CRC does not cover: magic, length, and offsets moving forward."""
    base, length = _PREFIX.unpack_from(data, pos)

    def corrupt(message: str) -> CorruptRecordError:
        return CorruptRecordError(message, topic=tp.topic, partition=tp.partition, offset=base)

    magic = data[pos + _MAGIC_AT] if length > _MAGIC_AT - _LOG_OVERHEAD else -1
    if magic in (0, 1):
        raise FatalError(
            f"{tp.topic}-{tp.partition} at offset {base}: message format v{magic}; transactions "
            "need record batch v2 (magic 2, Kafka 0.11+): upgrade the topic's message format")
    if magic != 2:
        raise corrupt(f"unknown record batch magic {magic}")
    if length < _HEADER.size - _LOG_OVERHEAD:
        raise corrupt(f"record batch length {length} is shorter than its header")
    if base <= last:
        raise corrupt(f"offsets run backwards: batch at {base} follows one ending at {last}")


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint of any length at ``pos``; returns (value, position after)."""
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


class _Gather:
    """Where :func:`_decode` copies one binary column of rows ``start`` to ``stop``: Arrow's
    layout (the bytes end to end, each row's end offset, the null rows, numbered from
    ``base``), or, given ``items``, one ``bytes`` object (or None) each onto that list."""

    __slots__ = ("base", "data", "ends", "items", "nulls", "start", "stop", "values")

    def __init__(self, values: bool, start: int, stop: int,
                 items: list[bytes | None] | None = None) -> None:
        self.values, self.start, self.stop = values, start, stop
        self.items = items
        self.base = 0
        self.data = bytearray()
        self.ends: list[int] = [0]
        self.nulls: list[int] = []


def _gather_rows(rows: _Rows, start: int, stop: int, out: _Gather) -> None:
    """Rows ``start`` to ``stop`` of decoded lists onto ``out``, as :func:`_decode` gathers."""
    at, size = len(out.ends) - 1, len(out.data)
    for row, item in enumerate((rows.values if out.values else rows.keys)[start:stop], at):
        if item is None:
            out.nulls.append(row)
        else:
            out.data += item
            size += len(item)
        out.ends.append(size)


def _decode(  # noqa: PLR0915, PLR0917 - the hot loop, inlined by hand
    buf: bytes, pos: int, end: int, count: int, base_offset: int, timestamp: int,
    log_append: bool, min_offset: int, into: _Rows | None, gather: _Gather | None = None,
    records: list[ConsumerRecord] | None = None, records_of: TopicPartition | None = None,
) -> tuple[int, int, int, bool]:
    """Parse the records of an uncompressed payload; those from ``min_offset`` on are the rows.
    Appends the rows to ``into``'s lists, or as :class:`ConsumerRecord` tuples of partition
    ``records_of`` to ``records``, or copies one column of some rows into ``gather``, or (all
    None) only checks them: no object per record. The hot path, hence long and
    repetitive (and compiled, where it can be).

    Returns:
        The number of rows, the first and last row's offset (-1 without rows), and whether
        the rows' offsets are consecutive (no gap left by compaction).

    Every varint of a v2 record is zigzag-encoded (``(n >> 1) ^ -(n & 1)``); the one- and
    two-byte forms, read inline, cover the lengths and deltas of records up to 8 KiB in batches
    of up to 8192 records; longer ones go through :func:`_uvarint`.
    """
    rows, first, last, dense = 0, -1, -1, True
    # gather's fields as locals (its rows start..stop: none when there is no gather)
    g = gather if gather is not None else _Gather(True, 0, 0)
    g_start, g_stop, g_values, g_data, g_ends, g_nulls = (g.start, g.stop, g.values, g.data,
                                                          g.ends, g.nulls)
    g_items, g_base = g.items, g.base
    topic, partition = records_of if records_of is not None else ("", 0)
    g_size = len(g_data)
    for _ in range(count):
        b = buf[pos]  # record length
        if b < 0x80:
            n, pos = b, pos + 1
        elif (c := buf[pos + 1]) < 0x80:
            n, pos = (b & 0x7F) | (c << 7), pos + 2
        else:
            n, pos = _uvarint(buf, pos)
        record_end = pos + ((n >> 1) ^ -(n & 1))
        b = buf[pos + 1]  # timestamp delta, after the unused attributes byte
        if b < 0x80:
            n, pos = b, pos + 2
        elif (c := buf[pos + 2]) < 0x80:
            n, pos = (b & 0x7F) | (c << 7), pos + 3
        else:
            n, pos = _uvarint(buf, pos + 1)
        ts = timestamp if log_append else timestamp + ((n >> 1) ^ -(n & 1))
        b = buf[pos]  # offset delta
        if b < 0x80:
            n, pos = b, pos + 1
        elif (c := buf[pos + 1]) < 0x80:
            n, pos = (b & 0x7F) | (c << 7), pos + 2
        else:
            n, pos = _uvarint(buf, pos)
        offset = base_offset + ((n >> 1) ^ -(n & 1))
        b = buf[pos]  # key length
        if b < 0x80:
            n, pos = b, pos + 1
        elif (c := buf[pos + 1]) < 0x80:
            n, pos = (b & 0x7F) | (c << 7), pos + 2
        else:
            n, pos = _uvarint(buf, pos)
        key_at = pos
        key_size = -1 if n & 1 else n >> 1
        if key_size > 0:
            pos += key_size
        b = buf[pos]  # value length
        if b < 0x80:
            n, pos = b, pos + 1
        elif (c := buf[pos + 1]) < 0x80:
            n, pos = (b & 0x7F) | (c << 7), pos + 2
        else:
            n, pos = _uvarint(buf, pos)
        value_at = pos
        value_size = -1 if n & 1 else n >> 1
        if value_size > 0:
            pos += value_size
        if buf[pos] == 0:  # no headers: the common case
            headers: tuple[Header, ...] = ()
            pos += 1
        else:
            headers, pos = _headers_at(buf, pos)
        if pos != record_end:
            raise ValueError(f"record at offset {offset}: its fields end {pos - record_end} "
                             "bytes away from where its length says")
        if offset >= min_offset:
            if into is not None:
                into.offsets.append(offset)
                into.keys.append(None if key_size < 0 else buf[key_at:key_at + key_size])
                into.values.append(None if value_size < 0 else
                                   buf[value_at:value_at + value_size])
                into.timestamps.append(ts)
                into.headers.append(headers)
            elif records is not None:
                records.append(_new_tuple(ConsumerRecord, (
                    topic, partition, offset,
                    None if key_size < 0 else buf[key_at:key_at + key_size],
                    None if value_size < 0 else buf[value_at:value_at + value_size],
                    headers, ts)))
            elif g_start <= rows < g_stop:
                at, size = (value_at, value_size) if g_values else (key_at, key_size)
                if g_items is not None:
                    g_items.append(None if size < 0 else buf[at:at + size])
                else:
                    if size < 0:
                        g_nulls.append(g_base + rows - g_start)
                    elif size:
                        g_data += buf[at:at + size]
                        g_size += size
                    g_ends.append(g_size)
            if not rows:
                first = offset
            elif offset != first + rows:
                dense = False
            last = offset
            rows += 1
    if pos != end:
        raise ValueError(f"{end - pos} bytes left after the batch's {count} records")
    if into is not None:  # one type per batch: outside the loop
        into.timestamp_types += [LOG_APPEND_TIME if log_append else CREATE_TIME] * rows
    return rows, first, last, dense


_new_tuple: Final = tuple.__new__  # ConsumerRecord(...) through its __new__ costs twice as much


def _bytes_at(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    b = buf[pos]
    if b < 0x80:
        n, pos = b, pos + 1
    else:
        n, pos = _uvarint(buf, pos)
    n = (n >> 1) ^ -(n & 1)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise IndexError("a key or value runs past the batch")
    return buf[pos:pos + n], pos + n


def _headers_at(buf: bytes, pos: int) -> tuple[tuple[Header, ...], int]:
    n, pos = _uvarint(buf, pos)
    count = (n >> 1) ^ -(n & 1)
    if count < 0:
        raise ValueError(f"negative header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        raw_key, pos = _bytes_at(buf, pos)
        if raw_key is None:
            raise ValueError("a header key is null")
        value, pos = _bytes_at(buf, pos)
        headers.append((raw_key.decode("utf-8"), value))
    return tuple(headers), pos
