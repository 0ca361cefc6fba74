"""The transaction core when things go wrong, sans-IO: KIP-360 aborts and epoch bumps, an
EndTxn whose outcome is unknown, fencing and answers for stale identities. The producer
review's findings are in test_txn_recovery.py."""

from __future__ import annotations

import pytest
from _txn_driver import ADD_PARTS, END, FIND, INIT, TP0, TP1, TXN, Driver

from eosclient._core.accumulator import AccumulatorSettings, RecordAccumulator
from eosclient._core.txn import (
    EndOutcome,
    FailUnsent,
    Input,
    ProducerIdentity,
    Recovery,
    SequencesReset,
    State,
)
from eosclient.errors import (
    AbortableError,
    ApiKey,
    EpochBumpRequiredError,
    FatalError,
    FencedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    RequestNotSentError,
    error_for,
)

# -- KIP-360: abort, fail unsent, EndTxn(abort), bump -----------------------------------------


@pytest.mark.parametrize("code", [45, 59, 10])
def test_kip360_abort_fails_unsent_ends_then_bumps(code: int) -> None:
    # kafka-python 3.0.12 bumped at once and drained the failed transaction's queued records
    # into the next transaction under the new epoch (45 OUT_OF_ORDER, 59 UNKNOWN_PRODUCER_ID,
    # 10 MESSAGE_TOO_LARGE)
    driver = Driver().in_txn(TP0)
    core = driver.core
    failed_generation = core.send(TP0)
    driver.produce_error(code)
    assert core.state is State.ABORTABLE_ERROR and core.recovery is Recovery.BUMP_EPOCH
    assert core.identity == ProducerIdentity(4000, 0)  # nothing bumped yet
    assert not core.may_drain(TP0, failed_generation)
    with pytest.raises(EpochBumpRequiredError):
        core.send(TP0)
    driver.batches = True  # one batch still in flight
    done = core.abort(1.0, 30.0)
    assert driver.poll() == []  # KAFKA-14053: no EndTxn while a batch is in flight
    assert driver.events[-1] == FailUnsent(failed_generation, core.error)  # type: ignore[arg-type]
    assert isinstance(core.error, EpochBumpRequiredError) and core.error.code == code
    driver.batches = False
    (end,) = driver.expect(END)
    assert (end.request.committed, end.request.producer_epoch) == (False, 0)
    driver.respond(end)
    assert core.state is State.ABORTING and not done.done
    (bump,) = driver.expect(INIT)
    assert (bump.request.transactional_id, bump.request.producer_id,
            bump.request.producer_epoch) == (TXN, 4000, 0)
    driver.respond(bump)
    assert core.state is State.READY and done.done and done.error is None
    assert core.identity == ProducerIdentity(4000, 1)
    assert driver.poll() == []
    assert driver.events[-1] == SequencesReset(ProducerIdentity(4000, 0), ProducerIdentity(4000, 1))
    core.begin(2.0)
    assert core.send(TP0) == failed_generation + 1
    driver.run(ADD_PARTS)
    assert core.may_drain(TP0, failed_generation + 1)
    assert not core.may_drain(TP0, failed_generation)  # the failed transaction's records never


def test_resends_are_allowed_while_failing_and_aborting_new_batches_are_not() -> None:
    # partition_ready() was False while ABORTING, so a batch due for a resend never drained and
    # EndTxn(abort), which must follow its answer (KAFKA-14053), waited forever.
    driver = Driver().in_txn(TP0)
    core = driver.core
    generation = core.send(TP0)
    assert core.may_resend(TP0) and not core.may_resend(TP1)  # TP1 was never registered
    driver.produce_error(45)  # another partition's sequence broke: the transaction is lost
    assert core.state is State.ABORTABLE_ERROR
    assert core.may_resend(TP0) and not core.may_drain(TP0, generation)
    driver.batches = True  # TP0's batch waits for its resend
    done = core.abort(1.0, 30.0)
    assert core.state is State.ABORTING and driver.poll() == []  # no EndTxn before its answer
    assert core.may_resend(TP0) and not core.may_drain(TP0, generation)
    driver.batches = False  # the resend was answered
    driver.run(END)
    driver.run(INIT)  # the KIP-360 bump
    assert done.done and core.state is State.READY
    assert not core.may_resend(TP0)  # the transaction is over: nothing of it goes out again


