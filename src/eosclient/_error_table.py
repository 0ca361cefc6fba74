"""The classification table: one row per (API, error code) -> kind.

Private; the public face is :mod:`eosclient.errors`, which turns a row's :class:`Kind` into an
exception class and explains the table's sources and fallbacks in its module docstring. The name
in the comment at a row's end (or above a long row) is kafka-python's (``kafka.errors``), which is
also where the names and descriptions shown to users come from; it is here for the reader, and a
test keeps it true.

Rows list every code the API's response documents (Kafka's ``*Response.java`` javadoc) or the
Java client handles for it (``TransactionManager``, ``Sender``, ``AbstractCoordinator``,
``ConsumerCoordinator``, ``FetchCollector``, ``OffsetFetcherUtils``). A note says why wherever the
kind is not what the code's name suggests.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class ApiKey(enum.IntEnum):
    """Kafka API keys eosclient speaks, with the protocol's numbers.

    The administrative APIs (used by tools and tests) have no rows in the table: their errors
    take the fallback.
    """

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    SASL_AUTHENTICATE = 36
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66

    @property
    def label(self) -> str:
        """The API's name as Kafka spells it, e.g. ``EndTxn`` for ``END_TXN``."""
        return self.name.title().replace("_", "")


class Kind(enum.Enum):
    """What a row asks of the caller; ``eosclient.errors`` maps each to one exception class."""

    RETRIABLE = "retriable"
    ABORTABLE = "abortable"
    EPOCH_BUMP = "epoch bump"
    FENCED = "fenced"
    FATAL = "fatal"
    UNSUPPORTED_VERSION = "unsupported version"
    OFFSET_OUT_OF_RANGE = "offset out of range"
    AUTHENTICATION = "authentication"


RETRY = Kind.RETRIABLE
ABORT = Kind.ABORTABLE
BUMP = Kind.EPOCH_BUMP
FENCED = Kind.FENCED
FATAL = Kind.FATAL
VERSION = Kind.UNSUPPORTED_VERSION
AUTH = Kind.AUTHENTICATION

Row = tuple[Kind, str]
"""(kind, note); the note is empty where the kind is what the code's name says."""


def _without(rows: Mapping[int, Row], *codes: int) -> dict[int, Row]:
    return {code: row for code, row in rows.items() if code not in codes}


# Shared by the coordinator APIs: the client finds the coordinator again (15, 16) or waits (14).
_COORDINATOR: dict[int, Row] = {
    14: (RETRY, ""),  # COORDINATOR_LOAD_IN_PROGRESS
    15: (RETRY, "find the coordinator again"),  # COORDINATOR_NOT_AVAILABLE
    16: (RETRY, "find the coordinator again"),  # NOT_COORDINATOR
}

# Shared by InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn (TransactionManager).
_TXN_COORDINATOR: dict[int, Row] = {
    **_COORDINATOR,
    35: (VERSION, ""),  # UNSUPPORTED_VERSION
    # INVALID_PRODUCER_EPOCH
    47: (FENCED, "old coordinators (and noida-db) answer 47 where Kafka answers 90"),
    # INVALID_TXN_STATE
    48: (FATAL, "the coordinator disagrees with our state machine (Java: fatal)"),
    # INVALID_PRODUCER_ID_MAPPING
    49: (FENCED, "id expired, maybe after a fence; recovering may duplicate (KAFKA-18019)"),
    # CONCURRENT_TRANSACTIONS
    51: (RETRY, "the previous transaction is still completing; retry after ~20 ms"),
    53: (FATAL, ""),  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    90: (FENCED, ""),  # PRODUCER_FENCED
    # TRANSACTION_ABORTABLE
    120: (ABORT, "KIP-890: the broker could not verify the transaction"),
}

