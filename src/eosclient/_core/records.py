"""What the accumulator accepts and gives back: checked records, codecs, delivery handles.

Everything here runs at append time, in the application's thread, before a record is queued:
a record that cannot be sent (wrong type, larger than ``max.request.size``) is rejected here with
a :class:`~eosclient.errors.UsageError` and nothing changes. A record that is queued gets a
:class:`DeliveryHandle`, a sans-IO stand-in for a future that the producer facade turns into a
``concurrent.futures.Future`` (it has no locks and never blocks).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import kafka.codec
from kafka.record.default_records import DefaultRecordBatchBuilder

from eosclient._core.types import TopicPartition
from eosclient.errors import (
    ConfigError,
    IllegalStateError,
    RecordTooLargeError,
    RecordTypeError,
)

__all__ = [
    "BYTES_TYPES",
    "Compression",
    "Delivered",
    "DeliveryHandle",
    "Header",
    "Record",
    "RecordChecker",
    "Serializer",
    "available_compressions",
    "check_headers",
    "compression_for",
    "record_size_bound",
    "to_bytes",
]

Header = tuple[str, bytes | None]
"""A record header: a str key and a bytes (or None) value."""

Serializer = Callable[[Any], bytes | None]
"""Turns an application object into the bytes sent (or None, e.g. for a tombstone)."""

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
    """``headers`` as the list of ``(str, bytes | None)`` the codec writes.

    Raises:
        RecordTypeError: a header is not a ``(str, bytes-like or None)`` pair.
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
        checked.append((key, to_bytes(value, f"header {key!r} value", None)))
    return checked


def check_timestamp(timestamp_ms: object) -> int:
    """``timestamp_ms`` as the int the codec needs (milliseconds since the epoch).

    Raises:
        RecordTypeError: it is not an int (bool is refused too).
    """
    if type(timestamp_ms) is int:
        return timestamp_ms
    if isinstance(timestamp_ms, int) and not isinstance(timestamp_ms, bool):
        return int(timestamp_ms)
    raise RecordTypeError(f"timestamp_ms must be an int, got {type(timestamp_ms).__name__}")


def record_size_bound(key: bytes | None, value: bytes | None, headers: list[Header]) -> int:
    """An upper bound of the bytes one record needs alone in a batch, header included.

    The same bound Java checks against ``max.request.size`` (``estimateSizeInBytesUpperBound``).
    """
    size: int = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers)
    return size


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
    ) -> list[tuple[bytes | None, bytes | None]]:
        """Header-less records as ``(key, value)`` pairs, all checked before any is returned.

        Raises:
            RecordTypeError: a key or value has a wrong type.
            RecordTooLargeError: a record exceeds ``max.request.size``.
            ValueError: ``keys`` and ``values`` differ in length.
        """
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        vals = [to_bytes(v, "value", self._value_serializer) for v in values]
        ks: list[bytes | None] = (
            [to_bytes(k, "key", self._key_serializer) for k in keys]
            if keys is not None else [None] * len(vals)
        )
        limit = self._max_request_size - _SLACK
        for k, v in zip(ks, vals, strict=True):
            if (len(k) if k else 0) + (len(v) if v else 0) > limit:
                self._check_size(k, v, [])
        return list(zip(ks, vals, strict=True))

    def _check_size(self, key: bytes | None, value: bytes | None, headers: list[Header]) -> None:
        if not headers and (len(key) if key else 0) + (len(value) if value else 0) <= (
            self._max_request_size - _SLACK
        ):
            return  # the common case, without the exact count
        size = record_size_bound(key, value, headers)
        if size > self._max_request_size:
            raise RecordTooLargeError(
                f"a record of {size} bytes exceeds max.request.size"
                f" ({self._max_request_size}); nothing was queued"
            )


class Delivered(NamedTuple):
    """Where records of one handle were written.

    Attributes:
        tp: The partition.
        offset: The first record's offset, or -1 if unknown (DUPLICATE_SEQUENCE_NUMBER:
            the broker already had the batch and does not say where).
        record_count: How many consecutive records of the handle start at ``offset``.
        timestamp_ms: The broker's LogAppendTime if the topic uses it, else the records'
            CreateTime.
    """

    tp: TopicPartition
    offset: int
    record_count: int
    timestamp_ms: int


_PENDING, _SUCCEEDED, _FAILED = 0, 1, 2


class DeliveryHandle:
    """The outcome of one record (``send``) or of many (``send_batch``), sans-IO.

    It settles once: succeeded when every batch holding its records is written, failed as soon
    as one is lost. Callbacks run synchronously, in the thread that settles it; they must not
    raise.

    Attributes:
        record_count: How many records the handle covers.
        timestamp_ms: The CreateTime its records were appended with.
    """

    __slots__ = ("_callbacks", "_error", "_parts", "_results", "_state", "record_count",
                 "timestamp_ms")

    def __init__(self, timestamp_ms: int) -> None:
        self.record_count = 0
        self.timestamp_ms = timestamp_ms
        self._state = _PENDING
        self._parts = 0
        # Made on first use: a send() handle is built per record, on the hot path.
        self._results: list[Delivered] | None = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[DeliveryHandle], None]] | None = None

    def done(self) -> bool:
        """Whether the handle has settled (succeeded or failed)."""
        return self._state != _PENDING

    def exception(self) -> BaseException | None:
        """The error it failed with; None if it succeeded.

        Raises:
            IllegalStateError: it has not settled yet.
        """
        self._check_done()
        return self._error

    def result(self) -> tuple[Delivered, ...]:
        """Where its records were written, one entry per batch, in append order.

        Raises:
            IllegalStateError: it has not settled yet.
            EosError: the error it failed with.
        """
        self._check_done()
        if self._error is not None:
            raise self._error
        return tuple(self._results or ())

    def add_done_callback(self, callback: Callable[[DeliveryHandle], None]) -> None:
        """Call ``callback(handle)`` once settled; at once if it already is."""
        if self.done():
            callback(self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    # -- driven by the accumulator ---------------------------------------------------------

    def _add_part(self, count: int) -> None:
        self._parts += 1
        self.record_count += count

    def _succeed_part(self, delivered: Delivered) -> None:
        if self._state != _PENDING:
            return
        if self._results is None:
            self._results = [delivered]
        else:
            self._results.append(delivered)
        self._parts -= 1
        if self._parts == 0:
            self._settle(_SUCCEEDED)

    def _succeed_if_empty(self) -> None:
        if self._parts == 0 and self._state == _PENDING:
            self._settle(_SUCCEEDED)

    def _fail(self, error: BaseException) -> None:
        if self._state == _PENDING:
            self._error = error
            self._settle(_FAILED)

    def _settle(self, state: int) -> None:
        self._state = state
        callbacks, self._callbacks = self._callbacks or (), None
        for callback in callbacks:
            callback(self)

    def _check_done(self) -> None:
        if self._state == _PENDING:
            raise IllegalStateError("the records are not delivered yet")

    def __repr__(self) -> str:
        state = ("pending", "succeeded", "failed")[self._state]
        return f"<DeliveryHandle {state} records={self.record_count}>"
