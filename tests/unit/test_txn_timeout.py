"""transaction.timeout.ms enforced by the client (issue 11, item 6), sans-IO: TIMER_TXN_EXPIRED
in every state that has it, the abort the client sends itself, and what the application sees.

Neither broker here aborts a timed-out transaction, so an open transaction of a hung application
held the LSO of every partition it wrote for ever. Each test is a scripted conversation with the
fake coordinator of ``_txn_driver``, time passed in.
"""

from __future__ import annotations

import pytest
from _txn_driver import ADD_OFFS, ADD_PARTS, END, FIND, IN0, INIT, OFFSETS, TP0, TP1, Driver

from eosclient._core.txn import (
    EndOutcome,
    FailUnsent,
    Input,
    ProducerIdentity,
    State,
    TransactionExpired,
)
from eosclient.errors import AbortableError, EpochBumpRequiredError, FencedError, IllegalStateError

TIMEOUT_MS = 10_000


def driver() -> Driver:
    return Driver(transaction_timeout_ms=TIMEOUT_MS)


def expired(d: Driver) -> list[TransactionExpired]:
    return [e for e in d.events if isinstance(e, TransactionExpired)]


def last_input(d: Driver) -> Input:
    return d.core.history[-1].input


def test_the_clock_starts_at_the_first_registration_not_at_begin() -> None:
    # A transaction that stayed open past transaction.timeout.ms was never ended by anyone.
    d = driver().ready()
    d.now = 100.0
    d.core.begin(d.now)  # nothing registered: the coordinator knows of no transaction yet
    assert d.core.next_timer() is None
    d.now = 200.0
    d.core.send(TP0)
    d.run(ADD_PARTS)
    assert d.core.next_timer() == 210.0
    d.now = 209.9
    assert d.poll() == [] and d.core.state is State.IN_TRANSACTION


def test_in_transaction_expiry_aborts_at_once_and_the_next_call_names_the_timeout() -> None:
    # A hung application never called abort, so the LSO never moved on.
    d = driver().in_txn(TP0)
    d.now = 10.0
    (end,) = d.expect(END)  # the I/O thread's own EndTxn(abort), without any application call
    assert end.request.committed is False
    assert d.core.state is State.ABORTABLE_ERROR
    assert last_input(d) is Input.TIMER_TXN_EXPIRED
    (notice,) = expired(d)
    assert "transaction.timeout.ms (10000 ms)" in notice.message
    assert any(isinstance(e, FailUnsent) for e in d.events)  # queued records fail, never sent
    with pytest.raises(AbortableError, match=r"transaction\.timeout\.ms"):
        d.core.send(TP0)
    with pytest.raises(AbortableError, match=r"transaction\.timeout\.ms"):
        d.core.commit(d.now, d.now + 30)
    d.respond(end)
    assert d.core.state is State.ABORTABLE_ERROR  # aborted at the coordinator, not yet told
    assert last_input(d) is Input.RECV_END_TXN_OK
    done = d.core.abort(d.now, d.now + 30)
    assert d.poll() == []  # nothing left to ask: the abort is acknowledged locally
    assert done.done and done.error is None and d.core.state is State.READY
    d.core.begin(d.now)  # and the producer goes on, same identity
    assert d.core.identity == ProducerIdentity(4000, 0)


def test_expiry_waits_for_batches_in_flight_before_its_end_txn() -> None:
    # KAFKA-14053: an abort marker written before a batch in flight lets the batch land after it.
    d = driver().in_txn(TP0)
    d.batches = True
    d.now = 10.0
    assert d.poll() == [] and d.core.state is State.ABORTABLE_ERROR
    assert d.core.may_resend(TP0) and not d.core.may_drain(TP0, d.core.generation)
    d.batches = False
    d.run(END)
    assert d.core.state is State.ABORTABLE_ERROR


