"""Which transactions are hanging, from answers already read (KIP-664). Sans-IO.

A transaction is *hanging* when nothing will end it and it holds back every read_committed
reader of its partitions (the LSO stays at its first offset). Two ways to find one, as Kafka's
``kafka-transactions.sh find-hanging`` does:

1. **Open too long**: its coordinator describes it as open (Ongoing, PrepareCommit,
   PrepareAbort, PrepareEpochFence) for longer than a bound. On Kafka the coordinator aborts a
   transaction past ``transaction.timeout.ms``; neither noida-db nor Tansu does, so there a
   crashed producer's transaction is open for ever.
2. **Unknown to its coordinator**: a partition's leader has a producer with a transaction open
   (DescribeProducers' ``current_txn_start_offset`` >= 0) that no coordinator lists as open on
   that partition: a marker was lost, and only WriteTxnMarkers (the leader) can end it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from eosclient._admin.types import HangingTransaction, ProducerState, TransactionDescription
from eosclient._core.types import TopicPartition

__all__ = ["OPEN_STATES", "find_hanging"]

OPEN_STATES: Final = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


def find_hanging(descriptions: Iterable[TransactionDescription],
                 producers: Mapping[TopicPartition, Sequence[ProducerState]], *,
                 now_ms: int, max_open_ms: int) -> list[HangingTransaction]:
    """The hanging transactions, by partition (then producer id).

    Args:
        descriptions: Every transaction the coordinators describe (any state).
        producers: The active producers of the partitions looked at (may be empty: then only
            rule 1 applies).
        now_ms: The current time, epoch milliseconds.
        max_open_ms: Rule 1's bound.
    """
    open_txns = [d for d in descriptions if d.state in OPEN_STATES]
    found: dict[tuple[TopicPartition | None, int], HangingTransaction] = {}
    for d in open_txns:
        age = now_ms - d.start_time_ms if d.start_time_ms >= 0 else None
        if age is None or age <= max_open_ms:
            continue
        reason = f"open for {age / 1000:.1f} s, longer than {max_open_ms / 1000:g} s"
        for tp in d.partitions or (None,):
            start = _start_offset(producers.get(tp, ()) if tp else (), d.producer_id)
            found[(tp, d.producer_id)] = HangingTransaction(
                reason, tp, d.producer_id, d.producer_epoch, start[1], start[0],
                d.transactional_id, age)
    covered = {(tp, d.producer_id) for d in open_txns for tp in d.partitions}
    for tp, states in producers.items():
        for state in states:
            key = (tp, state.producer_id)
            if state.transaction_start_offset < 0 or key in covered or key in found:
                continue
            found[key] = HangingTransaction(
                "open in the partition, but no coordinator lists it as open there", tp,
                state.producer_id, state.producer_epoch, state.coordinator_epoch,
                state.transaction_start_offset)
    return sorted(found.values(), key=lambda h: (h.partition or TopicPartition("", -1),
                                                 h.producer_id))


def _start_offset(states: Sequence[ProducerState], producer_id: int) -> tuple[int, int]:
    """(first offset, coordinator epoch) of ``producer_id``'s open transaction, or (-1, -1)."""
    for state in states:
        if state.producer_id == producer_id and state.transaction_start_offset >= 0:
            return state.transaction_start_offset, state.coordinator_epoch
    return -1, -1