# Shared by the group-membership APIs: the group layer rejoins and tries again.
_GROUP: dict[int, Row] = {
    **_COORDINATOR,
    22: (RETRY, "the group layer rejoins"),  # ILLEGAL_GENERATION
    25: (RETRY, "the group layer rejoins with a fresh member id"),  # UNKNOWN_MEMBER_ID
    27: (RETRY, "the group layer rejoins"),  # REBALANCE_IN_PROGRESS
    30: (FATAL, ""),  # GROUP_AUTHORIZATION_FAILED
    35: (VERSION, ""),  # UNSUPPORTED_VERSION
    82: (FENCED, "KIP-345: another member owns this group.instance.id"),  # FENCED_INSTANCE_ID
}

_PRODUCE: dict[int, Row] = {
    # A Produce failure that is neither retriable nor fatal loses the batch, and with it the
    # partition's sequence: every such row bumps the epoch on abort, as Java's
    # TransactionManager.maybeTransitionToErrorState does for a transactional producer (KIP-360).
    -1: (BUMP, "the batch's outcome is unknown"),  # UNKNOWN
    2: (BUMP, "the batch was rejected"),  # CORRUPT_MESSAGE
    3: (RETRY, "metadata may lag a new topic"),  # UNKNOWN_TOPIC_OR_PARTITION
    5: (RETRY, ""),  # LEADER_NOT_AVAILABLE
    6: (RETRY, "refresh metadata"),  # NOT_LEADER_FOR_PARTITION
    # REQUEST_TIMED_OUT
    7: (RETRY, "outcome unknown, but a resend keeps its sequence and is deduplicated"),
    # MESSAGE_SIZE_TOO_LARGE
    10: (BUMP, "a record too large for the topic loses the transaction"),
    13: (RETRY, ""),  # NETWORK_EXCEPTION
    17: (BUMP, "the batch was rejected"),  # INVALID_TOPIC
    18: (BUMP, "the batch was rejected"),  # RECORD_LIST_TOO_LARGE
    19: (RETRY, ""),  # NOT_ENOUGH_REPLICAS
    # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    20: (RETRY, "written but under-replicated; a resend is deduplicated"),
    # INVALID_REQUIRED_ACKS
    21: (FATAL, "transactions need acks=all; every transaction would fail"),
    # TOPIC_AUTHORIZATION_FAILED
    29: (BUMP, "Java: abortable; other topics and EndTxn still work"),
    31: (FATAL, "not authorised for idempotent writes"),  # CLUSTER_AUTHORIZATION_FAILED
    32: (BUMP, "the batch was rejected"),  # INVALID_TIMESTAMP
    35: (VERSION, ""),  # UNSUPPORTED_VERSION
    # UNSUPPORTED_FOR_MESSAGE_FORMAT
    43: (FATAL, "the topic's message format predates transactions"),
    45: (BUMP, "KIP-360: the broker saw a gap in the sequence"),  # OUT_OF_ORDER_SEQUENCE_NUMBER
    # INVALID_PRODUCER_EPOCH
    47: (BUMP, "KIP-588: the coordinator may have bumped on timeout; abort re-claims the epoch"),
    # INVALID_TXN_STATE
    48: (BUMP, "KIP-890 verification: partition not in an ongoing transaction"),
    # INVALID_PRODUCER_ID_MAPPING
    49: (FENCED, "KIP-890 verification: transactional.id expired (KAFKA-18019)"),
    # CONCURRENT_TRANSACTIONS
    51: (RETRY, "KIP-890 verification: the previous transaction is completing"),
    53: (FATAL, ""),  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    56: (RETRY, ""),  # KAFKA_STORAGE_ERROR
    59: (BUMP, "KIP-360: the broker lost this producer's state"),  # UNKNOWN_PRODUCER_ID
    87: (BUMP, "the batch was rejected"),  # INVALID_RECORD
    90: (FENCED, "Tansu answers a stale epoch with 90"),  # PRODUCER_FENCED
    100: (RETRY, "metadata may lag"),  # UNKNOWN_TOPIC_ID
    # TRANSACTION_ABORTABLE
    120: (BUMP, "KIP-890: the broker could not verify the transaction"),
}

