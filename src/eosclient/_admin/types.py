"""What the admin client's calls return: plain, frozen values (re-exported by ``admin.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eosclient._core.types import TopicPartition

__all__ = [
    "GroupDescription",
    "GroupListing",
    "HangingTransaction",
    "MemberDescription",
    "PartitionInfo",
    "PartitionLag",
    "ProducerState",
    "TopicDescription",
    "TransactionDescription",
    "TransactionListing",
]


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as Metadata describes it."""

    partition: int
    leader: int | None  # None: no leader right now
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic and its partitions, in partition order."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    internal: bool = False


@dataclass(frozen=True, slots=True)
class GroupListing:
    """A consumer group as ListGroups names it."""

    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member of a group and the partitions the group assigned it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A group's committed offset in one partition against its last stable offset.

    Attributes:
        committed: The group's committed offset (read with ``require_stable``).
        last_stable_offset: Where read_committed readers end (the LSO).
        lag: Committed records past the group's offset: ``max(0, LSO - committed)``.
    """

    committed: int
    last_stable_offset: int
    lag: int


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A consumer group: its state, members, and committed offsets with their lag."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    offsets: Mapping[TopicPartition, PartitionLag]

    @property
    def total_lag(self) -> int:
        """The lag summed over every partition with a committed offset."""
        return sum(p.lag for p in self.offsets.values())


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """A transactional id as ListTransactions names it (KIP-664)."""

    transactional_id: str
    producer_id: int
    state: str  # Kafka's spelling: Empty, Ongoing, PrepareCommit, CompleteAbort, ...
    coordinator: int  # the broker that answered


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """A transaction as its coordinator describes it (DescribeTransactions, KIP-664)."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int  # epoch milliseconds; -1: no transaction under way
    partitions: tuple[TopicPartition, ...]
    coordinator: int


@dataclass(frozen=True, slots=True)
class ProducerState:
    """A producer a partition's leader knows (DescribeProducers, KIP-664)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    transaction_start_offset: int  # -1: no transaction open in this partition


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    """A transaction that holds back read_committed readers and may never end by itself.

    Attributes:
        reason: Why it counts as hanging, in words.
        partition: The partition it holds back (None when its coordinator lists no partition).
        producer_id: The producer that opened it.
        producer_epoch: That producer's epoch (-1 if unknown).
        coordinator_epoch: From DescribeProducers (-1 if unknown); WriteTxnMarkers needs it.
        start_offset: The transaction's first offset in ``partition`` (-1 if unknown).
        transactional_id: The id, when the coordinator knows the transaction.
        open_ms: How long it has been open, when known.
    """

    reason: str
    partition: TopicPartition | None
    producer_id: int
    producer_epoch: int = -1
    coordinator_epoch: int = -1
    start_offset: int = -1
    transactional_id: str | None = None
    open_ms: int | None = None
