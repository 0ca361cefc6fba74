"""Fetch answers (v4-v12) read straight from their bytes, the aborted-transactions index lazily.

Why not kafka-python's generated decoder, as every other answer is read: its cost grows with
what the answer lists, and a read_committed Fetch answer lists, for every partition asked for,
the broker's aborted transactions. noida-db lists every abort the partition ever had (Kafka only
those that reach into the range fetched), and it does so for partitions with no records too; a
consumer of 1,000 partitions of a topic with 200 aborted transactions then read 200,000 index
entries per answer, one Python object each, most of its time. Here a partition costs one
``struct`` read of its fixed fields, and the index of a partition without records is stepped
over (one slice check, not a loop per entry) and made into :class:`AbortedTransaction` tuples
only if asked for (:attr:`FetchedPartition.aborted_transactions`). A partition with records,
whose index the consumer reads when it takes them in, has it read at once, so that it does not
keep the whole answer's bytes alive until then.

The objects read like kafka-python's (``response.responses[i].partitions[j].records`` and the
rest), so that code reading answers takes either; the tests cross-check this reader against
kafka-python's encoder at every version. Versions past :data:`MAX_VERSION` are not read here
(:func:`read` says so by returning None; the caller then uses kafka-python's decoder).

Layout (FetchResponse.json): ``throttle_time_ms`` (v1+), ``error_code`` and ``session_id``
(v7+), then topics, each a name and partitions: ``partition_index``, ``error_code``,
``high_watermark``, ``last_stable_offset`` (v4+), ``log_start_offset`` (v5+), the nullable
``aborted_transactions`` array of (``producer_id``, ``first_offset``), ``preferred_read_replica``
(v11+) and the nullable ``records`` bytes. From v12 (flexible versions, KIP-482) arrays, strings
and bytes carry an unsigned varint length plus one (0: null), and every structure ends with its
tagged fields (a varint count, then tag, size and bytes per field), the response header too; of
a partition's tagged fields ``current_leader`` (KIP-951) is read, ``diverging_epoch`` and
``snapshot_id`` are stepped over (nothing here reads them).
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

__all__ = ["MAX_VERSION", "MIN_VERSION", "AbortedTransaction", "FetchResponse", "FetchedPartition",
           "FetchedTopic", "LeaderIdAndEpoch", "read"]

MIN_VERSION: Final = 4
MAX_VERSION: Final = 12
_FLEXIBLE: Final = 12

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_TOP_V1: Final = struct.Struct(">i")  # throttle_time_ms
_TOP_V7: Final = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PART_V4: Final = struct.Struct(">ihqq")  # partition, error, high watermark, LSO
_PART_V5: Final = struct.Struct(">ihqqq")  # ... and log start offset
_ENTRY: Final = struct.Struct(">qq")  # producer_id, first_offset
_ENTRY_TAGGED: Final = struct.Struct(">qqB")  # ... and an empty tagged-fields count (v12)
_LEADER: Final = struct.Struct(">ii")  # current_leader: leader id, leader epoch
_CURRENT_LEADER: Final = 1  # its tag


class AbortedTransaction(NamedTuple):
    """One entry of a partition's aborted-transactions index."""

    producer_id: int
    first_offset: int


class LeaderIdAndEpoch(NamedTuple):
    """A partition's ``current_leader`` (KIP-951, v12+ tag 1): named where a node that does
    not lead it refuses a Fetch."""

    leader_id: int
    leader_epoch: int


