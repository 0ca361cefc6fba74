"""The error classification: every row of the table, the semantics that keep exactly-once, the
fallbacks, and the exception tree itself (ancestry, builtins, pickling). No broker, no I/O."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import kafka.errors
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eosclient import _error_table
from eosclient.errors import (
    AbortableError,
    ApiKey,
    ConfigError,
    EosError,
    EpochBumpRequiredError,
    FatalError,
    FencedError,
    IllegalStateError,
    InvalidGroupIdError,
    KafkaConnectionError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    ProtocolError,
    ResponseTooLargeError,
    RetriableError,
    TableRow,
    UnknownPartitionError,
    UnsupportedVersionError,
    UsageError,
    classify,
    error_for,
    error_for_codes,
    is_success,
    iter_table,
)

KINDS = (RetriableError, AbortableError, FencedError, FatalError)
ROWS = list(iter_table())

TXN_COORDINATOR_APIS = (
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN,
    ApiKey.END_TXN,
)
TXN_APIS = (*TXN_COORDINATOR_APIS, ApiKey.TXN_OFFSET_COMMIT)
GROUP_APIS = (ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.SYNC_GROUP)
TABLED_APIS = (
    ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP, ApiKey.API_VERSIONS, *TXN_APIS,
)


def kind_of(err: EosError) -> type[EosError]:
    (kind,) = [k for k in KINDS if isinstance(err, k)]
    return kind


# --- the table, row by row ---------------------------------------------------------------------


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.api.label}-{r.code}")
def test_every_row_yields_its_class_and_carries_code_name_api(row: TableRow) -> None:
    err = error_for(row.api, row.code)
    assert type(err) is row.kind
    assert classify(row.api, row.code) is row.kind
    assert err.code == row.code
    assert err.code_name == kafka.errors.for_code(row.code).message
    assert err.api is row.api
    assert sum(isinstance(err, kind) for kind in KINDS) == 1


def test_every_api_of_the_brief_has_rows_and_no_row_is_code_zero() -> None:
    counts = {api: sum(1 for r in ROWS if r.api is api) for api in TABLED_APIS}
    assert all(n > 0 for n in counts.values()), counts
    assert all(r.code != 0 for r in ROWS)
    assert len(ROWS) == sum(len(rows) for rows in _error_table.TABLE.values())


def test_success_like_pairs_are_not_rows() -> None:
    # A pair is either success or an error, never both.
    for api, code in _error_table.SUCCESS_LIKE:
        assert code not in _error_table.TABLE[api]


def test_the_names_in_the_table_comments_are_kafka_pythons() -> None:
    # The comments are hand-written for the reader; keep them true to the codes.
    source = Path(_error_table.__file__).read_text()
    row = r"\s+(?:-?\d+|\(ApiKey\.[A-Z_]+, -?\d+\)): "
    code = r"(-?\d+)(?:\))?: "
    rows = re.findall(rf"^{row}", source, re.MULTILINE)
    inline = re.findall(rf"^\s+(?:\(ApiKey\.[A-Z_]+, )?{code}.*,  # ([A-Z_]+)$", source, re.M)
    above = re.findall(rf"^\s+# ([A-Z_]+)\n\s+(?:\(ApiKey\.[A-Z_]+, )?{code}", source, re.M)
    pairs = inline + [(number, name) for name, number in above]
    assert len(pairs) == len(rows) > 150
    for number, name in pairs:
        assert kafka.errors.for_code(int(number)).message == name, (number, name)


# --- semantics that exactly-once depends on ----------------------------------------------------


@pytest.mark.parametrize("code", [45, 59])
def test_broken_sequence_on_produce_requires_an_epoch_bump(code: int) -> None:
    # KIP-360: aborting without a bump would reuse the broken sequence in the next transaction.
    assert classify(ApiKey.PRODUCE, code) is EpochBumpRequiredError


def test_invalid_producer_epoch_on_produce_is_abortable_not_fenced() -> None:
    # KIP-588: the coordinator may have bumped the epoch on timeout; the producer can recover.
    err = error_for(ApiKey.PRODUCE, 47)
    assert isinstance(err, AbortableError)
    assert not isinstance(err, FencedError)


@pytest.mark.parametrize("api", TXN_APIS)
@pytest.mark.parametrize("code", [47, 90])
def test_epoch_errors_on_coordinator_apis_are_fenced(api: ApiKey, code: int) -> None:
    # noida-db answers 47 where Kafka answers 90: both mean another instance owns the id.
    assert classify(api, code) is FencedError


def test_producer_fenced_on_produce_is_fenced() -> None:
    # Tansu answers a stale epoch on Produce with 90.
    assert classify(ApiKey.PRODUCE, 90) is FencedError


def test_duplicate_sequence_on_produce_is_success() -> None:
    # The batch was already written; raising would make the application redo committed work.
    assert is_success(ApiKey.PRODUCE, 46)
    with pytest.raises(ValueError, match="reports success"):
        error_for(ApiKey.PRODUCE, 46)


@pytest.mark.parametrize("code", [3, 5, 6, 7, 13, 19, 20, 56])
def test_transient_produce_errors_are_retriable(code: int) -> None:
    # A resend keeps its sequence number, so the broker deduplicates it.
    assert classify(ApiKey.PRODUCE, code) is RetriableError


@pytest.mark.parametrize("code", [2, 10, 18, 87])
def test_rejected_batches_lose_the_transaction_and_bump(code: int) -> None:
    # The rejected batch leaves a gap in the sequence (Java bumps after any failed batch).
    assert classify(ApiKey.PRODUCE, code) is EpochBumpRequiredError


@pytest.mark.parametrize("code", [31, 53])
def test_producer_authorization_failures_are_fatal(code: int) -> None:
    # Without idempotent-write or transactional-id ACLs not even EndTxn can succeed.
    assert classify(ApiKey.PRODUCE, code) is FatalError


def test_topic_authorization_on_produce_is_abortable() -> None:
    # Java: abortable; other topics and EndTxn still work, so the producer is fine.
    assert issubclass(classify(ApiKey.PRODUCE, 29), AbortableError)


@pytest.mark.parametrize("api", TXN_COORDINATOR_APIS)
@pytest.mark.parametrize("code", [14, 15, 16, 51])
def test_coordinator_errors_are_retriable(api: ApiKey, code: int) -> None:
    # CONCURRENT_TRANSACTIONS right after a commit is normal: markers are still being written.
    assert classify(api, code) is RetriableError


@pytest.mark.parametrize("api", TXN_APIS)
def test_transactional_id_authorization_is_fatal(api: ApiKey) -> None:
    # No ACL on the transactional.id: nothing this producer does can succeed.
    assert classify(api, 53) is FatalError


@pytest.mark.parametrize("api", (*TXN_APIS[1:],))
def test_invalid_txn_state_on_coordinator_apis_is_fatal(api: ApiKey) -> None:
    # Java: fatal; the coordinator and the state machine disagree.
    assert classify(api, 48) is FatalError


@pytest.mark.parametrize(
    "api", [ApiKey.PRODUCE, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
            ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT]
)
def test_invalid_producer_id_mapping_is_fenced(api: ApiKey) -> None:
    # KAFKA-18019: recovering in place lets a zombie with an expired id redo committed work.
    assert classify(api, 49) is FencedError


def test_transaction_coordinator_fenced_is_not_producer_fenced() -> None:
    # 52 is about a stale coordinator (WriteTxnMarkers only); closing a healthy producer is wrong.
    assert classify(ApiKey.END_TXN, 52) is FatalError


@pytest.mark.parametrize("api", [ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
                                 ApiKey.END_TXN])
def test_unknown_producer_id_on_coordinator_apis_requires_a_bump(api: ApiKey) -> None:
    # Java abortableErrorIfPossible (KIP-360).
    assert classify(api, 59) is EpochBumpRequiredError


def test_unknown_producer_id_on_init_producer_id_is_fatal() -> None:
    # The bump itself was refused; "abort and bump" would loop.
    assert classify(ApiKey.INIT_PRODUCER_ID, 59) is FatalError


def test_add_partitions_errors() -> None:
    # Metadata may lag a new topic; an unauthorised topic loses only the transaction.
    assert classify(ApiKey.ADD_PARTITIONS_TO_TXN, 3) is RetriableError
    assert classify(ApiKey.ADD_PARTITIONS_TO_TXN, 29) is AbortableError
    assert classify(ApiKey.ADD_PARTITIONS_TO_TXN, 55) is AbortableError


def test_operation_not_attempted_defers_to_the_partition_that_failed() -> None:
    # 55 only says another partition failed; the retriable cause must not become an abort.
    err = error_for_codes(ApiKey.ADD_PARTITIONS_TO_TXN, [55, 3, 55])
    assert type(err) is RetriableError
    assert err.code == 3
    only = error_for_codes(ApiKey.ADD_PARTITIONS_TO_TXN, [55, 55])
    assert only is not None and only.code == 55


def test_error_for_codes_picks_the_most_severe() -> None:
    # One fenced partition fences the producer, whatever the others say.
    err = error_for_codes(ApiKey.TXN_OFFSET_COMMIT, [0, 15, 22, 90, 53])
    assert isinstance(err, FencedError)
    bump = error_for_codes(ApiKey.PRODUCE, [6, 45, 29])
    assert bump is not None and bump.code == 45  # the first of equals
    assert error_for_codes(ApiKey.PRODUCE, [0, 46, 0]) is None
    assert error_for_codes(ApiKey.PRODUCE, []) is None


@pytest.mark.parametrize("api", [ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.TXN_OFFSET_COMMIT])
def test_group_authorization_in_a_transaction_is_abortable(api: ApiKey) -> None:
    # Java: abortable; the transaction can still be aborted.
    assert classify(api, 30) is AbortableError


@pytest.mark.parametrize("code", [22, 25, 82])
def test_stale_consumer_on_txn_offset_commit_is_abortable(code: int) -> None:
    # KIP-447: the consumer lost its generation, not the producer its epoch.
    assert classify(ApiKey.TXN_OFFSET_COMMIT, code) is AbortableError


@pytest.mark.parametrize("api", TXN_APIS)
def test_transaction_abortable_is_abortable(api: ApiKey) -> None:
    # KIP-890: the broker says so in the code's name.
    assert issubclass(classify(api, 120), AbortableError)


def test_invalid_transaction_timeout_is_fatal() -> None:
    # transaction.timeout.ms above the broker's maximum: fix the configuration.
    assert classify(ApiKey.INIT_PRODUCER_ID, 50) is FatalError


@pytest.mark.parametrize("api", TABLED_APIS)
def test_unsupported_version_is_fatal_everywhere(api: ApiKey) -> None:
    # No shared API version: nothing will change until one side is upgraded.
    assert classify(api, 35) is UnsupportedVersionError
    assert issubclass(UnsupportedVersionError, FatalError)


@pytest.mark.parametrize("api", [ApiKey.PRODUCE, ApiKey.TXN_OFFSET_COMMIT])
def test_unsupported_for_message_format_is_fatal(api: ApiKey) -> None:
    # The topic's format predates transactions.
    assert classify(api, 43) is FatalError


def test_offset_out_of_range_is_its_own_fatal_class() -> None:
    # The consumer resets per auto.offset.reset; only reset=none lets it reach the application.
    err = error_for(ApiKey.FETCH, 1)
    assert type(err) is OffsetOutOfRangeError
    assert kind_of(err) is FatalError


@pytest.mark.parametrize("api", [ApiKey.FETCH, ApiKey.LIST_OFFSETS])
@pytest.mark.parametrize("code", [3, 6, 56, 74, 75])
def test_leadership_and_metadata_lag_on_reads_is_retriable(api: ApiKey, code: int) -> None:
    # A refresh of metadata fixes these.
    assert classify(api, code) is RetriableError


def test_offset_not_available_is_retriable() -> None:
    # The new leader's high watermark catches up after an election.
    assert classify(ApiKey.LIST_OFFSETS, 78) is RetriableError


@pytest.mark.parametrize("code", [2, 29])
def test_corrupt_log_and_topic_authorization_on_fetch_are_fatal(code: int) -> None:
    # Fetching again reads the same bytes, or meets the same ACL.
    assert classify(ApiKey.FETCH, code) is FatalError


@pytest.mark.parametrize("api", GROUP_APIS)
@pytest.mark.parametrize("code", [25, 27])
def test_group_churn_is_retriable(api: ApiKey, code: int) -> None:
    # The group layer rejoins and tries again.
    assert classify(api, code) is RetriableError


def test_group_specific_codes() -> None:
    # ILLEGAL_GENERATION and MEMBER_ID_REQUIRED make the group layer rejoin.
    assert classify(ApiKey.HEARTBEAT, 22) is RetriableError
    assert classify(ApiKey.SYNC_GROUP, 22) is RetriableError
    assert classify(ApiKey.JOIN_GROUP, 79) is RetriableError


@pytest.mark.parametrize("api", [*GROUP_APIS, ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT])
def test_fenced_instance_id_in_a_group_is_fenced(api: ApiKey) -> None:
    # KIP-345: another member owns this group.instance.id.
    assert classify(api, 82) is FencedError


@pytest.mark.parametrize("code", [23, 26, 30, 81])
def test_group_misconfiguration_is_fatal(code: int) -> None:
    # Protocol mismatch, session timeout, ACLs or group size: fix the configuration.
    assert classify(ApiKey.JOIN_GROUP, code) is FatalError


def test_unstable_offset_commit_is_retriable() -> None:
    # KIP-447 require_stable: an open transaction still holds these offsets.
    assert classify(ApiKey.OFFSET_FETCH, 88) is RetriableError


def test_leave_group_of_an_unknown_member_is_success() -> None:
    # The coordinator already dropped the member: leaving reached its goal.
    assert is_success(ApiKey.LEAVE_GROUP, 25)


# --- fallbacks ---------------------------------------------------------------------------------


def test_unlisted_pair_falls_back_to_kafka_pythons_retriable_flag() -> None:
    # NETWORK_EXCEPTION is not a FindCoordinator row, and kafka-python marks it retriable.
    assert 13 not in _error_table.TABLE[ApiKey.FIND_COORDINATOR]
    assert classify(ApiKey.FIND_COORDINATOR, 13) is RetriableError


def test_unlisted_non_retriable_pair_falls_back_to_fatal() -> None:
    # A code an API is not documented to return is a surprise: close rather than guess.
    assert 45 not in _error_table.TABLE[ApiKey.FETCH]
    assert classify(ApiKey.FETCH, 45) is FatalError


def test_unsupported_version_falls_back_to_its_class_on_untabled_apis() -> None:
    assert classify(ApiKey.LIST_TRANSACTIONS, 35) is UnsupportedVersionError


def test_unknown_code_is_fatal_with_a_made_up_name() -> None:
    err = error_for(ApiKey.END_TXN, 4242)
    assert type(err) is FatalError
    assert err.code == 4242
    assert err.code_name == "UNKNOWN_CODE_4242"
    assert str(err).startswith("EndTxn: UNKNOWN_CODE_4242 (4242): ")


def test_unknown_api_key_keeps_the_number() -> None:
    err = error_for(99, 3)
    assert type(err) is RetriableError
    assert err.api == 99 and not isinstance(err.api, ApiKey)
    assert str(err).startswith("ApiKey(99): UNKNOWN_TOPIC_OR_PARTITION (3)")


def test_int_api_keys_are_normalised() -> None:
    err = error_for(26, 90)
    assert err.api is ApiKey.END_TXN


@pytest.mark.parametrize("api", list(ApiKey))
def test_code_zero_is_not_an_error(api: ApiKey) -> None:
    assert is_success(api, 0)
    with pytest.raises(ValueError, match="reports success"):
        error_for(api, 0)
    with pytest.raises(ValueError, match="reports success"):
        classify(api, 0)


# --- messages ----------------------------------------------------------------------------------


def test_str_names_api_code_and_description() -> None:
    err = error_for(ApiKey.END_TXN, 90)
    assert str(err) == (
        "EndTxn: PRODUCER_FENCED (90): "
        + kafka.errors.for_code(90).description
    )


def test_broker_message_replaces_the_generic_description() -> None:
    err = error_for(ApiKey.PRODUCE, 10, "record of 2 MiB exceeds 1 MiB")
    assert str(err) == "Produce: MESSAGE_SIZE_TOO_LARGE (10): record of 2 MiB exceeds 1 MiB"


def test_code_without_description_has_no_dangling_colon() -> None:
    # kafka-python has no description for NETWORK_EXCEPTION.
    assert str(error_for(ApiKey.PRODUCE, 13)) == "Produce: NETWORK_EXCEPTION (13)"


def test_api_labels_are_kafkas_names() -> None:
    assert ApiKey.INIT_PRODUCER_ID.label == "InitProducerId"
    assert ApiKey.TXN_OFFSET_COMMIT.label == "TxnOffsetCommit"
    assert ApiKey.API_VERSIONS.label == "ApiVersions"


# --- the tree ----------------------------------------------------------------------------------

ANCESTRY = {
    RetriableError: RetriableError,
    KafkaTimeoutError: RetriableError,
    KafkaConnectionError: RetriableError,
    AbortableError: AbortableError,
    EpochBumpRequiredError: AbortableError,
    FencedError: FencedError,
    FatalError: FatalError,
    ProtocolError: FatalError,
    ResponseTooLargeError: FatalError,
    UnsupportedVersionError: FatalError,
    OffsetOutOfRangeError: FatalError,
}
USAGE = (UsageError, ConfigError, UnknownPartitionError, InvalidGroupIdError, IllegalStateError)


@pytest.mark.parametrize("cls", list(ANCESTRY), ids=lambda c: c.__name__)
def test_every_broker_facing_class_has_exactly_one_kind(cls: type[EosError]) -> None:
    assert [k for k in KINDS if issubclass(cls, k)] == [ANCESTRY[cls]]
    assert not issubclass(cls, UsageError)


@pytest.mark.parametrize("cls", USAGE, ids=lambda c: c.__name__)
def test_usage_errors_are_none_of_the_four_kinds(cls: type[EosError]) -> None:
    # A usage error is a bug in the caller, raised before anything is sent.
    assert issubclass(cls, UsageError) and issubclass(cls, EosError)
    assert not any(issubclass(cls, k) for k in KINDS)


def test_builtin_bases() -> None:
    # Code that catches the builtins keeps working.
    assert issubclass(KafkaTimeoutError, TimeoutError)
    assert issubclass(ConfigError, ValueError)
    assert issubclass(UnknownPartitionError, ValueError)
    assert issubclass(InvalidGroupIdError, ValueError)
    assert issubclass(IllegalStateError, RuntimeError)
    assert not issubclass(KafkaConnectionError, OSError)
    assert isinstance(KafkaTimeoutError("late"), TimeoutError)


def test_local_errors_have_no_code() -> None:
    err = IllegalStateError("commit_transaction() outside a transaction")
    assert (err.code, err.code_name, err.api) == (None, None, None)
    assert str(err) == "commit_transaction() outside a transaction"


def test_config_error_names_its_key() -> None:
    err = ConfigError("must not be empty", key="transactional.id")
    assert err.key == "transactional.id"
    assert str(err) == "transactional.id: must not be empty"
    assert str(ConfigError("acks must be 'all'", key="acks")) == "acks must be 'all'"


SAMPLES: list[EosError] = [
    *(cls("local failure") for cls in (*ANCESTRY, UsageError, UnknownPartitionError,
                                       InvalidGroupIdError, IllegalStateError)
      if cls is not ResponseTooLargeError),
    ConfigError("too small", key="linger.ms"),
    ResponseTooLargeError("118 MiB", size=118 << 20, limit=100_000_000, api=ApiKey.FETCH, node=1),
    KafkaTimeoutError("commit timed out", api=ApiKey.END_TXN),
    *(error_for(r.api, r.code, "broker says hi") for r in ROWS[::7]),
    error_for(99, 4242),
]


@pytest.mark.parametrize("err", SAMPLES, ids=lambda e: f"{type(e).__name__}-{e.code}")
def test_pickling_round_trips(err: EosError) -> None:
    # Errors cross process boundaries in Spark.
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
    assert back.args == err.args
    assert vars(back) == vars(err)


# --- property ----------------------------------------------------------------------------------

api_keys = st.one_of(st.sampled_from(list(ApiKey)), st.integers(min_value=0, max_value=200))
codes = st.one_of(st.integers(min_value=-1, max_value=130), st.integers(-(2**15), 2**15 - 1))


@given(api=api_keys, code=codes)
def test_any_pair_is_success_or_exactly_one_kind(api: int, code: int) -> None:
    if is_success(api, code):
        with pytest.raises(ValueError):
            error_for(api, code)
        return
    err = error_for(api, code)
    assert sum(isinstance(err, kind) for kind in KINDS) == 1
    assert not isinstance(err, UsageError)
    assert type(err) is classify(api, code)
    assert err.code == code and err.code_name and str(err)
