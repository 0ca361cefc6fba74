"""EndPrepared, the sans-IO EndTxn of a transaction another process prepared: answers in,
requests out, time passed in."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from eosclient._core import _txn_wire as wire
from eosclient._core.prepared import CheckPrepared, EndPrepared, PreparedTransaction, Step
from eosclient._core.types import TopicPartition
from eosclient.errors import FatalError, FencedError, KafkaConnectionError

PREPARED = PreparedTransaction("sink-w3", 1002, 7)


def found(node_id: int = 1, error_code: int = 0) -> Any:
    return SimpleNamespace(coordinators=None, error_code=error_code, error_message=None,
                           node_id=node_id, host="127.0.0.1", port=9000 + node_id)


def answered(code: int) -> Any:
    return SimpleNamespace(error_code=code)


def closed_by_broker() -> KafkaConnectionError:
    error = KafkaConnectionError("closed")
    error.__cause__ = EOFError()
    return error


def test_find_then_end_with_the_prepared_identity() -> None:
    ending = EndPrepared(PREPARED, commit=True)
    step, find = ending.next_request(0.0) or (None, None)
    assert step is Step.FIND and find.key == "sink-w3"
    assert ending.next_request(0.0) is None  # one request at a time
    ending.on_response(found(), 0.0)
    step, end = ending.next_request(0.0) or (None, None)
    assert step is Step.END
    assert (end.transactional_id, end.producer_id, end.producer_epoch, end.committed) == (
        "sink-w3", 1002, 7, True)
    ending.on_response(answered(0), 0.0)
    assert ending.done and ending.error is None


@pytest.mark.parametrize("code", [51, 16, 15, 14])
def test_a_retriable_answer_looks_the_coordinator_up_again_after_a_backoff(code: int) -> None:
    ending = EndPrepared(PREPARED, commit=False, backoff=0.5)
    ending.next_request(0.0)
    ending.on_response(found(), 0.0)
    ending.next_request(0.0)
    ending.on_response(answered(code), 10.0)
    assert not ending.done and ending.error is not None and ending.error.code == code
    assert ending.next_request(10.1) is None  # backing off
    step, _ = ending.next_request(11.5) or (None, None)
    assert step is Step.FIND
    ending.on_response(found(2), 11.5)
    ending.next_request(11.5)
    ending.on_response(answered(0), 11.6)
    assert ending.done and ending.error is None  # the old reason is not reported


@pytest.mark.parametrize("code", [47, 90])
def test_a_stale_epoch_is_fenced(code: int) -> None:
    ending = EndPrepared(PREPARED, commit=True)
    ending.next_request(0.0)
    ending.on_response(found(), 0.0)
    ending.next_request(0.0)
    ending.on_response(answered(code), 0.0)
    assert ending.done and isinstance(ending.error, FencedError)


def test_a_refusal_is_reported_as_classified() -> None:
    ending = EndPrepared(PREPARED, commit=True)
    ending.next_request(0.0)
    ending.on_response(found(), 0.0)
    ending.next_request(0.0)
    ending.on_response(answered(53), 0.0)  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert ending.done and isinstance(ending.error, FatalError)


def test_closes_in_a_row_on_end_txn_mean_fenced_as_tansu_answers_a_stale_epoch() -> None:
    ending = EndPrepared(PREPARED, commit=True, backoff=0.0)
    now = 0.0
    while not ending.done:
        step, _ = ending.next_request(now) or (None, None)
        if step is Step.FIND:
            ending.on_response(found(), now)
        elif step is Step.END:
            ending.on_failure(closed_by_broker(), now)
        now += 1.0
    assert isinstance(ending.error, FencedError)
    assert ending.attempts == 3


def test_a_timed_out_answer_is_retried_without_counting_as_a_close() -> None:
    ending = EndPrepared(PREPARED, commit=True, backoff=0.0)
    for now in range(10):
        step, _ = ending.next_request(float(now)) or (None, None)
        if step is Step.FIND:
            ending.on_response(found(), float(now))
        elif step is Step.END:
            ending.on_failure(KafkaConnectionError("timed out"), float(now))
    assert not ending.done


def add_partitions_answer(code: int) -> Any:
    result = SimpleNamespace(partition_index=0, partition_error_code=code)
    return SimpleNamespace(results_by_topic_v3_and_below=[
        SimpleNamespace(name="anchor", results_by_partition=[result])])


@pytest.mark.parametrize(("code", "live"), [(0, True), (47, False), (90, False)])
def test_check_asks_add_partitions_under_the_prepared_identity(code: int, live: bool) -> None:
    check = CheckPrepared(PREPARED, TopicPartition("anchor", 0))
    check.next_request(0.0)
    check.on_response(found(), 0.0)
    step, request = check.next_request(0.0) or (None, None)
    assert step is Step.END
    assert (request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch) == ("sink-w3", 1002, 7)
    check.on_response(add_partitions_answer(code), 0.0)
    assert check.done
    assert (check.error is None) == live
    assert live or isinstance(check.error, FencedError)


def test_a_coordinator_known_from_an_earlier_call_skips_the_lookup() -> None:
    node = wire.Node(1, "127.0.0.1", 9001)
    ending = EndPrepared(PREPARED, commit=False, coordinator=node)
    step, end = ending.next_request(0.0) or (None, None)
    assert step is Step.END and end.committed is False
    ending.on_response(answered(16), 0.0)  # NOT_COORDINATOR: it moved, look it up again
    assert ending.coordinator is None
    step, _ = ending.next_request(1.0) or (None, None)
    assert step is Step.FIND
