"""Argument checks for the producer's public calls, run before anything is touched.

Each function raises a :class:`~eosclient.errors.UsageError` (or a builtin ``TypeError`` /
``ValueError`` for shapes that are plainly not Kafka values) and returns the normalised value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from eosclient._args import timeout_of
from eosclient._core.limits import INT32_MAX, INT64_MAX, string_problem
from eosclient._core.txn import GroupMetadata
from eosclient._core.types import TopicPartition
from eosclient.errors import (
    InvalidGroupIdError,
    RecordTypeError,
    UnknownPartitionError,
)
from eosclient.group_metadata import ConsumerGroupMetadata

__all__ = [
    "group_id_of",
    "group_of",
    "offsets_of",
    "partition_of",
    "partitions_of",
    "timeout_of",
    "topic_of",
]


def topic_of(topic: object) -> str:
    """``topic`` if it is a non-empty str that fits a Kafka STRING.

    Raises:
        RecordTypeError: it is not.
    """
    if type(topic) is not str or not topic:
        raise RecordTypeError(f"topic must be a non-empty str, got {topic!r}")
    problem = string_problem(topic)
    if problem is not None:
        raise RecordTypeError(f"topic {topic[:40]!r}... {problem}")
    return topic


def partition_of(partition: object) -> int | None:
    """``partition`` if it is None or an int in ``0..2**31 - 1`` (Kafka's int32).

    Raises:
        RecordTypeError: not an int (bool refused).
        UnknownPartitionError: negative, or past int32 (no topic has it; as a declared
            partition it would go into AddPartitionsToTxn and fail there, on the I/O thread).
    """
    if partition is None:
        return None
    if type(partition) is not int:
        raise RecordTypeError(f"partition must be an int or None, got {partition!r}")
    if not 0 <= partition <= INT32_MAX:
        raise UnknownPartitionError(f"partition must be in 0..2**31-1, got {partition}")
    return partition


def _tp(item: object) -> TopicPartition:
    if not (isinstance(item, tuple) and len(item) == 2):
        raise TypeError(f"expected a TopicPartition (topic, partition), got {item!r}")
    topic, partition = item
    number = partition_of(partition)
    if number is None:
        raise TypeError(f"a TopicPartition needs a partition number, got {item!r}")
    return TopicPartition(topic_of(topic), number)


def partitions_of(partitions: Iterable[object] | None) -> list[TopicPartition] | None:
    """The partitions to pre-register, as TopicPartitions (None: register lazily).

    Raises:
        TypeError: not an iterable of (topic, partition) pairs.
    """
    if partitions is None:
        return None
    if isinstance(partitions, str | bytes) or not isinstance(partitions, Iterable):
        raise TypeError(f"partitions must be an iterable of TopicPartition, got {partitions!r}")
    return [_tp(item) for item in partitions]


def offsets_of(offsets: object) -> dict[TopicPartition, int]:
    """``{TopicPartition: next offset to read}``, checked.

    Raises:
        TypeError: not a mapping of (topic, partition) to int.
        ValueError: an offset is negative or past int64.
    """
    if not isinstance(offsets, Mapping):
        raise TypeError(f"offsets must be a mapping of TopicPartition to int, got {offsets!r}")
    checked: dict[TopicPartition, int] = {}
    for key, offset in offsets.items():
        if type(offset) is not int:
            raise TypeError(f"the offset of {key!r} must be an int, got {offset!r}")
        if not 0 <= offset <= INT64_MAX:
            raise ValueError(f"the offset of {key!r} must be in 0..2**63-1, got {offset}")
        checked[_tp(key)] = offset
    return checked


def group_of(group: object) -> GroupMetadata:
    """A group id or :class:`ConsumerGroupMetadata` as the core's group metadata.

    Raises:
        InvalidGroupIdError: an empty group id, or neither a str nor a ConsumerGroupMetadata,
            or a group id that does not fit a Kafka STRING.
    """
    if isinstance(group, ConsumerGroupMetadata):  # its fields were checked when it was made
        return GroupMetadata(group.group_id, group.generation_id, group.member_id,
                             group.group_instance_id)
    if isinstance(group, str) and group:
        return GroupMetadata(_fits(group))
    raise InvalidGroupIdError(
        f"expected a group id (non-empty str) or a ConsumerGroupMetadata, got {group!r}")


def group_id_of(group_id: object) -> str | None:
    """A group id to pre-register (None: none).

    Raises:
        InvalidGroupIdError: not a non-empty str that fits a Kafka STRING.
    """
    if group_id is None:
        return None
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupIdError(f"group_id must be a non-empty str, got {group_id!r}")
    return _fits(group_id)


def _fits(group_id: str) -> str:
    problem = string_problem(group_id)
    if problem is not None:
        raise InvalidGroupIdError(f"group id {group_id[:40]!r}... {problem}")
    return group_id
