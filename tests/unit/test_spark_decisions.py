"""The data source writer's records as offsets: every identity and decision comes back."""

from __future__ import annotations

import pytest

from eosclient._core.prepared import PreparedTransaction
from eosclient.spark._decisions import (
    MAX_TASKS,
    Decision,
    decode_entry,
    encode_entry,
    transactional_id,
)


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
