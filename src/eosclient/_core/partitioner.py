"""Which partition a record goes to: murmur2 for keys (like the Java client), sticky otherwise.

A keyed record must land where every other Kafka client puts the same key, or a topic written by
several clients loses per-key order. The Java client computes
``toPositive(murmur2(keyBytes)) % numPartitions``; :func:`partition_for` does exactly that. The
hash is our own: the key's 4-byte words unpacked in one ``struct`` call, then Java's loop, about
4x faster than kafka-python's byte-by-byte version, which the tests check it against (with
Kafka's ``UtilsTest.testMurmur2`` vectors and arbitrary keys).

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
import struct
from collections.abc import Callable

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
_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF
_WORDS = [struct.Struct(f"<{n}I") for n in range(64)]  # keys up to 255 bytes: no new Struct


def _murmur2_unsigned(data: bytes | bytearray | memoryview) -> int:
    """Java's ``Utils.murmur2`` as an unsigned 32-bit int (the hot path of keyed sends)."""
    length = len(data)
    n = length >> 2
    words = (_WORDS[n] if n < 64 else struct.Struct(f"<{n}I")).unpack_from(data)
    h = _SEED ^ length
    for word in words:
        k = (word * _M) & _MASK
        h = ((h * _M) & _MASK) ^ (((k ^ (k >> 24)) * _M) & _MASK)
    tail = length & 3
    if tail:
        end = n << 2
        if tail == 3:
            h ^= data[end + 2] << 16
        if tail >= 2:
            h ^= data[end + 1] << 8
        h = ((h ^ data[end]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 hash of ``data``, as the signed 32-bit int Java's ``Utils.murmur2`` returns.

    Args:
        data: The serialized key.

    Returns:
        The hash, in ``[-2**31, 2**31)``.
    """
    unsigned = _murmur2_unsigned(data)
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
    return (_murmur2_unsigned(key) & 0x7FFFFFFF) % num_partitions


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