class FetchedPartition:
    """One partition's part of a Fetch answer (kafka-python's field names).

    Attributes:
        partition_index: The partition.
        error_code: Its error code, 0 if none.
        high_watermark: Its high watermark.
        last_stable_offset: Its LSO (-1 if unknown).
        log_start_offset: Its log start offset (-1 before v5).
        preferred_read_replica: The replica to fetch from (-1: the leader; before v11 always).
        records: Its record batches' bytes, or None.
        current_leader: The leader a node that is not it names (v12+, KIP-951), or None.
    """

    __slots__ = ("_buf", "_count", "_decoded", "_start", "_stride", "current_leader",
                 "error_code", "high_watermark", "last_stable_offset", "log_start_offset",
                 "partition_index", "preferred_read_replica", "records")

    def __init__(self, partition_index: int, error_code: int,  # noqa: PLR0917 - the fields
                 high_watermark: int, last_stable_offset: int, log_start_offset: int,
                 preferred_read_replica: int, records: bytes | None) -> None:
        self.partition_index = partition_index
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.preferred_read_replica = preferred_read_replica
        self.records = records
        self.current_leader: LeaderIdAndEpoch | None = None
        self._buf = b""
        self._start = self._count = self._stride = 0
        self._decoded: list[AbortedTransaction] | None = None

    @property
    def aborted_transactions(self) -> list[AbortedTransaction] | None:
        """The aborted-transactions index (None when the answer sent none), made on first
        access."""
        if self._decoded is None and self._count >= 0:
            end = self._start + self._count * self._stride
            entries = (_ENTRY if self._stride == _ENTRY.size else _ENTRY_TAGGED).iter_unpack(
                self._buf[self._start:end])
            self._decoded = [AbortedTransaction(e[0], e[1]) for e in entries]
            self._buf = b""  # the answer's bytes are not kept alive any longer
        return self._decoded

    def __repr__(self) -> str:
        size = -1 if self.records is None else len(self.records)
        return (f"<FetchedPartition {self.partition_index} error {self.error_code} hw "
                f"{self.high_watermark} lso {self.last_stable_offset} records {size} B>")


class FetchedTopic(NamedTuple):
    """One topic's part of a Fetch answer."""

    topic: str
    partitions: list[FetchedPartition] | None  # None: a null array (Kafka never sends one)


class FetchResponse(NamedTuple):
    """A Fetch answer (kafka-python's field names)."""

    version: int
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[FetchedTopic] | None  # None: a null array (Kafka never sends one)


def read(frame: bytes, version: int) -> FetchResponse | None:
    """Read a Fetch answer's frame (from its correlation id on); None for a version this module
    does not read (past :data:`MAX_VERSION`).

    Raises:
        ValueError: the bytes do not hold a Fetch answer of that version.
    """
    if not MIN_VERSION <= version <= MAX_VERSION:
        return None
    try:
        return _Reader(frame, version).response()
    except (struct.error, IndexError) as exc:  # a read past the end
        raise ValueError(f"Fetch v{version} answer ends early: {exc}") from exc