def test_application_abort_while_the_clients_abort_is_in_flight_waits_for_it() -> None:
    # abort_transaction() during the client's own EndTxn must not send a second one.
    d = driver().in_txn(TP0)
    d.now = 10.0
    (end,) = d.expect(END)
    done = d.core.abort(d.now, d.now + 30)
    assert d.core.state is State.ABORTING and d.poll() == []
    d.respond(end)
    assert done.done and done.error is None and d.core.state is State.READY


def test_committing_expiry_before_end_txn_fails_the_commit_and_aborts() -> None:
    # A commit stuck behind its batches past the timeout would have been aborted by a broker.
    d = driver().in_txn(TP0)
    d.batches = True
    commit = d.core.commit(d.now, d.now + 60)
    assert d.poll() == []  # EndTxn(commit) waits for the batches
    d.now = 10.0
    d.poll()
    assert d.core.state is State.ABORTABLE_ERROR and last_input(d) is Input.TIMER_TXN_EXPIRED
    assert commit.done and isinstance(commit.error, AbortableError)
    assert "transaction.timeout.ms" in str(commit.error)
    d.batches = False
    (end,) = d.expect(END)
    assert end.request.committed is False


def test_committing_expiry_after_end_txn_was_sent_does_nothing() -> None:
    # An unconfirmed commit may only be retried as a commit: an abort could contradict it.
    d = driver().in_txn(TP0)
    commit = d.core.commit(d.now, d.now + 60)
    (end,) = d.expect(END)
    assert d.core.ending is not None and d.core.ending.outcome is EndOutcome.PENDING
    d.now = 10.0
    assert d.poll() == [] and d.core.state is State.COMMITTING and not expired(d)
    assert d.core.next_timer() == 60.0  # only the commit's own deadline is left
    d.respond(end)
    assert commit.done and commit.error is None and d.core.state is State.READY


def test_abortable_error_left_unaborted_is_aborted_by_the_client_with_its_bump() -> None:
    # A failed transaction whose application never called abort also held the LSO for ever.
    d = driver().in_txn(TP0)
    d.produce_error(45)  # KIP-360: the abort must bump the epoch
    assert d.core.state is State.ABORTABLE_ERROR and d.poll() == []
    d.now = 10.0
    (end,) = d.expect(END)
    assert last_input(d) is Input.TIMER_TXN_EXPIRED and len(expired(d)) == 1
    with pytest.raises(EpochBumpRequiredError):  # the original cause, not the timeout
        d.core.send(TP0)
    d.respond(end)
    assert last_input(d) is Input.RECV_END_TXN_BUMP and d.core.state is State.ABORTABLE_ERROR
    d.run(INIT)
    assert last_input(d) is Input.RECV_INIT_OK and d.core.state is State.ABORTABLE_ERROR
    assert d.core.identity == ProducerIdentity(4000, 1)
    done = d.core.abort(d.now, d.now + 30)
    assert d.poll() == [] and done.done and done.error is None
    assert d.core.state is State.READY and d.core.identity == ProducerIdentity(4000, 1)


def test_application_abort_during_the_clients_bump_waits_for_it() -> None:
    # abort_transaction() during the bump must not send EndTxn again, nor a second bump (FENCED).
    d = driver().in_txn(TP0)
    d.produce_error(45)
    d.now = 10.0
    d.run(END)
    (init,) = d.expect(INIT)
    done = d.core.abort(d.now, d.now + 30)
    assert d.poll() == []
    d.respond(init)
    assert done.done and done.error is None and d.core.state is State.READY


def test_lost_end_txn_of_the_clients_abort_is_resent() -> None:
    # The client's own EndTxn(abort) loses its answer: the same abort is resent, then a bump.
    d = driver().in_txn(TP0)
    d.now = 10.0
    (end,) = d.expect(END)
    d.core.on_request_failed(end.request, d.now)
    assert last_input(d) is Input.RECV_END_TXN_UNKNOWN and d.core.state is State.ABORTABLE_ERROR
    d.now = 11.0
    d.run(FIND)
    d.run(END)
    d.run(INIT)  # an answer was lost: bump before the next transaction (Stragglers)
    assert d.core.state is State.ABORTABLE_ERROR and d.core.identity.epoch == 1
    d.core.abort(d.now, d.now + 30)
    d.poll()
    assert d.core.state is State.READY


