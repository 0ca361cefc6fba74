"""Every error eosclient raises, named by what the caller does next.

Theory of operation
-------------------
A Kafka error code means different things on different APIs: INVALID_PRODUCER_EPOCH (47) on
Produce says a transaction timed out and can be aborted (KIP-588), on EndTxn it says another
instance took over the transactional.id (KIP-98). So errors are classified per (API, code), in one
table (``eosclient._error_table``, one row per pair, with a note where the kind is not obvious),
and nowhere else. Each row gives one of four kinds, and the kind is the whole contract:

========================  ==============================================  ======================
kind                      meaning                                         the caller
========================  ==============================================  ======================
:class:`RetriableError`   transient; the client already retried within    calls again
                          its timeout
:class:`AbortableError`   this transaction is lost, the producer is fine  aborts, redoes it
:class:`FencedError`      another instance owns this transactional.id     closes; never retries
:class:`FatalError`       misconfiguration or protocol violation          closes, fixes config
========================  ==============================================  ======================

The rows follow the Java client's handlers (``TransactionManager``, ``Sender``,
``AbstractCoordinator``, ``ConsumerCoordinator``, ``FetchCollector``) and these KIPs:

* KIP-98 (transactions): coordinator errors are retriable, PRODUCER_FENCED is final.
* KIP-360: a broken sequence (OUT_OF_ORDER_SEQUENCE_NUMBER 45, UNKNOWN_PRODUCER_ID 59, a batch
  expired with unknown outcome) is an :class:`EpochBumpRequiredError`: abort, and the abort bumps
  the epoch with InitProducerId(producer id, epoch). Java bumps after *every* failed transactional
  batch, since a rejected batch leaves a gap in its partition's sequence; the Produce rows do too.
* KIP-447: TxnOffsetCommit carries the consumer's generation; a stale one (ILLEGAL_GENERATION,
  UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) loses the transaction, not the producer.
* KIP-588: INVALID_PRODUCER_EPOCH on Produce may mean the coordinator aborted on timeout and
  bumped the epoch, so it is abortable; on the coordinator APIs it is fenced, like 90 (noida-db
  answers 47 where Kafka answers 90).
* KIP-890: TRANSACTION_ABORTABLE (120) is abortable wherever it appears.
* KIP-1050 / KAFKA-18019: INVALID_PRODUCER_ID_MAPPING (49) is not recoverable in place: a zombie
  whose transactional.id expired could otherwise redo work its successor already committed. It is
  a :class:`FencedError` here (Java: fatal), because the remedy is to close this instance and start
  a new one from the committed offsets; there is no configuration to fix.

Not in the table:

* Code 0 (NONE), and the non-zero codes that report success for their API (DUPLICATE_SEQUENCE_NUMBER
  on Produce: the batch was already written; UNKNOWN_MEMBER_ID on LeaveGroup; REPLICA_NOT_AVAILABLE
  on Metadata) are not errors: :func:`is_success` says so, and :func:`error_for` and
  :func:`classify` raise :class:`ValueError` for them, because building an exception for success
  is a bug in the caller.
* A pair without a row falls back to the code's generic kind: :class:`RetriableError` where
  kafka-python marks the code retriable, else :class:`FatalError` (:class:`UnsupportedVersionError`
  for 35). A code an API is not documented to return is a surprise, and the Java handlers treat
  surprises as fatal; closing can never break exactly-once, guessing "abortable" could loop.
* A code kafka-python does not know becomes a :class:`FatalError` named ``UNKNOWN_CODE_<n>``.
* A response with a code per partition raises one error, :func:`error_for_codes`: the most severe,
  and never OPERATION_NOT_ATTEMPTED (55) when the partition that really failed is there.

Code names and descriptions come from kafka-python's ``kafka.errors`` (so code 6 is
NOT_LEADER_FOR_PARTITION, Kafka's older name for NOT_LEADER_OR_FOLLOWER); the classification is
ours.

The exception tree
------------------
::

    EosError(Exception)                 .code, .code_name, .api (None when raised locally)
    ├── RetriableError                  transient; already retried within the timeout -> call again
    │   ├── KafkaTimeoutError           a deadline passed (also a builtin TimeoutError)
    │   └── KafkaConnectionError        a connection was refused or cut; outcome unknown
    │       ├── AllBrokersDownError     no broker can be reached (a wrong address, a cluster
    │       │                           down); the client keeps trying -> call again, or fix
    │       └── RequestNotSentError     the connection failed before the request was written:
    │                                   its outcome is known (nothing happened)
    ├── AbortableError                  the transaction is lost, the producer is fine -> abort, redo
    │   ├── EpochBumpRequiredError      KIP-360: the sequence broke; the abort bumps the epoch
    │   └── CommitFailedError           a rebalance gave partitions away before their commit
    ├── FencedError                     another instance owns the transactional.id or
    │                                   group.instance.id -> close, never retry
    ├── FatalError                      misconfiguration / protocol violation -> close, fix config
    │   ├── ProtocolError               the peer broke the protocol (bad frame, correlation id)
    │   │   └── ResponseTooLargeError   an answer over receive.message.max.bytes, even to the
    │   │                               smallest Fetch -> raise the setting, or fix the broker
    │   ├── UnsupportedVersionError     no API version both sides speak
    │   ├── OffsetOutOfRangeError       the fetch position is gone and auto.offset.reset is none
    │   ├── CorruptRecordError          a fetched record batch failed its CRC-32C or its parse
    │   ├── DeserializationError        a key or value deserializer raised -> fix it, or seek
    │   │                               past the record
    │   └── AuthenticationError         the connection could not be authenticated -> fix the
    │       │                           credentials, certificates or security.protocol
    │       ├── SaslAuthenticationError the broker refused the SASL login (58, 33, 34)
    │       └── SslAuthenticationError  the broker's certificate failed verification (untrusted
    │                                   CA, host name mismatch, expired) or the TLS handshake
    │                                   failed in a way a retry cannot fix
    └── UsageError                      the application misused the API; nothing changed
        ├── ConfigError                 bad setting (.key names it; also ValueError)
        ├── UnknownPartitionError       send() to a partition not declared at begin (ValueError)
        ├── InvalidGroupIdError         send_offsets for another group (also ValueError)
        ├── RecordTooLargeError         a record over max.request.size (also ValueError)
        ├── RecordTypeError             a record field Kafka cannot carry (also TypeError)
        └── IllegalStateError           not allowed in this state (also RuntimeError)

:class:`UsageError` is not a fifth kind of failure: it reports a bug in the calling code, is raised
before anything is sent, and leaves every object as it was.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from eosclient._error_table import SUCCESS_LIKE, TABLE, ApiKey, Kind

__all__ = [
    "AbortableError",
    "AllBrokersDownError",
    "ApiKey",
    "AuthenticationError",
    "CommitFailedError",
    "ConfigError",
    "CorruptRecordError",
    "DeserializationError",
    "EosError",
    "EpochBumpRequiredError",
    "FatalError",
    "FencedError",
    "IllegalStateError",
    "InvalidGroupIdError",
    "KafkaConnectionError",
    "KafkaTimeoutError",
    "OffsetOutOfRangeError",
    "ProtocolError",
    "RecordTooLargeError",
    "RecordTypeError",
    "RequestNotSentError",
    "ResponseTooLargeError",
    "RetriableError",
    "SaslAuthenticationError",
    "SslAuthenticationError",
    "TableRow",
    "UnknownPartitionError",
    "UnsupportedVersionError",
    "UsageError",
    "classify",
    "error_for",
    "error_for_codes",
    "is_success",
    "iter_table",
]


class EosError(Exception):
    """Base of everything eosclient raises.

    Attributes:
        code: The Kafka error code, or None for an error raised locally.
        code_name: The code's name (e.g. ``"PRODUCER_FENCED"``), or None when local.
        api: The API whose response carried the code (or the local call it concerns), or None.
    """

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        code_name: str | None = None,
        api: ApiKey | int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.code_name = code_name
        self.api = api

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Keyword-only constructors defeat BaseException's pickling (it calls cls(*args)), and
        # errors cross process boundaries in Spark: rebuild from args and attributes instead.
        return (_restore, (type(self), self.args, dict(self.__dict__)))


def _restore(cls: type[EosError], args: tuple[Any, ...], state: dict[str, Any]) -> EosError:
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


class RetriableError(EosError):
    """Transient: the client already retried within its timeout; calling again may succeed."""


class KafkaTimeoutError(RetriableError, TimeoutError):
    """A deadline passed. The operation may still complete; calling again resumes it.

    Raised locally, chained ``from`` the last broker error when there was one. A broker's own
    REQUEST_TIMED_OUT (7) is a plain :class:`RetriableError` that the client retries first.
    """


class KafkaConnectionError(RetriableError):
    """A connection could not be made or was cut; a request in flight has an unknown outcome.

    Not a builtin ``ConnectionError``: code that wraps ``OSError`` from sockets must not catch
    its own wrapper again. Resending is safe where the protocol makes it so (Produce keeps its
    sequence numbers, EndTxn is resumed, not restarted).
    """


class AllBrokersDownError(KafkaConnectionError):
    """No broker could be reached: every connect failed for ``reconnect.backoff.max.ms`` (at
    least 1 s). The message names each address and why it failed (refused, not resolved, set-up
    timed out). librdkafka's ``_ALL_BROKERS_DOWN``.

    A client that never reached a broker raises it from its calls (a mistyped address must not
    look like "no data"), unless ``error_cb`` is set: then it goes to ``error_cb`` and calls
    wait out their timeouts. A client that has reached a broker before only reports it to
    ``error_cb`` (and logs a WARNING) while it waits out the outage. The client keeps trying
    to connect either way; calling again resumes waiting.
    """


class RequestNotSentError(KafkaConnectionError):
    """The connection failed before the request was written: the broker never saw it, so,
    unlike a cut with the request in flight, its outcome is known (nothing happened)."""


class AbortableError(EosError):
    """This transaction is lost but the producer is fine: abort it and redo the work."""


class EpochBumpRequiredError(AbortableError):
    """KIP-360: the partition's sequence broke; ``abort_transaction()`` also bumps the epoch."""