_FETCH: dict[int, Row] = {
    -1: (RETRY, "Java's FetchCollector logs it and fetches again"),  # UNKNOWN
    # OFFSET_OUT_OF_RANGE
    1: (Kind.OFFSET_OUT_OF_RANGE, "the consumer resets per auto.offset.reset"),
    # CORRUPT_MESSAGE
    2: (FATAL, "the log is corrupt at this offset; fetching again reads the same bytes"),
    3: (RETRY, "metadata may lag"),  # UNKNOWN_TOPIC_OR_PARTITION
    6: (RETRY, "refresh metadata"),  # NOT_LEADER_FOR_PARTITION
    9: (RETRY, "refresh metadata"),  # REPLICA_NOT_AVAILABLE
    29: (FATAL, ""),  # TOPIC_AUTHORIZATION_FAILED
    35: (VERSION, ""),  # UNSUPPORTED_VERSION
    56: (RETRY, ""),  # KAFKA_STORAGE_ERROR
    70: (RETRY, "KIP-227: start a new fetch session"),  # FETCH_SESSION_ID_NOT_FOUND
    71: (RETRY, "KIP-227: start a new fetch session"),  # INVALID_FETCH_SESSION_EPOCH
    74: (RETRY, "KIP-320: refresh metadata"),  # FENCED_LEADER_EPOCH
    75: (RETRY, "KIP-320: our metadata is ahead of the broker"),  # UNKNOWN_LEADER_EPOCH
    # UNSUPPORTED_COMPRESSION_TYPE
    76: (FATAL, "the topic's compression needs a newer Fetch version"),
    78: (RETRY, "the new leader's high watermark is catching up"),  # OFFSET_NOT_AVAILABLE
    100: (RETRY, "metadata may lag"),  # UNKNOWN_TOPIC_ID
    103: (RETRY, "topic recreated; refresh metadata"),  # INCONSISTENT_TOPIC_ID
    106: (RETRY, "start a new fetch session"),  # FETCH_SESSION_TOPIC_ID_ERROR
}

_LIST_OFFSETS: dict[int, Row] = {
    -1: (RETRY, "Java's OffsetFetcherUtils retries any unexpected code"),  # UNKNOWN
    3: (RETRY, "metadata may lag"),  # UNKNOWN_TOPIC_OR_PARTITION
    5: (RETRY, ""),  # LEADER_NOT_AVAILABLE
    6: (RETRY, "refresh metadata"),  # NOT_LEADER_FOR_PARTITION
    9: (RETRY, ""),  # REPLICA_NOT_AVAILABLE
    29: (FATAL, ""),  # TOPIC_AUTHORIZATION_FAILED
    35: (VERSION, ""),  # UNSUPPORTED_VERSION
    42: (FATAL, "e.g. read_committed on ListOffsets < v2"),  # INVALID_REQUEST
    # UNSUPPORTED_FOR_MESSAGE_FORMAT
    43: (FATAL, "lookup by timestamp on a pre-0.10 format; Java reports 'no offset'"),
    56: (RETRY, ""),  # KAFKA_STORAGE_ERROR
    74: (RETRY, "KIP-320: refresh metadata"),  # FENCED_LEADER_EPOCH
    75: (RETRY, "KIP-320"),  # UNKNOWN_LEADER_EPOCH
    78: (RETRY, "the new leader's high watermark is catching up"),  # OFFSET_NOT_AVAILABLE
}

_METADATA: dict[int, Row] = {
    3: (RETRY, "metadata may lag a new topic"),  # UNKNOWN_TOPIC_OR_PARTITION
    5: (RETRY, ""),  # LEADER_NOT_AVAILABLE
    17: (FATAL, "illegal topic name"),  # INVALID_TOPIC
    29: (FATAL, ""),  # TOPIC_AUTHORIZATION_FAILED
    35: (VERSION, ""),  # UNSUPPORTED_VERSION
    100: (RETRY, "metadata may lag"),  # UNKNOWN_TOPIC_ID
}