def test_fenced_while_the_client_aborts_is_fenced() -> None:
    # The client's own abort must never hide a fence.
    d = driver().in_txn(TP0)
    d.now = 10.0
    d.run(END, 90)
    assert d.core.state is State.FENCED
    with pytest.raises(FencedError):
        d.core.abort(d.now, d.now + 30)


def test_offsets_only_transaction_expires_too() -> None:
    # A transaction holding only consumer offsets holds the group's offsets as much.
    d = driver().ready()
    d.core.begin(d.now, group_id="copier")
    d.core.send_offsets({IN0: 3}, "copier", d.now, d.now + 30)
    for send in d.expect(ADD_OFFS, FIND):  # the group coordinator, looked up meanwhile
        d.respond(send)
    d.run(OFFSETS)
    d.now = 10.0
    d.expect(END)
    assert d.core.state is State.ABORTABLE_ERROR


@pytest.mark.parametrize("state", [State.READY, State.ABORTING])
def test_the_timer_is_dropped_where_it_has_no_edge(state: State) -> None:
    # A stale deadline must not fail a producer that already ended the transaction.
    d = driver().in_txn(TP0, TP1)
    if state is State.ABORTING:
        d.batches = True
        d.core.abort(d.now, d.now + 60)
    else:
        d.core.commit(d.now, d.now + 60)
        d.run(END)
    d.now = 10.0
    d.poll()
    assert d.core.state is state and not expired(d)
    assert Input.TIMER_TXN_EXPIRED not in {t.input for t in d.core.history}


def test_the_next_transaction_gets_a_fresh_clock() -> None:
    # A deadline left over from the last transaction would expire the next one early.
    d = driver().in_txn(TP0)
    d.now = 9.0
    d.core.commit(d.now, d.now + 30)
    d.run(END)
    d.core.begin(d.now)
    d.core.send(TP0)
    d.run(ADD_PARTS)
    d.now = 10.0
    d.poll()
    assert d.core.state is State.IN_TRANSACTION and d.core.next_timer() == 19.0


def test_idempotent_producer_has_no_transaction_clock() -> None:
    # No transactional.id: nothing to expire, and the table refuses transactional calls.
    d = Driver(None, transaction_timeout_ms=TIMEOUT_MS).ready()
    d.now = 1_000.0
    d.poll()
    assert d.core.state is State.READY and d.core.next_timer() is None
    with pytest.raises(IllegalStateError):
        d.core.begin(d.now)


@pytest.mark.parametrize("code", [47, 90])
def test_a_refused_epoch_of_the_clients_own_abort_is_fenced_without_a_kip588_probe(
        code: int) -> None:
    # Guard: a KIP-588 probe here (InitProducerId, old epoch) makes noida-db fence the successor.
    d = driver().in_txn(TP0)
    d.now = 10.0
    d.run(END, code)  # the client's own EndTxn(abort), refused: the epoch moved on
    assert d.core.state is State.FENCED and last_input(d) is Input.RECV_FENCED
    assert d.poll() == []  # no InitProducerId in either form: the probe, or the plain fallback


@pytest.mark.parametrize("code", [47, 90])
def test_a_refusal_answered_after_the_deadline_is_fenced_without_a_kip588_probe(
        code: int) -> None:
    # Guard: the answer came after transaction.timeout.ms; still no probe (see txn.py, KIP-588).
    d = driver().in_txn(TP0)
    d.core.send(TP1)
    (add,) = d.expect(ADD_PARTS)
    d.now = 10.0
    assert d.poll() == [] and d.core.state is State.ABORTABLE_ERROR  # EndTxn waits for it
    d.respond(add, code)
    assert d.core.state is State.FENCED
    assert d.poll() == []
    with pytest.raises(FencedError):
        d.core.abort(d.now, d.now + 30)
