"""The data source writer's records as offsets: every identity and decision comes back."""

from __future__ import annotations

import pytest

from eosclient._core.prepared import PreparedTransaction
from eosclient.spark._decisions import (
    MAX_TASKS,
    Decision,
    decode_entry,
    encode_entry,
    gate_id,
    transactional_id,
)
from eosclient.spark._driver import TaskCommit, _stale_gates
from eosclient.spark._gate import Gate


@pytest.mark.parametrize(("producer_id", "epoch"), [(0, 0), (1002, 7), (2**46, 32767)])
def test_an_identity_round_trips_through_one_offset(producer_id: int, epoch: int) -> None:
    prepared = PreparedTransaction(transactional_id("s", 3), producer_id, epoch)
    value = encode_entry(prepared)
    assert 0 < value < 2**63  # a positive int64: an offset any broker keeps
    assert decode_entry("s", 3, value) == prepared


def test_no_transaction_is_zero_and_an_absent_entry_none() -> None:
    assert encode_entry(None) == 0
    assert decode_entry("s", 0, 0) is None and decode_entry("s", 0, None) is None


def test_the_decision_names_its_batch_and_task_count() -> None:
    decision = Decision(41, (None,) * 5)
    value = decision.encode()
    assert (value >> 20) - 1 == 41 and value & (MAX_TASKS - 1) == 5


def test_the_gate_entry_names_the_gate_id() -> None:
    prepared = PreparedTransaction(gate_id("s"), 1002, 7)
    assert decode_entry("s", None, encode_entry(prepared)) == prepared


def test_a_commit_refuses_tasks_planned_behind_another_gate() -> None:
    gate = Gate(PreparedTransaction(gate_id("s"), 1, 0), ())
    other = PreparedTransaction(gate_id("s"), 1, 1)
    task = PreparedTransaction(transactional_id("s", 0), 5, 0)
    assert _stale_gates([TaskCommit(0, task, 1, gate=gate.prepared)], gate) == 0
    assert _stale_gates([TaskCommit(0, task, 1, gate=other), None], gate) == 1
    assert _stale_gates([TaskCommit(0, task, 1, gate=other)], None) == 1  # gate off since
    # a task that wrote nothing has nothing behind any gate
    assert _stale_gates([TaskCommit(0, None, 0, gate=other)], gate) == 0
