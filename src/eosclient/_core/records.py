"""What the accumulator accepts: checked records, and the codecs batches are compressed with.

Everything here runs at append time, in the application's thread, before a record is queued:
a record that cannot be sent (wrong type, larger than ``max.request.size``) is rejected here with
a :class:`~eosclient.errors.UsageError` and nothing changes. What a queued record gets back is in
:mod:`eosclient._core.delivery`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import kafka.codec

from eosclient._core.encoder import HEADER_SIZE, Header
from eosclient._core.limits import INT64_MAX
from eosclient.errors import (
    ConfigError,
    RecordTooLargeError,
    RecordTypeError,
)

__all__ = [
    "BYTES_TYPES",
    "Compression",
    "Deserializer",
    "Header",
    "KeyT",
    "Record",
    "RecordChecker",
    "Serializer",
    "ValueT",
    "available_compressions",
    "check_headers",
    "compression_for",
    "record_size_bound",
    "to_bytes",
]

Serializer = Callable[[Any], bytes | None]
"""Turns an application object into the bytes sent (or None, e.g. for a tombstone)."""

Deserializer = Callable[[bytes], Any]
"""Turns the bytes of a fetched key or value into an application object (never called with
None: a null key or a tombstone value is delivered as None)."""

if TYPE_CHECKING:
    from typing_extensions import TypeVar
else:
    from typing import TypeVar as _TypeVar

    def TypeVar(name: str, *, default: object = None) -> object:
        """A type variable; its ``default`` (PEP 696) is for type checkers only, and Python
        before 3.13 takes none: so the package needs no typing_extensions at run time."""
        return _TypeVar(name)


KeyT = TypeVar("KeyT", default=bytes)
"""What a consumer's records carry as keys: what its ``key_deserializer`` returns (bytes
without one). A record's ``key`` is ``KeyT | None``: a null key is never deserialized."""

ValueT = TypeVar("ValueT", default=bytes)
"""The same for values (a record's ``value`` is ``ValueT | None``: None is a tombstone)."""

BYTES_TYPES = (bytes, bytearray, memoryview)
"""The types a key or value may have when no serializer is configured."""