_OFFSET_COMMIT: dict[int, Row] = {
    **_COORDINATOR,
    3: (RETRY, ""),  # UNKNOWN_TOPIC_OR_PARTITION
    7: (RETRY, "Java looks the coordinator up again"),  # REQUEST_TIMED_OUT
    12: (FATAL, "the application's metadata string is too long"),  # OFFSET_METADATA_TOO_LARGE
    # ILLEGAL_GENERATION
    22: (ABORT, "Java CommitFailedException: the generation is gone; redo from committed"),
    # UNKNOWN_MEMBER_ID
    25: (ABORT, "Java CommitFailedException: the generation is gone; redo from committed"),
    # REBALANCE_IN_PROGRESS
    27: (RETRY, "Java RebalanceInProgressException: finish the rebalance, commit again"),
    28: (FATAL, "the commit is too large"),  # INVALID_COMMIT_OFFSET_SIZE
    29: (FATAL, ""),  # TOPIC_AUTHORIZATION_FAILED
    30: (FATAL, ""),  # GROUP_AUTHORIZATION_FAILED
    35: (VERSION, ""),  # UNSUPPORTED_VERSION
    48: (FATAL, "shared with TxnOffsetCommit's KIP-890 verification"),  # INVALID_TXN_STATE
    # INVALID_PRODUCER_ID_MAPPING
    49: (FATAL, "shared with TxnOffsetCommit's KIP-890 verification"),
    69: (FATAL, "KIP-848: the group does not exist"),  # GROUP_ID_NOT_FOUND
    82: (FENCED, "KIP-345: another member owns this group.instance.id"),  # FENCED_INSTANCE_ID
    # STALE_MEMBER_EPOCH
    113: (RETRY, "KIP-848: heartbeat for the new member epoch, commit again"),
}

_OFFSET_FETCH: dict[int, Row] = {
    **_COORDINATOR,
    3: (RETRY, "metadata may lag"),  # UNKNOWN_TOPIC_OR_PARTITION
    25: (RETRY, "the group layer rejoins"),  # UNKNOWN_MEMBER_ID
    29: (FATAL, ""),  # TOPIC_AUTHORIZATION_FAILED
    30: (FATAL, ""),  # GROUP_AUTHORIZATION_FAILED
    35: (VERSION, ""),  # UNSUPPORTED_VERSION
    # UNSTABLE_OFFSET_COMMIT
    88: (RETRY, "KIP-447 require_stable: a transaction on these offsets is still open"),
    113: (RETRY, "KIP-848: heartbeat for the new member epoch"),  # STALE_MEMBER_EPOCH
}

_FIND_COORDINATOR: dict[int, Row] = {
    14: (RETRY, ""),  # COORDINATOR_LOAD_IN_PROGRESS
    15: (RETRY, ""),  # COORDINATOR_NOT_AVAILABLE
    # GROUP_AUTHORIZATION_FAILED
    30: (FATAL, "AddOffsetsToTxn needs READ on the group, so a transaction fails there first"),
    35: (VERSION, "KIP-699 batched lookup needs v4"),  # UNSUPPORTED_VERSION
    42: (FATAL, ""),  # INVALID_REQUEST
    53: (FATAL, ""),  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
}

_JOIN_GROUP: dict[int, Row] = {
    **_without(_GROUP, 22),
    # INCONSISTENT_GROUP_PROTOCOL
    23: (FATAL, "our protocol type or assignors do not match the group's"),
    24: (FATAL, ""),  # INVALID_GROUP_ID
    26: (FATAL, "session.timeout.ms outside the broker's range"),  # INVALID_SESSION_TIMEOUT
    79: (RETRY, "KIP-394: join again with the member id in the response"),  # MEMBER_ID_REQUIRED
    81: (FATAL, "group.max.size reached"),  # GROUP_MAX_SIZE_REACHED
}