class CommitFailedError(AbortableError):
    """A consumer's ``commit()`` met a rebalance that gave some of its partitions to another
    member: their offsets were not committed (the coordinator refuses a commit from a member
    that no longer owns them). Offsets of the partitions this member kept were committed.

    What the application does: nothing but go on polling. The records it processed from the
    lost partitions will be read again by their new owner, from the last committed offset
    (at-least-once, as in every Kafka client; transactions via ``ExactlyOnceProcessor`` avoid
    that). Java's ``CommitFailedException``.

    Attributes:
        partitions: The partitions whose offsets were not committed, sorted.
    """

    def __init__(self, message: str, *, partitions: list[Any]) -> None:
        super().__init__(message, api=ApiKey.OFFSET_COMMIT)
        self.partitions = partitions


class FencedError(EosError):
    """Another instance owns this transactional.id (or group.instance.id): close, never retry."""


class FatalError(EosError):
    """Misconfiguration or a protocol violation: close the client and fix the configuration."""


class ProtocolError(FatalError):
    """The peer broke the Kafka protocol (bad frame, unexpected correlation id, bad schema)."""


class ResponseTooLargeError(ProtocolError):
    """A broker's answer is larger than ``receive.message.max.bytes``.

    Raised by the framing layer before the answer is read (the connection is then closed), and by
    ``poll()`` once the consumer has shrunk its fetches as far as they go (one partition, one
    batch) and the broker still answers with more: a broker that ignores Fetch byte limits
    (noida-db sends everything past the position), or one batch larger than the setting. Raise
    ``receive.message.max.bytes`` above :attr:`size` to read on.

    Attributes:
        size: The answer's size in bytes, as its frame announced it.
        limit: ``receive.message.max.bytes``.
        node: The broker's node id, where known (else None).
    """

    def __init__(self, message: str, *, size: int, limit: int, api: ApiKey | int | None = None,
                 node: int | None = None) -> None:
        super().__init__(message, api=api)
        self.size = size
        self.limit = limit
        self.node = node