class Compression(enum.IntEnum):
    """The ``compression.type`` values, numbered as in the record batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# name -> (codec, the pip package its library comes from). Availability is asked of
# kafka.codec at call time (``has_<name>``), the module kafka-python's builder compresses with.
_CODECS: dict[str, tuple[Compression, str]] = {
    "none": (Compression.NONE, ""),
    "gzip": (Compression.GZIP, ""),
    "snappy": (Compression.SNAPPY, "python-snappy"),
    "lz4": (Compression.LZ4, "lz4"),
    "zstd": (Compression.ZSTD, "zstandard"),
}


def _importable(name: str) -> bool:
    if name == "none":
        return True
    available: bool = getattr(kafka.codec, f"has_{name}")()
    return available


def compression_for(name: str) -> Compression:
    """The codec for a ``compression.type`` value, checked to be importable now.

    Args:
        name: ``none``, ``gzip``, ``snappy``, ``lz4`` or ``zstd`` (any case).

    Returns:
        The codec.

    Raises:
        ConfigError: ``name`` is unknown, or the library its codec needs is not installed
            (the message names the pip package).
    """
    row = _CODECS.get(name.lower()) if isinstance(name, str) else None
    if row is None:
        raise ConfigError(
            f"unknown compression {name!r}; one of {', '.join(_CODECS)}", key="compression.type"
        )
    codec, package = row
    if not _importable(name.lower()):
        raise ConfigError(
            f"{name!r} needs the {package!r} package: pip install {package}",
            key="compression.type",
        )
    return codec


def available_compressions() -> tuple[str, ...]:
    """The ``compression.type`` values whose libraries are importable here."""
    return tuple(name for name in _CODECS if _importable(name))


def to_bytes(obj: object, what: str, serializer: Serializer | None) -> bytes | None:
    """``obj`` as the bytes to send, through ``serializer`` when one is configured.

    Args:
        obj: The application's key or value.
        what: ``"key"`` or ``"value"``, for the message.
        serializer: The configured serializer, or None for raw bytes.

    Returns:
        bytes, or None (a null key, or a tombstone value).

    Raises:
        RecordTypeError: ``obj`` (or what the serializer made of it) is not bytes-like.
    """
    data = serializer(obj) if serializer is not None else obj
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, BYTES_TYPES):
        return bytes(data)
    got = f"the serializer returned {type(data).__name__}" if serializer is not None else (
        f"got {type(data).__name__}"
    )
    advice = f" (configure a {what} serializer to send other types)" if what in (
        "key", "value") and serializer is None else ""
    raise RecordTypeError(
        f"a record's {what} must be bytes, bytearray, memoryview or None; {got}{advice}"
    )


def check_headers(headers: Sequence[tuple[str, Any]] | None) -> list[Header]:
    """``headers`` as the list of ``(str, bytes | None)`` the codec writes; a str value is
    encoded as UTF-8.

    Raises:
        RecordTypeError: a header is not a ``(str, bytes-like, str or None)`` pair, or a str
            cannot be encoded as UTF-8 (a lone surrogate).
    """
    if not headers:
        return []
    checked: list[Header] = []
    for header in headers:
        if not (isinstance(header, tuple | list) and len(header) == 2):
            raise RecordTypeError(f"a header is a (str, bytes) pair, got {header!r}")
        key, value = header
        if not isinstance(key, str):
            raise RecordTypeError(f"a header key must be str, got {type(key).__name__}")
        if not key.isascii():  # encoded when appended, under the producer's lock: check first
            try:
                key.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise RecordTypeError(f"header key {key!r} cannot be encoded as UTF-8 "
                                      f"({exc.reason})") from None
        if isinstance(value, str):  # as confluent-kafka, kafka-python and Java's clients do
            try:
                value = value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise RecordTypeError(f"header {key!r} value {value[:40]!r} cannot be encoded "
                                      f"as UTF-8 ({exc.reason})") from None
        checked.append((key, to_bytes(value, f"header {key!r} value", None)))
    return checked


def check_timestamp(timestamp_ms: object) -> int:
    """``timestamp_ms`` as the int the codec needs (milliseconds since the epoch).

    The range is Java's (``ProducerRecord`` refuses a negative timestamp; -1 means "none" on the
    wire) up to int64, the batch's ``baseTimestamp``. Within it, any two records' difference
    fits the int64 ``timestampDelta`` of a batch too, so no mix of timestamps in one batch can
    fail to encode later, on the I/O thread (``2**63`` used to, killing the transaction).

    Raises:
        RecordTypeError: it is not an int (bool is refused too), or not in ``0..2**63 - 1``.
    """
    if type(timestamp_ms) is not int:
        if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
            raise RecordTypeError(
                f"timestamp_ms must be an int, got {type(timestamp_ms).__name__}")
        timestamp_ms = int(timestamp_ms)
    if not 0 <= timestamp_ms <= INT64_MAX:
        raise RecordTypeError(f"timestamp_ms must be in 0..2**63-1 (ms since the epoch), got "
                              f"{timestamp_ms}; nothing was queued")
    return timestamp_ms


def record_size_bound(key: bytes | None, value: bytes | None, headers: list[Header]) -> int:
    """An upper bound of the bytes one record needs alone in a batch, header included.

    The same bound Java checks against ``max.request.size`` (``estimateSizeInBytesUpperBound``):
    the batch header, the most a record's fixed fields take (length 5, attributes 1, timestamp
    delta 10, offset delta 5), and its key, value and headers with their length varints.
    """
    size = HEADER_SIZE + _MAX_RECORD_OVERHEAD + _field_size(key) + _field_size(value)
    size += _varint_size(len(headers))
    for header_key, header_value in headers:
        size += _field_size(header_key.encode("utf-8")) + _field_size(header_value)
    return size


_MAX_RECORD_OVERHEAD = 21


def _varint_size(n: int) -> int:
    return max(1, (((n << 1) ^ (n >> 63)).bit_length() + 6) // 7)


def _field_size(data: bytes | None) -> int:
    return 1 if data is None else _varint_size(len(data)) + len(data)


# Batch header 61 + record overhead 21 + key and value length varints (5 each) + header count
# varint (5), rounded up: a record whose key and value are this much below the limit fits.
_SLACK = 100


class Record(NamedTuple):
    """A record checked and serialized, ready to append."""

    key: bytes | None
    value: bytes | None
    headers: list[Header]
    timestamp_ms: int


class RecordChecker:
    """Checks and serializes records against the producer's settings; changes nothing.

    Args:
        key_serializer: Turns keys into bytes; None accepts bytes-like keys only.
        value_serializer: Turns values into bytes; None accepts bytes-like values only.
        max_request_size: ``max.request.size``: no record may need more.
    """

    def __init__(
        self,
        *,
        key_serializer: Serializer | None,
        value_serializer: Serializer | None,
        max_request_size: int,
    ) -> None:
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._max_request_size = max_request_size
        # For a caller's inlined fast path: with no serializer, a bytes key and value that
        # together stay within `fast_limit` bytes, and no headers, need no further check.
        self.raw = key_serializer is None and value_serializer is None
        self.fast_limit = max_request_size - _SLACK

    def one(
        self,
        key: object,
        value: object,
        headers: Sequence[tuple[str, Any]] | None,
        timestamp_ms: int,
    ) -> Record:
        """One record, checked and serialized.

        Raises:
            RecordTypeError: a key, value, header or timestamp has a wrong type.
            RecordTooLargeError: the record exceeds ``max.request.size``.
        """
        record = Record(
            to_bytes(key, "key", self._key_serializer),
            to_bytes(value, "value", self._value_serializer),
            check_headers(headers),
            check_timestamp(timestamp_ms),
        )
        self._check_size(record.key, record.value, record.headers)
        return record

    def many(
        self, values: Sequence[object], keys: Sequence[object] | None
    ) -> tuple[list[bytes | None] | None, list[bytes | None]]:
        """Header-less records as ``(keys or None, values)``, all checked before any is returned.

        Raises:
            RecordTypeError: a key or value has a wrong type.
            RecordTooLargeError: a record exceeds ``max.request.size``.
            ValueError: ``keys`` and ``values`` differ in length.
        """
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        vals = _all_bytes(values, "value", self._value_serializer)
        ks = None if keys is None else _all_bytes(keys, "key", self._key_serializer)
        if _longest(vals) + (_longest(ks) if ks is not None else 0) > (
                self._max_request_size - _SLACK):  # some record may be too large: count exactly
            for k, v in zip(ks or [None] * len(vals), vals, strict=True):
                self._check_size(k, v, [])
        return ks, vals

    def many_headers(self, headers: Sequence[Sequence[tuple[str, Any]] | None],
                     keys: list[bytes | None] | None, values: list[bytes | None],
                     ) -> list[list[Header]]:
        """Each record's headers (``headers[i]`` of record ``i``, as :meth:`many` returned its
        key and value) checked as :func:`check_headers` does, and each record's size with them.

        Raises:
            RecordTypeError: a header has a wrong type.
            RecordTooLargeError: a record exceeds ``max.request.size``.
            ValueError: not one entry per record.
        """
        if len(headers) != len(values):
            raise ValueError(f"{len(headers)} header lists for {len(values)} values")
        checked = [check_headers(h) for h in headers]
        for k, v, h in zip(keys or [None] * len(values), values, checked, strict=True):
            self._check_size(k, v, h)
        return checked

    def _check_size(self, key: bytes | None, value: bytes | None, headers: list[Header]) -> None:
        size = (len(key) if key else 0) + (len(value) if value else 0)
        for header_key, header_value in headers:  # at most 4 UTF-8 bytes a character, and
            size += 4 * len(header_key) + (len(header_value) if header_value else 0) + 10
        if size <= self._max_request_size - _SLACK:  # two 5-byte length varints per header
            return  # the common case, without the exact count
        size = record_size_bound(key, value, headers)
        if size > self._max_request_size:
            raise RecordTooLargeError(
                f"a record of {size} bytes exceeds max.request.size"
                f" ({self._max_request_size}); nothing was queued"
            )


_BYTES_OR_NONE = frozenset({bytes, type(None)})


def _all_bytes(items: Sequence[object], what: str, serializer: Serializer | None,
               ) -> list[bytes | None]:
    """``items`` as bytes (or None); type-checked in C when they already are (the bulk path)."""
    if serializer is None and set(map(type, items)) <= _BYTES_OR_NONE:
        return list(items)  # type: ignore[arg-type]
    return [to_bytes(item, what, serializer) for item in items]


def _longest(items: list[bytes | None]) -> int:
    return max(map(len, filter(None, items)), default=0)
