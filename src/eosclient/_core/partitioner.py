"""Which partition a record goes to: murmur2 for keys (like the Java client), sticky otherwise.

A keyed record must land where every other Kafka client puts the same key, or a topic written by
several clients loses per-key order. The Java client computes
``toPositive(murmur2(keyBytes)) % numPartitions``; :func:`partition_for` does exactly that, with
kafka-python's ``murmur2`` (checked against Kafka's ``UtilsTest.testMurmur2`` vectors in the
tests).

A keyless record goes to the topic's *sticky* partition (KIP-480): all keyless records stick to
one partition until its batch is full, then move on, so batches fill up instead of spreading one
record per partition. :class:`StickyPartitions` keeps that choice; the accumulator tells it
when a batch filled. It moves round-robin from a random start, so producers started together do
not all begin on partition 0.

A partitioner is any callable ``(topic, key, num_partitions) -> int | None``; None means "no
opinion: use the sticky partition", which is what :func:`default_partitioner` answers for a
record without a key.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from kafka.partitioner.default import murmur2 as _kafka_murmur2

__all__ = [
    "Partitioner",
    "StickyPartitions",
    "default_partitioner",
    "murmur2",
    "partition_for",
    "to_positive",
]

Partitioner = Callable[[str, bytes | None, int], int | None]
"""``(topic, serialized key or None, number of partitions) -> partition``, or None for sticky."""

_INT32_SIGN = 1 << 31


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 hash of ``data``, as the signed 32-bit int Java's ``Utils.murmur2`` returns.

    Args:
        data: The serialized key.

    Returns:
        The hash, in ``[-2**31, 2**31)``.
    """
    unsigned: int = _kafka_murmur2(data)
    return unsigned - (1 << 32) if unsigned & _INT32_SIGN else unsigned


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``, which fails on -2**31)."""
    return number & 0x7FFFFFFF


def partition_for(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition the Java client's default partitioner picks for ``key``.

    Args:
        key: The serialized key.
        num_partitions: How many partitions the topic has.

    Returns:
        ``toPositive(murmur2(key)) % num_partitions``.

    Raises:
        ValueError: ``num_partitions`` < 1.
    """
    if num_partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {num_partitions}")
    return to_positive(_kafka_murmur2(key)) % num_partitions


def default_partitioner(topic: str, key: bytes | None, num_partitions: int) -> int | None:
    """murmur2 for a keyed record; None (the sticky partition) for a keyless one."""
    del topic  # the default ignores it; custom partitioners may route by topic
    return None if key is None else partition_for(key, num_partitions)


class StickyPartitions:
    """The partition each topic's keyless records currently stick to (KIP-480).

    Args:
        rng: Where the first partition of each topic is drawn from; pass a seeded
            ``random.Random`` for reproducible tests.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._current: dict[str, tuple[int, int]] = {}  # topic -> (partition, partitions)

    def current(self, topic: str, num_partitions: int) -> int:
        """The partition ``topic``'s keyless records go to now."""
        if num_partitions < 1:
            raise ValueError(f"a topic has at least one partition, got {num_partitions}")
        partition, known = self._current.get(topic, (-1, 0))
        if known != num_partitions or partition < 0:  # first use, or the topic grew
            partition = self._rng.randrange(num_partitions)
            self._current[topic] = (partition, num_partitions)
        return partition

    def stick_to(self, topic: str, partition: int, num_partitions: int) -> None:
        """Make ``partition`` the one ``topic``'s keyless records go to now (the caller allows
        only some partitions, and the current one is not among them)."""
        self._current[topic] = (partition, num_partitions)

    def batch_filled(self, topic: str, partition: int) -> None:
        """A batch of ``topic``'s ``partition`` filled: keyless records move to the next one."""
        current, count = self._current.get(topic, (-1, 0))
        if current == partition:
            self._current[topic] = ((partition + 1) % count, count)