class UnsupportedVersionError(FatalError):
    """The broker and eosclient share no version of an API that is needed."""


class OffsetOutOfRangeError(FatalError):
    """The fetch position is no longer in the log (deleted by retention, or truncated).

    The consumer handles it by resetting per ``auto.offset.reset`` and raises it only when that
    is ``none``: then the application chose to decide, and must seek before polling again.
    """


class CorruptRecordError(FatalError):
    """A fetched record batch failed its CRC-32C check or could not be parsed.

    Never skipped: a consumer that stepped over it could lose committed records or deliver a
    batch whose transaction markers it misread. Raised locally, with ``api`` set to Fetch.

    Attributes:
        topic: The partition's topic.
        partition: The partition's number.
        offset: The base offset of the batch (as read; it is not covered by the CRC).
    """

    def __init__(self, message: str, *, topic: str, partition: int, offset: int) -> None:
        super().__init__(f"{topic}-{partition} at offset {offset}: {message}", api=ApiKey.FETCH)
        self.topic = topic
        self.partition = partition
        self.offset = offset


class DeserializationError(FatalError):
    """The consumer's ``key_deserializer`` or ``value_deserializer`` raised on a record.

    Raised by ``poll()`` when it has no other record to return (records of other partitions,
    and of this partition before it, are delivered first). The partition's position stays at
    the record, so every poll raises again until the application seeks past it
    (``seek(tp, offset + 1)``) or a fixed deserializer reads it; a commit never skips it. The
    deserializer's exception is chained as ``__cause__``. Raised locally, with ``api`` set to
    Fetch.

    Attributes:
        topic: The record's topic.
        partition: The record's partition.
        offset: The record's offset.
        field: ``"key"`` or ``"value"``.
    """

    def __init__(self, message: str, *, topic: str, partition: int, offset: int,
                 field: str) -> None:
        super().__init__(f"{topic}-{partition} at offset {offset}: {message}", api=ApiKey.FETCH)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.field = field


