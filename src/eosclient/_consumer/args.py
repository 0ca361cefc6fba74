"""Argument checks for the consumer's public calls, run before anything is touched.

Each function returns the normalised value or raises a builtin ``TypeError`` (not a Kafka value
at all) or ``ValueError`` (a Kafka value out of range: a negative offset or partition).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from eosclient._args import timeout_of
from eosclient._core.limits import INT32_MAX, INT64_MAX, string_problem
from eosclient._core.types import TopicPartition

__all__ = ["max_records_of", "offset_of", "offsets_of", "partition_of",
           "partitions_of", "timeout_of", "topics_of"]


def partition_of(item: object) -> TopicPartition:
    """A ``TopicPartition`` (or ``(topic, partition)`` pair), checked.

    Raises:
        TypeError: not a (non-empty str, int) pair.
        ValueError: the partition is negative or past int32, or the topic does not fit a
            Kafka STRING (either would fail later, encoding a request on the I/O thread).
    """
    if not (isinstance(item, tuple) and len(item) == 2):
        raise TypeError(f"expected a TopicPartition(topic, partition), got {item!r}")
    topic, partition = item
    _topic(topic)
    if type(partition) is not int:
        raise TypeError(f"a partition must be an int, got {partition!r}")
    if not 0 <= partition <= INT32_MAX:
        raise ValueError(f"a partition must be in 0..2**31-1, got {item!r}")
    return TopicPartition(topic, partition)


def _topic(name: object) -> None:
    if type(name) is not str or not name:
        raise TypeError(f"a topic must be a non-empty str, got {name!r}")
    problem = string_problem(name)
    if problem is not None:
        raise ValueError(f"topic {name[:40]!r}... {problem}")


def partitions_of(partitions: object) -> list[TopicPartition]:
    """An iterable of partitions, checked, duplicates dropped, order kept.

    Raises:
        TypeError, ValueError: as :func:`partition_of`, or not an iterable.
    """
    if isinstance(partitions, str | bytes | tuple) or not isinstance(partitions, Iterable):
        raise TypeError(f"expected an iterable of TopicPartition, got {partitions!r}")
    return list(dict.fromkeys(partition_of(item) for item in partitions))


def topics_of(topics: object) -> list[str]:
    """Topic names to subscribe to (at least one).

    Raises:
        TypeError: not an iterable of non-empty str (a bare str is refused: it would be letters).
        ValueError: empty, or a name does not fit a Kafka STRING.
    """
    if isinstance(topics, str | bytes) or not isinstance(topics, Iterable):
        raise TypeError(f"topics must be an iterable of str, e.g. ['orders'], got {topics!r}")
    names = list(dict.fromkeys(topics))
    for name in names:
        _topic(name)
    if not names:
        raise ValueError("subscribe() needs at least one topic")
    return names


def offset_of(offset: object, where: object) -> int:
    """An offset to seek or commit: an int >= 0.

    Raises:
        TypeError: not an int.
        ValueError: negative (Kafka's -1/-2 sentinels are seek_to_end/seek_to_beginning here),
            or past int64.
    """
    if type(offset) is not int:
        raise TypeError(f"the offset for {where!r} must be an int, got {offset!r}")
    if offset < 0:
        raise ValueError(f"the offset for {where!r} must be >= 0, got {offset} (use "
                         "seek_to_beginning()/seek_to_end() for the ends)")
    if offset > INT64_MAX:
        raise ValueError(f"the offset for {where!r} must be at most 2**63-1, got {offset}")
    return offset


def offsets_of(offsets: object) -> dict[TopicPartition, int]:
    """``{TopicPartition: offset}`` to commit, checked.

    Raises:
        TypeError, ValueError: as :func:`partition_of` and :func:`offset_of`.
    """
    if not isinstance(offsets, Mapping):
        raise TypeError(f"offsets must be a mapping of TopicPartition to int, got {offsets!r}")
    return {partition_of(tp): offset_of(offset, tp) for tp, offset in offsets.items()}


def max_records_of(max_records: Any, default: int) -> int:
    """``max_records`` if given (an int >= 1), else the default (``max.poll.records``).

    Raises:
        TypeError: not an int.
        ValueError: below 1.
    """
    if max_records is None:
        return default
    if type(max_records) is not int:
        raise TypeError(f"max_records must be an int, got {max_records!r}")
    if max_records < 1:
        raise ValueError(f"max_records must be >= 1, got {max_records}")
    return max_records