def test_nothing_is_resent_after_a_fence() -> None:
    driver = Driver().in_txn(TP0)
    driver.produce_error(90)  # PRODUCER_FENCED
    assert driver.core.state is State.FENCED and not driver.core.may_resend(TP0)


def test_idempotent_resends_only_while_ready() -> None:
    driver = Driver(None)
    driver.core.init(0.0, 30.0)
    assert not driver.core.may_resend(TP0)
    driver.run(INIT)
    assert driver.core.may_resend(TP0)
    driver.produce_error(45)  # re-initialising: the old identity's batches are dropped
    assert driver.core.state is State.INITIALIZING and not driver.core.may_resend(TP0)


def test_the_core_as_drain_gate_keeps_a_failed_transaction_out_of_the_next() -> None:
    # The accumulator used to take a partition-only predicate; a failed transaction's batch was
    # kept out of the next one only because the producer applied FailUnsent before any drain.
    driver = Driver().ready()
    core = driver.core
    acc = RecordAccumulator(AccumulatorSettings(), identity=core.identity)
    core.begin(0.0, partitions=[TP0])
    driver.run(ADD_PARTS)
    failed = core.send(TP0)
    acc.append(TP0, None, b"failed", timestamp_ms=0, now=0.0, generation=failed)
    core.abort(0.0, 30.0)
    driver.events.clear()  # FailUnsent(failed) is deliberately not applied
    driver.run(END)
    core.begin(1.0, partitions=[TP0])  # TP0 may hold aborted records: registered on send
    acc.append(TP0, None, b"next", timestamp_ms=0, now=1.0, generation=core.send(TP0))
    driver.run(ADD_PARTS)
    assert acc.drain(core, 1.0, flush=True) == {}  # the failed batch blocks; it never goes
    acc.fail_generation(failed, AbortableError("aborted"))
    (ready,) = acc.drain(core, 1.0, flush=True).values()
    assert ready.generation == core.generation


@pytest.mark.parametrize("code", [-1, 35, 59])
def test_bump_form_rejected_falls_back_to_plain_init(code: int) -> None:
    # Tansu answers the KIP-360 form with UNKNOWN_SERVER_ERROR (-1); old brokers 35 or 59
    driver = Driver().in_txn(TP0)
    driver.produce_error(45)
    done = driver.core.abort(0.0, 30.0)
    driver.run(END)
    driver.run(INIT, code)
    (plain,) = driver.expect(INIT)
    assert (plain.request.producer_id, plain.request.producer_epoch) == (-1, -1)
    driver.respond(plain)
    assert driver.core.state is State.READY and done.done and done.error is None
    driver.in_txn(TP0).produce_error(59)  # the next bump goes plain at once
    driver.core.abort(0.0, 30.0)
    driver.run(END)
    (again,) = driver.expect(INIT)
    assert again.request.producer_id == -1


def test_plain_init_also_failing_is_fatal() -> None:
    driver = Driver().in_txn(TP0)
    driver.produce_error(45)
    done = driver.core.abort(0.0, 30.0)
    driver.run(END)
    driver.run(INIT, -1)
    driver.run(INIT, -1)
    assert driver.core.state is State.FATAL and isinstance(done.error, FatalError)


def test_end_txn_abort_unknown_producer_goes_straight_to_the_bump() -> None:
    driver = Driver().in_txn(TP0)
    driver.core.abort(0.0, 30.0)
    driver.run(END, 59)  # the coordinator lost the producer id: nothing to end
    assert driver.core.recovery is Recovery.BUMP_EPOCH
    (bump,) = driver.expect(INIT)
    assert bump.request.producer_id == 4000


def test_expired_batch_bumps_and_delays_end_txn_by_the_grace() -> None:
    # KAFKA-14053: a batch whose answer never came may still be appended after the abort marker
    driver = Driver(unknown_outcome_grace_ms=500).in_txn(TP0)
    core = driver.core
    driver.now = 3.0
    core.on_produce_error(KafkaConnectionError("cut"), core.identity, core.generation, 3.0)
    assert core.recovery is Recovery.BUMP_EPOCH
    assert isinstance(core.error, EpochBumpRequiredError)
    assert isinstance(core.error.__cause__, KafkaConnectionError)
    core.abort(3.1, 30.0)
    driver.now = 3.1
    (end,) = driver.expect(END)
    assert end.not_before == pytest.approx(3.5)


