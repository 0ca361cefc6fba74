"""The KIP-664 hanging-transaction rules, from hand-built answers (no broker)."""

from __future__ import annotations

from eosclient._admin.hanging import find_hanging
from eosclient._admin.types import ProducerState, TransactionDescription
from eosclient._core.types import TopicPartition

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
NOW = 1_000_000


def txn(state: str = "Ongoing", started: int = NOW - 10_000, pid: int = 7,
        partitions: tuple[TopicPartition, ...] = (TP0,)) -> TransactionDescription:
    return TransactionDescription("id", state, pid, 3, 60_000, started, partitions, 1)


def producer(pid: int = 7, start: int = 42) -> ProducerState:
    return ProducerState(pid, 3, 5, NOW - 10_000, 9, start)


def test_open_longer_than_the_bound_is_hanging() -> None:
    (found,) = find_hanging([txn()], {TP0: [producer()]}, now_ms=NOW, max_open_ms=5_000)
    assert (found.partition, found.transactional_id, found.open_ms) == (TP0, "id", 10_000)
    # The partition's producer state supplies what WriteTxnMarkers needs.
    assert (found.start_offset, found.coordinator_epoch, found.producer_epoch) == (42, 9, 3)
    assert "longer than 5 s" in found.reason


def test_within_the_bound_or_not_open_is_not_hanging() -> None:
    assert find_hanging([txn()], {TP0: [producer()]}, now_ms=NOW, max_open_ms=10_000) == []
    for state in ("Empty", "CompleteAbort", "CompleteCommit", "Dead"):
        assert find_hanging([txn(state)], {}, now_ms=NOW, max_open_ms=0) == []
    # No start time (-1): no transaction under way, whatever the state says.
    assert find_hanging([txn(started=-1)], {}, now_ms=NOW, max_open_ms=0) == []


def test_a_producer_open_where_no_coordinator_lists_it_is_hanging() -> None:
    # pid 8 is open in TP1 and no coordinator knows it; pid 7 is open in TP1 but its
    # coordinator lists only TP0; pid 7 in TP0 is covered; pid 9 has no open transaction.
    producers = {TP0: [producer(7)], TP1: [producer(8, 100), producer(7, 50), producer(9, -1)]}
    found = find_hanging([txn()], producers, now_ms=NOW, max_open_ms=60_000)
    assert [(h.partition, h.producer_id, h.start_offset, h.transactional_id) for h in found] == [
        (TP1, 7, 50, None), (TP1, 8, 100, None)]
    assert all("no coordinator" in h.reason for h in found)


def test_a_transaction_both_old_and_unlisted_is_reported_once() -> None:
    found = find_hanging([txn(partitions=())], {TP0: [producer()]}, now_ms=NOW, max_open_ms=0)
    # Rule 1 gives (None, 7) (no partitions listed); rule 2 gives (TP0, 7).
    assert [(h.partition, h.producer_id) for h in found] == [(None, 7), (TP0, 7)]