class _Reader:
    """One pass over one answer's bytes."""

    __slots__ = ("buf", "flexible", "pos", "version")

    def __init__(self, frame: bytes, version: int) -> None:
        self.buf = frame
        self.version = version
        self.flexible = version >= _FLEXIBLE
        self.pos = 4  # the correlation id, checked by the caller

    def response(self) -> FetchResponse:
        if self.flexible:
            self.skip_tags()  # the response header's (header v1)
        buf, version = self.buf, self.version
        if version >= 7:
            throttle, error, session = _TOP_V7.unpack_from(buf, self.pos)
            self.pos += _TOP_V7.size
        else:
            (throttle,), error, session = _TOP_V1.unpack_from(buf, self.pos), 0, 0
            self.pos += _TOP_V1.size
        count = self.length()  # null (-1) read as kafka-python does: None, for the handler
        topics = None if count < 0 else [self.topic() for _ in range(count)]
        if self.flexible:
            self.skip_tags()
        if self.pos > len(buf):
            raise ValueError(f"Fetch answer ends {self.pos - len(buf)} bytes early")
        return FetchResponse(version, throttle, error, session, topics)

    def topic(self) -> FetchedTopic:
        name = self.string()
        count = self.length()
        partitions = None if count < 0 else [self.partition() for _ in range(count)]
        if self.flexible:
            self.skip_tags()
        return FetchedTopic(name, partitions)

    def partition(self) -> FetchedPartition:
        buf = self.buf
        if self.version >= 5:
            index, error, hw, lso, log_start = _PART_V5.unpack_from(buf, self.pos)
            self.pos += _PART_V5.size
        else:
            index, error, hw, lso = _PART_V4.unpack_from(buf, self.pos)
            log_start = -1
            self.pos += _PART_V4.size
        count = self.length()
        if count < -1:
            raise ValueError(f"an aborted-transactions array of length {count}")
        start, stride = self.pos, _ENTRY.size
        decoded: list[AbortedTransaction] | None = None
        if count > 0:
            if self.flexible:
                stride = _ENTRY_TAGGED.size
                # Every entry's tagged-field count is 0 in practice: one slice check steps over
                # them all; otherwise each entry is read (and its tags stepped over).
                counts = buf[start + _ENTRY.size:start + count * stride:stride]
                if len(counts) != count or counts.count(0) != count:
                    decoded = self.tagged_entries(count)
                    start = self.pos
            if decoded is None:
                self.pos = start + count * stride
        elif count == 0:
            decoded = []
        replica = -1
        if self.version >= 11:
            (replica,) = _I32.unpack_from(buf, self.pos)
            self.pos += _I32.size
        records = self.bytes()
        leader = self.partition_tags() if self.flexible else None
        if self.pos > len(buf):
            raise ValueError("a Fetch answer's partition runs past its end")
        part = FetchedPartition(index, error, hw, lso, log_start, replica, records)
        part.current_leader = leader
        if decoded is not None:
            part._decoded = decoded
        else:
            part._buf, part._start, part._count, part._stride = buf, start, count, stride
            if records:  # read now: held until poll() takes it in, it would keep the answer
                part.aborted_transactions  # noqa: B018 - decoded (and the bytes let go) on access
        if count < 0:
            part._count = -1
        return part

    def partition_tags(self) -> LeaderIdAndEpoch | None:
        """Step over a partition's tagged fields; its ``current_leader`` (tag 1), if sent."""
        leader = None
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            if tag == _CURRENT_LEADER:
                leader = LeaderIdAndEpoch(*_LEADER.unpack_from(self.buf, self.pos))
            self.pos += size
        return leader

    def tagged_entries(self, count: int) -> list[AbortedTransaction]:
        out = []
        for _ in range(count):
            producer_id, first_offset = _ENTRY.unpack_from(self.buf, self.pos)
            self.pos += _ENTRY.size
            self.skip_tags()
            out.append(AbortedTransaction(producer_id, first_offset))
        return out

    # -- primitives -------------------------------------------------------------------------

    def uvarint(self) -> int:
        buf, pos = self.buf, self.pos
        byte = buf[pos]
        pos += 1
        value, shift = byte & 0x7F, 7
        while byte & 0x80:
            if shift > 28:
                raise ValueError("a varint longer than five bytes")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
        self.pos = pos
        return value

    def length(self) -> int:
        """An array's length (-1: null)."""
        if self.flexible:
            return self.uvarint() - 1
        n: int = _I32.unpack_from(self.buf, self.pos)[0]
        self.pos += _I32.size
        return n

    def string(self) -> str:
        if self.flexible:
            size = self.uvarint() - 1
        else:
            (size,) = _I16.unpack_from(self.buf, self.pos)
            self.pos += _I16.size
        if size < 0:
            raise ValueError("a Fetch answer names a topic with a null string")
        end = self.pos + size
        if end > len(self.buf):
            raise ValueError("a topic name runs past the answer's end")
        name = self.buf[self.pos:end].decode()
        self.pos = end
        return name

    def bytes(self) -> bytes | None:
        if self.flexible:
            size = self.uvarint() - 1
        else:
            (size,) = _I32.unpack_from(self.buf, self.pos)
            self.pos += _I32.size
        if size < 0:
            return None
        end = self.pos + size
        if end > len(self.buf):
            raise ValueError("a partition's records run past the answer's end")
        data = self.buf[self.pos:end]
        self.pos = end
        return data

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # the tag
            size = self.uvarint()
            self.pos += size  # its bytes