def test_plain_abort_keeps_the_epoch() -> None:
    driver = Driver().in_txn(TP0)
    done = driver.core.abort(0.0, 30.0)
    driver.run(END)
    assert driver.core.state is State.READY and driver.core.identity.epoch == 0 and done.done


# -- unknown outcome --------------------------------------------------------------------------


def test_unknown_end_txn_is_resumed_by_a_second_commit() -> None:
    driver = Driver().in_txn(TP0)
    core = driver.core
    first = core.commit(0.0, 1.0)
    (end,) = driver.expect(END)
    driver.now = 0.5
    core.on_request_failed(end.request, 0.5, KafkaConnectionError("connection reset"))
    assert core.state is State.COMMITTING and core.ending is not None
    assert core.ending.outcome is EndOutcome.UNKNOWN and core.ending.committed
    with pytest.raises(IllegalStateError, match="COMMITTING"):
        core.begin(0.5)  # a delayed EndTxn could otherwise land on the next transaction
    with pytest.raises(IllegalStateError, match="only be retried as a commit"):
        core.abort(0.5, 30.0)
    driver.run(FIND)  # the connection dropped: find the coordinator again
    (again,) = driver.expect(END)
    driver.now = 2.0
    driver.poll()
    assert isinstance(first.error, KafkaTimeoutError) and "outcome is unknown" in str(first.error)
    second = core.commit(2.0, 30.0)
    assert not second.done and again.request.committed is True
    driver.respond(again)
    (bump,) = driver.expect(INIT)  # the lost EndTxn may still land: bump before READY
    assert (bump.request.producer_id, bump.request.producer_epoch) == (4000, 0)
    driver.respond(bump)
    assert second.done and second.error is None and core.state is State.READY


def test_an_end_txn_that_never_left_the_client_leaves_no_outcome_unknown() -> None:
    # A connect refused before the EndTxn was written was taken as an answer lost: the
    # outcome became unknown and an epoch bump was sent before the next transaction.
    driver = Driver().in_txn(TP0)
    core = driver.core
    done = core.commit(0.0, 30.0)
    (end,) = driver.expect(END)
    core.on_request_failed(end.request, 0.1, RequestNotSentError(
        "node 1: every address failed (before the request was sent)"))
    assert core.state is State.COMMITTING and core.ending is not None
    assert core.ending.outcome is not EndOutcome.UNKNOWN
    driver.now = 1.0
    driver.run(FIND)  # its connection failed: the coordinator may have moved
    driver.run(END)
    assert done.done and done.error is None and core.state is State.READY
    assert driver.poll() == []  # no bump owed


def test_concurrent_transactions_after_other_failures_is_retried_quickly() -> None:
    # The quick backoff doubled over every earlier failure of the job: a 51 after a few
    # refused connects (a coordinator move) waited 0.64 s instead of ~20 ms.
    driver = Driver().in_txn()
    core = driver.core
    core.add_partitions([TP1])
    for _ in range(5):
        (add,) = driver.expect(ADD_PARTS)
        core.on_request_failed(add.request, driver.now, RequestNotSentError("refused"))
        driver.run(FIND)
        driver.now += 2.0
    (add,) = driver.expect(ADD_PARTS)
    driver.respond(add, 51)
    (again,) = driver.expect(ADD_PARTS)
    assert again.not_before - driver.now == pytest.approx(0.02)


def test_unknown_end_txn_retried_after_backoff_is_sent_at_once_on_resume() -> None:
    driver = Driver().in_txn(TP0)
    driver.core.commit(0.0, 30.0)
    driver.run(END, 51)
    (again,) = driver.expect(END)
    assert again.not_before == pytest.approx(0.1)
    driver.core.on_request_failed(again.request, 0.2)
    driver.run(FIND)
    driver.now = 0.3
    driver.core.commit(0.3, 30.0)
    (third,) = driver.expect(END)
    assert third.not_before <= 0.3


