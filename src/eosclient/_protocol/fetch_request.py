"""Fetch requests (v4-v12) written straight to bytes, one ``struct`` call per partition.

The counterpart of :mod:`eosclient._protocol.fetch_response`, and an exception to "requests are
kafka-python's generated classes" for the same reason: a consumer sends a Fetch for every
partition it holds, over and over, and kafka-python makes an object per partition and encodes
it field by field: about 7 ms per request at 1,000 partitions, on the thread that also reads
the answers (against ~0.4 ms here). A fetch session (KIP-227) would list only what changed, but
neither noida-db nor Tansu serves one (asked to open a session, both answer session 0), and a
consumer must be fast on every broker.

:class:`FetchRequest` has what the connection asks of a request (``API_KEY``,
``API_VERSION``, ``with_header``, ``encode(header=True, framed=True)``,
``expect_response``) and reads like kafka-python's (``request.topics[i].partitions[j]
.fetch_offset`` and the rest); the tests check its bytes against kafka-python's encoder at every
version.

Layout (FetchRequest.json): ``replica_id``, ``max_wait_ms``, ``min_bytes``, ``max_bytes``
(v3+), ``isolation_level`` (v4+), ``session_id`` and ``session_epoch`` (v7+), then topics,
each a name and partitions: ``partition``, ``current_leader_epoch`` (v9+), ``fetch_offset``,
``last_fetched_epoch`` (v12+), ``log_start_offset`` (v5+), ``partition_max_bytes``; then
``forgotten_topics_data`` (v7+) and ``rack_id`` (v11+). From v12 (flexible, KIP-482) arrays and
strings carry an unsigned varint length plus one, every structure ends with an empty set of
tagged fields, and the request header (v2) too.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

__all__ = ["MAX_VERSION", "MIN_VERSION", "FetchPartition", "FetchRequest", "FetchTopic"]

API_KEY: Final = 1
MIN_VERSION: Final = 4
MAX_VERSION: Final = 12
_FLEXIBLE: Final = 12

_HEADER: Final = struct.Struct(">hhi")  # api key, version, correlation id
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_TOP: Final = struct.Struct(">iiiib")  # replica, max wait, min bytes, max bytes, isolation
_SESSION: Final = struct.Struct(">ii")  # session id, session epoch
# partition, [current leader epoch,] fetch offset, [last fetched epoch,] [log start,] max bytes
_PART_V4: Final = struct.Struct(">iqi")
_PART_V5: Final = struct.Struct(">iqqi")
_PART_V9: Final = struct.Struct(">iiqqi")
_PART_V12: Final = struct.Struct(">iiqiqiB")  # ... and an empty tagged-fields count


class FetchPartition(NamedTuple):
    """One partition asked for, with kafka-python's field names."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    partition_max_bytes: int
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


class FetchTopic(NamedTuple):
    """A topic and its partitions, in the order asked."""

    topic: str
    partitions: list[FetchPartition]


class FetchRequest:
    """A Fetch without a fetch session (session 0, epoch -1), for the version the connection
    sets in ``API_VERSION`` before it encodes."""

    API_KEY: Final = API_KEY

    def __init__(self, partitions: Iterable[tuple[tuple[str, int], int, int]], *,
                 isolation: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                 epochs: Mapping[Any, int] | None = None) -> None:
        """Ask for each ``((topic, partition), fetch offset, partition max bytes)`` in the
        order given, each at its leader epoch in ``epochs`` (keyed by ``(topic, partition)``;
        -1, unchecked, if absent)."""
        self.API_VERSION = MAX_VERSION
        self.replica_id = -1
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.isolation_level = isolation
        self.session_id = 0
        self.session_epoch = -1
        self.rack_id = ""
        self._correlation_id = 0
        self._client_id: str | None = None
        epoch_of = (epochs or {}).get
        topics: dict[str, list[FetchPartition]] = {}
        for tp, offset, limit in partitions:
            topic, partition = tp
            topics.setdefault(topic, []).append(
                FetchPartition(partition, epoch_of(tp, -1), offset, limit))
        self.topics = [FetchTopic(name, parts) for name, parts in topics.items()]

    def __repr__(self) -> str:
        count = sum(len(t.partitions) for t in self.topics)
        return (f"FetchRequest(v{self.API_VERSION}, {count} partitions of "
                f"{[t.topic for t in self.topics]}, isolation={self.isolation_level})")

    def expect_response(self) -> bool:
        return True

    def with_header(self, correlation_id: int = 0, client_id: str | None = None) -> None:
        self._correlation_id = correlation_id
        self._client_id = client_id

    def encode(self, *, header: bool = False, framed: bool = False, version: int | None = None,
               ) -> bytes:
        """The request's bytes at ``version`` (default ``API_VERSION``), with the request
        header and the length prefix if asked."""
        v = self.API_VERSION if version is None else version
        if not MIN_VERSION <= v <= MAX_VERSION:
            raise ValueError(f"Fetch v{v} is not written here ({MIN_VERSION}-{MAX_VERSION})")
        flexible = v >= _FLEXIBLE
        out = bytearray()
        if header:
            out += _HEADER.pack(API_KEY, v, self._correlation_id)
            out += _nullable_string(self._client_id)  # a plain string, flexible or not
            if flexible:
                out.append(0)  # the header's tagged fields
        out += _TOP.pack(self.replica_id, self.max_wait_ms, self.min_bytes, self.max_bytes,
                         self.isolation_level)
        if v >= 7:
            out += _SESSION.pack(self.session_id, self.session_epoch)
        _array_length(out, len(self.topics), flexible)
        for topic in self.topics:
            _string(out, topic.topic, flexible)
            _array_length(out, len(topic.partitions), flexible)
            _partitions(out, topic.partitions, v)
            if flexible:
                out.append(0)
        if v >= 7:
            _array_length(out, 0, flexible)  # forgotten_topics_data
        if v >= 11:
            _string(out, self.rack_id, flexible)
        if flexible:
            out.append(0)
        if framed:
            return _I32.pack(len(out)) + bytes(out)
        return bytes(out)


def _partitions(out: bytearray, partitions: list[FetchPartition], v: int) -> None:
    if v >= 12:
        pack = _PART_V12.pack
        for p in partitions:
            out += pack(p.partition, p.current_leader_epoch, p.fetch_offset,
                        p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes, 0)
    elif v >= 9:
        pack = _PART_V9.pack
        for p in partitions:
            out += pack(p.partition, p.current_leader_epoch, p.fetch_offset,
                        p.log_start_offset, p.partition_max_bytes)
    elif v >= 5:
        pack = _PART_V5.pack
        for p in partitions:
            out += pack(p.partition, p.fetch_offset, p.log_start_offset, p.partition_max_bytes)
    else:
        pack = _PART_V4.pack
        for p in partitions:
            out += pack(p.partition, p.fetch_offset, p.partition_max_bytes)


def _uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _array_length(out: bytearray, count: int, flexible: bool) -> None:
    if flexible:
        _uvarint(out, count + 1)
    else:
        out += _I32.pack(count)


def _string(out: bytearray, text: str, flexible: bool) -> None:
    data = text.encode()
    if flexible:
        _uvarint(out, len(data) + 1)
    else:
        out += _I16.pack(len(data))
    out += data


def _nullable_string(text: str | None) -> bytes:
    if text is None:
        return _I16.pack(-1)
    data = text.encode()
    return _I16.pack(len(data)) + data