class AuthenticationError(FatalError):
    """A connection could not be authenticated: not retried, because the same credentials or
    certificates would fail the same way (and repeated failed logins lock accounts on some
    clusters). Close the client and fix the settings.

    Raised at once by every blocking call of the client once any connection failed so; its
    message names the broker's address and never carries a password or a token.
    """


class SaslAuthenticationError(AuthenticationError):
    """The broker refused the SASL login: SASL_AUTHENTICATION_FAILED (58, a wrong password, an
    unknown user, an expired token), UNSUPPORTED_SASL_MECHANISM (33) or ILLEGAL_SASL_STATE (34)."""


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed: the broker's certificate is not trusted by ``ssl.ca.location``
    (or the system's CAs), does not name the host connected to (with
    ``ssl.endpoint.identification.algorithm=https``), has expired, or the broker refused ours."""


class UsageError(EosError):
    """The application misused the API. Raised before anything is sent; nothing changed."""


class ConfigError(UsageError, ValueError):
    """A setting is missing, unknown or out of range.

    Attributes:
        key: The setting's name as the caller spelled it (e.g. ``"transactional.id"``).
    """

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message if key in message else f"{key}: {message}")
        self.key = key


class UnknownPartitionError(UsageError, ValueError):
    """send() to a partition not declared at ``begin_transaction(partitions=...)``."""


class InvalidGroupIdError(UsageError, ValueError):
    """``send_offsets_to_transaction`` for a group other than the one declared at begin."""


class RecordTooLargeError(UsageError, ValueError):
    """A record is larger than ``max.request.size``: it could never be sent. Nothing was queued."""


class RecordTypeError(UsageError, TypeError):
    """A key, value, header, topic or timestamp Kafka's wire types cannot carry: a wrong type,
    or out of the type's range (a timestamp past int64, a topic name past an int16-length
    string). Nothing was queued."""


class IllegalStateError(UsageError, RuntimeError):
    """The call is not allowed in the object's current state (e.g. commit with no transaction)."""


_KIND_CLASS: dict[Kind, type[EosError]] = {
    Kind.RETRIABLE: RetriableError,
    Kind.ABORTABLE: AbortableError,
    Kind.EPOCH_BUMP: EpochBumpRequiredError,
    Kind.FENCED: FencedError,
    Kind.FATAL: FatalError,
    Kind.UNSUPPORTED_VERSION: UnsupportedVersionError,
    Kind.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    Kind.AUTHENTICATION: SaslAuthenticationError,
}

_UNSUPPORTED_VERSION = 35
_OPERATION_NOT_ATTEMPTED = 55

# Least to most severe: in a multi-partition response the most severe error wins.
_SEVERITY: tuple[type[EosError], ...] = (
    RetriableError,
    AbortableError,
    EpochBumpRequiredError,
    FatalError,
    FencedError,
)


class _CodeInfo(NamedTuple):
    name: str
    description: str
    retriable: bool