def test_resent_end_txn_also_waits_for_incomplete_batches() -> None:
    # found by the random conversation: a lost EndTxn was re-sent while a batch was reported
    # incomplete
    driver = Driver().in_txn(TP0)
    driver.core.abort(0.0, 30.0)
    (end,) = driver.expect(END)
    driver.core.on_request_failed(end.request, 0.1)
    driver.run(FIND)
    driver.batches = True
    assert driver.poll() == []
    driver.batches = False
    (again,) = driver.expect(END)
    assert again.request.committed is False


def test_init_after_an_unanswered_commit_reinitialises_and_ignores_the_late_answer() -> None:
    driver = Driver().in_txn(TP0)
    core = driver.core
    commit = core.commit(0.0, 1.0)
    (end,) = driver.expect(END)
    driver.now = 1.5
    assert driver.poll() == [] and isinstance(commit.error, KafkaTimeoutError)
    generation = core.generation
    init = core.init(1.5, 30.0)
    assert core.state is State.INITIALIZING
    (reinit,) = driver.expect(INIT)
    assert reinit.request.producer_id == 4000  # the KIP-360 form: never takes the id back
    assert driver.events[-1].generation == generation  # type: ignore[union-attr]
    driver.respond(end, 47)  # the old epoch's EndTxn, answered late: not a fence of this one
    assert core.state is State.INITIALIZING
    driver.respond(reinit)
    assert core.state is State.READY and core.identity.epoch == 1 and init.done


# -- fencing and stale identities -------------------------------------------------------------


@pytest.mark.parametrize("code", [47, 90])
def test_fenced_by_end_txn(code: int) -> None:
    # noida-db answers INVALID_PRODUCER_EPOCH (47) where Kafka answers PRODUCER_FENCED (90)
    driver = Driver().in_txn(TP0)
    core = driver.core
    done = core.commit(0.0, 30.0)
    driver.run(END, code)
    assert core.state is State.FENCED and isinstance(done.error, FencedError)
    assert isinstance(driver.poll(), list) and isinstance(driver.events[-1], FailUnsent)
    for call in (lambda: core.send(TP0), lambda: core.begin(0.0),
                 lambda: core.commit(0.0, 1.0), lambda: core.init(0.0, 1.0)):
        with pytest.raises(FencedError, match=f"\\({code}\\)"):
            call()
    core.close()
    assert core.state is State.FENCED
    driver.produce_error(45)  # broker events are dropped in a terminal state
    assert core.state is State.FENCED


def test_produce_error_for_an_old_identity_is_ignored() -> None:
    # KAFKA-14830: a failure reported for the epoch before a bump moved the new epoch's state
    driver = Driver().in_txn(TP0)
    core = driver.core
    old, old_generation = core.identity, core.generation
    driver.produce_error(59)
    core.abort(0.0, 30.0)
    driver.run(END)
    driver.run(INIT)
    driver.in_txn(TP0)
    core.on_produce_error(error_for(ApiKey.PRODUCE, 45), old, core.generation, 0.0)
    core.on_produce_error(error_for(ApiKey.PRODUCE, 90), core.identity, old_generation, 0.0)
    core.on_batch_expired(old, core.generation, 0.0)
    assert core.state is State.IN_TRANSACTION and core.identity.epoch == 1


def test_answer_for_abandoned_work_is_ignored_and_unknown_requests_rejected() -> None:
    driver = Driver().in_txn(TP0)
    core = driver.core
    core.send(TP1)
    (add,) = driver.expect(ADD_PARTS)
    core.close()
    driver.respond(add, 90)
    assert core.state is State.CLOSED
    with pytest.raises(ValueError, match="not a request in flight"):
        core.on_response(add.request, object(), 0.0)


def test_close_fails_pending_calls_and_unsent_batches() -> None:
    driver = Driver().in_txn(TP0)
    driver.batches = True
    done = driver.core.commit(0.0, 30.0)
    driver.core.close()
    assert isinstance(done.error, IllegalStateError)
    driver.poll()
    assert isinstance(driver.events[-1], FailUnsent)
    with pytest.raises(IllegalStateError, match="CLOSED"):
        driver.core.begin(0.0)


def test_history_is_bounded_and_names_causes() -> None:
    driver = Driver(history_size=4).in_txn(TP0)
    assert len(driver.core.history) == 4
    last = driver.core.history[-1]
    assert (last.input, last.target) == (Input.RECV_REGISTERED, State.IN_TRANSACTION)
    assert "out" in last.cause