_SYNC_GROUP: dict[int, Row] = {
    **_GROUP,
    23: (FATAL, "KIP-559: protocol type or name mismatch"),  # INCONSISTENT_GROUP_PROTOCOL
}

# LeaveGroup's UNKNOWN_MEMBER_ID is in SUCCESS_LIKE below.
_LEAVE_GROUP: dict[int, Row] = _without(_GROUP, 22, 25, 27)

_API_VERSIONS: dict[int, Row] = {
    # UNSUPPORTED_VERSION
    35: (VERSION, "KIP-511: the protocol layer first retries with the broker's highest version"),
    42: (FATAL, "KIP-511: client software name or version rejected"),  # INVALID_REQUEST
}

# SASL (KIP-43, KIP-152): run on every new connection before anything else. A refusal is never
# retried: the same credentials would be refused again, and a client that loops on them locks
# accounts on clusters that count failed logins.
_SASL_HANDSHAKE: dict[int, Row] = {
    # UNSUPPORTED_SASL_MECHANISM
    33: (AUTH, "the broker does not enable sasl.mechanism; the answer lists what it enables"),
    # ILLEGAL_SASL_STATE
    34: (AUTH, "SaslHandshake out of turn: a client bug or a broker in another state"),
}

_SASL_AUTHENTICATE: dict[int, Row] = {
    34: (AUTH, "SaslAuthenticate out of turn"),  # ILLEGAL_SASL_STATE
    # SASL_AUTHENTICATION_FAILED
    58: (AUTH, "wrong password, unknown user or expired token: fix the credentials"),
}

# InitProducerId makes a new mapping, so it never answers 48 or 49.
_INIT_PRODUCER_ID: dict[int, Row] = {
    **_without(_TXN_COORDINATOR, 48, 49),
    -1: (FATAL, "Tansu's answer to the KIP-360 form; the producer falls back first"),  # UNKNOWN
    31: (FATAL, ""),  # CLUSTER_AUTHORIZATION_FAILED
    42: (FATAL, "empty transactional.id"),  # INVALID_REQUEST
    # INVALID_TRANSACTION_TIMEOUT
    50: (FATAL, "transaction.timeout.ms above the broker's maximum"),
    # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    53: (FATAL, "Java: abortable, to retry init after an ACL fix; ACLs are config here"),
    # UNKNOWN_PRODUCER_ID
    59: (FATAL, "KIP-360 form rejected; the producer falls back to the plain form first"),
}

_ADD_PARTITIONS_TO_TXN: dict[int, Row] = {
    **_TXN_COORDINATOR,
    3: (RETRY, "metadata may lag a new topic"),  # UNKNOWN_TOPIC_OR_PARTITION
    # TOPIC_AUTHORIZATION_FAILED
    29: (ABORT, "Java: abortable; the transaction can still be aborted"),
    42: (FATAL, ""),  # INVALID_REQUEST
    # OPERATION_NOT_ATTEMPTED
    55: (ABORT, "another partition failed; error_for_codes() reports that one instead"),
    59: (BUMP, "KIP-360 (Java: abortableErrorIfPossible)"),  # UNKNOWN_PRODUCER_ID
}

_ADD_OFFSETS_TO_TXN: dict[int, Row] = {
    **_TXN_COORDINATOR,
    # GROUP_AUTHORIZATION_FAILED
    30: (ABORT, "Java: abortable; the transaction can still be aborted"),
    59: (BUMP, "KIP-360 (Java: abortableErrorIfPossible)"),  # UNKNOWN_PRODUCER_ID
}

_END_TXN: dict[int, Row] = {
    **_TXN_COORDINATOR,
    59: (BUMP, "KIP-360 (Java: abortableErrorIfPossible)"),  # UNKNOWN_PRODUCER_ID
}

