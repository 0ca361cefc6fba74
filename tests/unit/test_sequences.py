"""The sequence tracker, sans-IO: tickets out, Produce error codes in, verdicts read back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eosclient._core.sequences import (
    MAX_IN_FLIGHT,
    SEQUENCE_MODULUS,
    Acked,
    Failed,
    Ignored,
    Retry,
    SendTicket,
    SequenceTracker,
    advance_sequence,
)
from eosclient._core.types import NO_IDENTITY, ProducerIdentity, TopicPartition
from eosclient.errors import (
    ConfigError,
    EpochBumpRequiredError,
    FencedError,
    IllegalStateError,
)

ID = ProducerIdentity(4000, 0)
BUMPED = ProducerIdentity(4000, 1)
TP = TopicPartition("out", 0)
TP1 = TopicPartition("out", 1)
NOT_LEADER = 6
NETWORK_EXCEPTION = 13
OUT_OF_ORDER = 45
DUPLICATE = 46
UNKNOWN_PRODUCER_ID = 59
PRODUCER_FENCED = 90
FAR = 1e9  # a deadline that never passes


def tracker(**kwargs: int) -> SequenceTracker[str]:
    return SequenceTracker(ID, **kwargs)


def send(seq: SequenceTracker[str], name: str, count: int = 1, tp: TopicPartition = TP,
         deadline: float = FAR) -> SendTicket:
    return seq.assign(tp, count, name, deadline=deadline)


# -- numbering -------------------------------------------------------------------------------


def test_batches_take_consecutive_sequences_per_partition() -> None:
    seq = tracker()
    a, b, other = send(seq, "a", 3), send(seq, "b", 2), send(seq, "c", 4, tp=TP1)
    assert (a.base_sequence, a.last_sequence) == (0, 2)
    assert (b.base_sequence, b.last_sequence) == (3, 4)
    assert other.base_sequence == 0  # partitions are independent
    assert (seq.next_sequence(TP), seq.next_sequence(TP1)) == (5, 4)
    assert a.identity == ID and a.attempt == 0


def test_sequence_wraps_to_zero_after_int32_max() -> None:
    seq = tracker()
    seq.on_response(send(seq, "fill", SEQUENCE_MODULUS - 3), 0)
    wrapping = send(seq, "wrap", 5)
    assert wrapping.base_sequence == 2**31 - 3
    assert wrapping.last_sequence == 1  # 2**31-3, -2, -1, then 0, 1 as Kafka does
    assert send(seq, "after").base_sequence == 2


@given(st.lists(st.integers(min_value=1, max_value=2**30), min_size=1, max_size=20))
def test_sequences_are_contiguous_modulo_2_pow_31(counts: list[int]) -> None:
    seq = tracker()
    expected = 0
    for count in counts:
        ticket = send(seq, "x", count)
        assert ticket.base_sequence == expected
        expected = advance_sequence(expected, count)
        assert seq.on_response(ticket, 0) == Acked("x")
    assert seq.next_sequence(TP) == expected < SEQUENCE_MODULUS


def test_nothing_is_sent_before_an_identity_is_known() -> None:
    seq: SequenceTracker[str] = SequenceTracker(NO_IDENTITY)
    assert not seq.can_send(TP)
    with pytest.raises(IllegalStateError):
        send(seq, "a")


def test_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        send(tracker(), "a", 0)


# -- in flight -------------------------------------------------------------------------------


def test_at_most_five_batches_in_flight_per_partition() -> None:
    seq = tracker()
    tickets = [send(seq, f"b{i}") for i in range(MAX_IN_FLIGHT)]
    assert not seq.can_send(TP) and seq.can_send(TP1)
    with pytest.raises(IllegalStateError):
        send(seq, "sixth")
    assert seq.next_sequence(TP) == 5  # the refused assign changed nothing
    seq.on_response(tickets[0], 0)
    assert seq.can_send(TP) and seq.in_flight(TP) == 4


@pytest.mark.parametrize("bad", [0, 6])
def test_max_in_flight_is_one_to_five(bad: int) -> None:
    with pytest.raises(ConfigError) as info:
        tracker(max_in_flight=bad)
    assert info.value.key == "max.in.flight.requests.per.connection"


def test_max_in_flight_can_be_lower() -> None:
    seq = tracker(max_in_flight=1)
    send(seq, "a")
    assert not seq.can_send(TP)


# -- answers ---------------------------------------------------------------------------------


def test_success_settles_the_batch() -> None:
    seq = tracker()
    assert seq.on_response(send(seq, "a"), 0) == Acked("a")
    assert seq.in_flight() == 0


def test_duplicate_sequence_number_is_success() -> None:
    # 46: the broker already wrote this batch (a resend after a lost answer); not an error.
    seq = tracker()
    assert seq.on_response(send(seq, "a"), DUPLICATE) == Acked("a")
    assert seq.broken(TP) is None


def test_retriable_error_resends_it_and_all_later_in_order_with_original_sequences() -> None:
    seq = tracker()
    t0, t1, t2 = send(seq, "a", 2), send(seq, "b", 3), send(seq, "c", 1)
    assert seq.on_response(t1, NOT_LEADER) == Retry(pending=2)
    assert not seq.can_send(TP)  # resends go before any new batch
    assert seq.partitions_with_resends() == [TP]
    first = seq.take_resend(TP)
    second = seq.take_resend(TP)
    assert seq.take_resend(TP) is None
    assert first is not None and second is not None
    assert first == ("b", t1._replace(attempt=1))  # same sequences, never renumbered
    assert second == ("c", t2._replace(attempt=1))
    assert seq.can_send(TP)
    assert send(seq, "d").base_sequence == 6  # new batches continue after the resent ones
    assert seq.on_response(t0, 0) == Acked("a")


def test_error_from_a_superseded_attempt_is_ignored() -> None:
    # The first attempt of a resent batch may still answer (another connection); its 45 must
    # not count as a real gap once the batch is the oldest in flight.
    seq = tracker()
    t0, t1 = send(seq, "a"), send(seq, "b")
    seq.on_response(t0, NOT_LEADER)
    seq.take_resend(TP)
    seq.take_resend(TP)
    assert seq.on_response(t0._replace(attempt=1), 0) == Acked("a")
    assert isinstance(seq.on_response(t1, OUT_OF_ORDER), Ignored)
    assert seq.broken(TP) is None
    assert seq.on_response(t1._replace(attempt=1), 0) == Acked("b")


def test_success_from_any_attempt_settles_and_the_other_answer_is_ignored() -> None:
    seq = tracker()
    ticket = send(seq, "a")
    seq.on_response(ticket, NETWORK_EXCEPTION)
    seq.take_resend(TP)
    assert seq.on_response(ticket, 0) == Acked("a")
    assert isinstance(seq.on_response(ticket._replace(attempt=1), DUPLICATE), Ignored)


@pytest.mark.parametrize("code", [OUT_OF_ORDER, UNKNOWN_PRODUCER_ID, 10])
def test_sequence_breaking_errors_require_an_epoch_bump(code: int) -> None:
    seq = tracker()
    ticket = send(seq, "a")
    outcome = seq.on_response(ticket, code)
    assert isinstance(outcome, Failed)
    assert isinstance(outcome.error, EpochBumpRequiredError)
    assert outcome.error.code == code and outcome.payloads == ("a",)
    assert seq.broken(TP) is outcome.error
    assert not seq.can_send(TP) and seq.can_send(TP1)  # the tracker does not bump itself
    assert seq.identity == ID


def test_out_of_order_behind_an_unsettled_batch_is_retried() -> None:
    # 45 for a batch that is not the oldest in flight follows from the earlier batch's failure
    # (Java's canRetry); bumping there would abort a transaction that a resend saves.
    seq = tracker()
    t0, t1 = send(seq, "a"), send(seq, "b")
    assert seq.on_response(t0, NOT_LEADER) == Retry(pending=2)
    assert isinstance(seq.on_response(t1, OUT_OF_ORDER), Retry)
    assert seq.broken(TP) is None


def test_a_break_drops_the_resends_waiting_on_that_partition() -> None:
    seq = tracker()
    t0, _ = send(seq, "a"), send(seq, "b")
    send(seq, "c", tp=TP1)
    seq.on_response(t0, NOT_LEADER)
    seq.take_resend(TP)  # "a" resent; "b" still waits
    outcome = seq.on_response(t0._replace(attempt=1), UNKNOWN_PRODUCER_ID)
    assert isinstance(outcome, Failed) and outcome.payloads == ("a", "b")
    assert seq.take_resend(TP) is None and seq.in_flight(TP) == 0
    assert seq.in_flight(TP1) == 1


def test_errors_after_a_break_report_the_bump_and_fencing_stays_fencing() -> None:
    seq = tracker()
    t0, t1, t2 = send(seq, "a"), send(seq, "b"), send(seq, "c")
    seq.on_response(t0, OUT_OF_ORDER)
    late = seq.on_response(t1, NOT_LEADER)  # retriable, but the partition cannot recover
    assert isinstance(late, Failed) and isinstance(late.error, EpochBumpRequiredError)
    assert late.error.__cause__ is not None and late.error.code == NOT_LEADER
    fenced = seq.on_response(t2, PRODUCER_FENCED)
    assert isinstance(fenced, Failed) and isinstance(fenced.error, FencedError)


def test_success_after_a_break_still_settles() -> None:
    seq = tracker()
    t0, t1 = send(seq, "a"), send(seq, "b")
    seq.on_response(t1, UNKNOWN_PRODUCER_ID)
    assert seq.on_response(t0, 0) == Acked("a")


def test_a_batch_expired_in_flight_is_unknown_outcome_and_requires_a_bump() -> None:
    seq = tracker()
    send(seq, "old", deadline=10.0)
    send(seq, "young", deadline=50.0)
    assert seq.expire(now=9.9) == []
    [(payload, error)] = seq.expire(now=10.0)
    assert payload == "old" and isinstance(error, EpochBumpRequiredError)
    assert "unknown" in str(error)
    assert seq.broken(TP) is error and seq.in_flight(TP) == 1


# -- identity --------------------------------------------------------------------------------


def test_reset_restarts_every_partition_at_zero_and_drops_the_old_identity() -> None:
    seq = tracker()
    old = send(seq, "a", 7)
    send(seq, "b", 2, tp=TP1)
    seq.on_response(old, OUT_OF_ORDER)
    assert seq.reset(BUMPED) == ("b",)  # still in flight: the caller fails it
    assert seq.identity == BUMPED and seq.in_flight() == 0
    assert seq.broken(TP) is None and seq.can_send(TP)
    fresh = send(seq, "c")
    assert (fresh.identity, fresh.base_sequence) == (BUMPED, 0)
    assert send(seq, "d", tp=TP1).base_sequence == 0


def test_response_for_an_old_identity_is_ignored() -> None:
    # franz-go's rule: failures reported for an old epoch must not break the new one.
    seq = tracker()
    old = send(seq, "a")
    seq.reset(BUMPED)
    fresh = send(seq, "b")
    assert old.base_sequence == fresh.base_sequence == 0
    assert isinstance(seq.on_response(old, OUT_OF_ORDER), Ignored)
    assert isinstance(seq.on_response(old, 0), Ignored)
    assert seq.broken(TP) is None and seq.in_flight(TP) == 1


def test_reset_to_the_same_identity_is_refused() -> None:
    seq = tracker()
    send(seq, "a")
    with pytest.raises(ValueError, match="same producer identity"):
        seq.reset(ID)
    assert seq.in_flight() == 1