@functools.cache
def _kafka_code_info(code: int) -> _CodeInfo | None:
    """kafka-python's name, description and retriable flag for ``code``; None if unknown."""
    import kafka.errors  # noqa: PLC0415 - lazy: importing kafka costs ~0.1 s, errors are rare

    cls = kafka.errors.for_code(code)
    if issubclass(cls, kafka.errors.UnknownError) and code != kafka.errors.UnknownError.errno:
        return None  # for_code invents a class for codes it does not know
    return _CodeInfo(str(cls.message), str(cls.description or ""), bool(cls.retriable))


def _api_key(api: ApiKey | int) -> ApiKey | int:
    try:
        return ApiKey(api)
    except ValueError:
        return int(api)


def _label(api: ApiKey | int) -> str:
    return api.label if isinstance(api, ApiKey) else f"ApiKey({api})"


def is_success(api: ApiKey | int, code: int) -> bool:
    """Whether ``code`` on ``api`` reports success: 0, or a success-like code (46 on Produce).

    Args:
        api: The API key of the response.
        code: The error code it carried.

    Returns:
        True if the request reached its goal and no exception should be built.
    """
    key = _api_key(api)
    return code == 0 or (isinstance(key, ApiKey) and (key, code) in SUCCESS_LIKE)


def classify(api: ApiKey | int, code: int) -> type[EosError]:
    """The exception class for ``code`` in a response to ``api``.

    Args:
        api: The API key of the response.
        code: The error code it carried.

    Returns:
        The table's class for the pair, else the fallback described in the module docstring.

    Raises:
        ValueError: ``code`` reports success (see :func:`is_success`).
    """
    key = _api_key(api)
    if is_success(key, code):
        raise ValueError(f"{_label(key)}: error code {code} reports success, not an error")
    row = TABLE.get(key, {}).get(code) if isinstance(key, ApiKey) else None
    if row is not None:
        return _KIND_CLASS[row[0]]
    if code == _UNSUPPORTED_VERSION:
        return UnsupportedVersionError
    info = _kafka_code_info(code)
    return RetriableError if info is not None and info.retriable else FatalError


def error_for(api: ApiKey | int, code: int, message: str | None = None) -> EosError:
    """Build the exception for ``code`` in a response to ``api``.

    Args:
        api: The API key of the response.
        code: The error code it carried.
        message: The broker's error message, if the response had one; it replaces the code's
            generic description in ``str()``.

    Returns:
        An instance of :func:`classify`'s class with ``code``, ``code_name`` and ``api`` set and
        a message like ``"EndTxn: PRODUCER_FENCED (90): There is a newer producer ..."``.

    Raises:
        ValueError: ``code`` reports success (see :func:`is_success`).
    """
    key = _api_key(api)
    cls = classify(key, code)
    info = _kafka_code_info(code)
    name = info.name if info is not None else f"UNKNOWN_CODE_{code}"
    text = message or (info.description if info is not None else "a code kafka-python lacks")
    head = f"{_label(key)}: {name} ({code})"
    return cls(f"{head}: {text}" if text else head, code=code, code_name=name, api=key)


def _severity(err: EosError) -> int:
    return max(rank for rank, kind in enumerate(_SEVERITY) if isinstance(err, kind))


def error_for_codes(api: ApiKey | int, codes: Iterable[int]) -> EosError | None:
    """The one exception for a response that carries a code per partition (or per group).

    The most severe error wins (fenced, fatal, epoch bump, abortable, retriable; the first of
    equals), and OPERATION_NOT_ATTEMPTED (55) only when nothing else failed: it just says that
    another partition of the same AddPartitionsToTxn request did.

    Args:
        api: The API key of the response.
        codes: Every code in it; success codes are skipped.

    Returns:
        The exception to raise, or None if every code reports success.
    """
    errors = [error_for(api, code) for code in codes if not is_success(api, code)]
    causes = [err for err in errors if err.code != _OPERATION_NOT_ATTEMPTED] or errors
    return max(causes, key=_severity, default=None)


class TableRow(NamedTuple):
    """One row of the classification table, for docs and tests."""

    api: ApiKey
    code: int
    kind: type[EosError]
    note: str


def iter_table() -> Iterator[TableRow]:
    """Yield every classified (api, code) pair, by API key then code."""
    for api in sorted(TABLE):
        for code, (kind, note) in sorted(TABLE[api].items()):
            yield TableRow(api, code, _KIND_CLASS[kind], note)