_TXN_OFFSET_COMMIT: dict[int, Row] = {
    **_COORDINATOR,
    3: (RETRY, ""),  # UNKNOWN_TOPIC_OR_PARTITION
    7: (RETRY, "Java looks the group coordinator up again"),  # REQUEST_TIMED_OUT
    12: (FATAL, "the application's metadata string is too long"),  # OFFSET_METADATA_TOO_LARGE
    # ILLEGAL_GENERATION
    22: (ABORT, "KIP-447: the consumer's generation is stale (Java CommitFailedException)"),
    # UNKNOWN_MEMBER_ID
    25: (ABORT, "KIP-447: the consumer left the group (Java CommitFailedException)"),
    28: (FATAL, "the commit is too large"),  # INVALID_COMMIT_OFFSET_SIZE
    # GROUP_AUTHORIZATION_FAILED
    30: (ABORT, "Java: abortable; the transaction can still be aborted"),
    35: (VERSION, ""),  # UNSUPPORTED_VERSION
    43: (FATAL, ""),  # UNSUPPORTED_FOR_MESSAGE_FORMAT
    # INVALID_PRODUCER_EPOCH
    47: (FENCED, "old coordinators (and noida-db) answer 47 where Kafka answers 90"),
    48: (FATAL, "KIP-890 verification (Java: fatal)"),  # INVALID_TXN_STATE
    # INVALID_PRODUCER_ID_MAPPING
    49: (FENCED, "KIP-890 verification: transactional.id expired (KAFKA-18019)"),
    53: (FATAL, ""),  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    82: (ABORT, "KIP-447: the consumer, not the producer, was fenced"),  # FENCED_INSTANCE_ID
    90: (FENCED, ""),  # PRODUCER_FENCED
    # TRANSACTION_ABORTABLE
    120: (ABORT, "KIP-890: the broker could not verify the transaction"),
}

TABLE: Mapping[ApiKey, Mapping[int, Row]] = {
    ApiKey.PRODUCE: _PRODUCE,
    ApiKey.FETCH: _FETCH,
    ApiKey.LIST_OFFSETS: _LIST_OFFSETS,
    ApiKey.METADATA: _METADATA,
    ApiKey.OFFSET_COMMIT: _OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH: _OFFSET_FETCH,
    ApiKey.FIND_COORDINATOR: _FIND_COORDINATOR,
    ApiKey.JOIN_GROUP: _JOIN_GROUP,
    ApiKey.HEARTBEAT: dict(_GROUP),
    ApiKey.LEAVE_GROUP: _LEAVE_GROUP,
    ApiKey.SYNC_GROUP: _SYNC_GROUP,
    ApiKey.SASL_HANDSHAKE: _SASL_HANDSHAKE,
    ApiKey.API_VERSIONS: _API_VERSIONS,
    ApiKey.INIT_PRODUCER_ID: _INIT_PRODUCER_ID,
    ApiKey.SASL_AUTHENTICATE: _SASL_AUTHENTICATE,
    ApiKey.ADD_PARTITIONS_TO_TXN: _ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN: _ADD_OFFSETS_TO_TXN,
    ApiKey.END_TXN: _END_TXN,
    ApiKey.TXN_OFFSET_COMMIT: _TXN_OFFSET_COMMIT,
}
"""Every classified (api, code) pair. Code 0 (NONE) is never a row."""

SUCCESS_LIKE: Mapping[tuple[ApiKey, int], str] = {
    # DUPLICATE_SEQUENCE_NUMBER
    (ApiKey.PRODUCE, 46): "the batch was already written; Java completes it without an offset",
    # UNKNOWN_MEMBER_ID
    (ApiKey.LEAVE_GROUP, 25): "the coordinator had already dropped the member",
    # REPLICA_NOT_AVAILABLE
    (ApiKey.METADATA, 9): "a follower is offline; the partition's leader is still usable",
}
"""Non-zero codes that report success for this API: the goal of the request was reached."""
