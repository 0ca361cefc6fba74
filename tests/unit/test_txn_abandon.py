"""TransactionCore.abandon: a wait the caller gave up on before its deadline (an asyncio task
cancelled) is a timeout that came early; the same call made again resumes or reports success."""

from __future__ import annotations

import pytest
from _txn_driver import END, TP0, Driver

from eosclient._core.txn import State
from eosclient.errors import IllegalStateError, KafkaTimeoutError


def test_commit_abandoned_in_flight_resumes_the_same_end_txn() -> None:
    driver = Driver().in_txn(TP0)
    first = driver.core.commit(driver.now, driver.now + 30)
    (end,) = driver.expect(END)
    driver.core.abandon(first)
    assert isinstance(first.error, KafkaTimeoutError) and driver.core.state is State.COMMITTING
    with pytest.raises(IllegalStateError):
        driver.core.begin(driver.now)  # no new transaction while the outcome is unknown
    again = driver.core.commit(driver.now, driver.now + 30)
    assert driver.poll() == []  # the EndTxn in flight is the one awaited, not a second one
    driver.respond(end)
    assert again.done and again.error is None and driver.core.state is State.READY


def test_commit_abandoned_then_finished_reports_its_success_to_the_next_call() -> None:
    # without abandon(), the success was lost and the repeated commit raised IllegalStateError
    driver = Driver().in_txn(TP0)
    first = driver.core.commit(driver.now, driver.now + 30)
    driver.core.abandon(first)
    driver.run(END)
    assert driver.core.state is State.READY
    again = driver.core.commit(driver.now, driver.now + 30)
    assert again.done and again.error is None


def test_a_success_done_before_the_cancellation_arrived_is_kept_for_the_next_call() -> None:
    driver = Driver().in_txn(TP0)
    first = driver.core.commit(driver.now, driver.now + 30)
    driver.run(END)
    assert first.done and first.error is None
    driver.core.abandon(first)  # the task was cancelled before it saw the success
    again = driver.core.commit(driver.now, driver.now + 30)
    assert again.done and again.error is None


def test_abandoning_a_failed_call_changes_nothing() -> None:
    driver = Driver().in_txn(TP0)
    first = driver.core.commit(driver.now, driver.now + 30)
    driver.run(END, 90)  # PRODUCER_FENCED
    driver.core.abandon(first)
    assert driver.core.state is State.FENCED and first.error is not None

