"""Which partition a record goes to, checked against the topic's metadata (under the lock).

Private to :mod:`eosclient.producer`. The producer's state is checked first, so a call that
would be refused anyway never waits for metadata. A keyed or keyless record without a partition
needs the topic's partition count; the first record of a topic waits for it (at most
``max.block.ms``, releasing the lock meanwhile). A record with an explicit partition does not
wait: its partition is checked against the metadata once that is known.
"""

from __future__ import annotations

import time
from typing import Any, cast

from eosclient._core.txn import IDEMPOTENT_TABLE, TRANSACTIONAL_TABLE, Input
from eosclient._core.types import TopicPartition
from eosclient._producer.sender import Sender
from eosclient.errors import IllegalStateError, KafkaTimeoutError, UnknownPartitionError

__all__ = ["Router"]

_SENDABLE_TXN = frozenset(s for (s, i) in TRANSACTIONAL_TABLE if i is Input.CALL_SEND)
_SENDABLE_IDEMPOTENT = frozenset(s for (s, i) in IDEMPOTENT_TABLE if i is Input.CALL_SEND)

Groups = dict[TopicPartition, tuple[list[Any], list[Any] | None]]
"""``send_batch``'s records by partition: (values, keys or None)."""


class Router:
    """Chooses and checks partitions for the producer's records.

    Args:
        sender: The I/O thread's shared state (core, accumulator, metadata, condition).
    """

    def __init__(self, sender: Sender) -> None:
        self._sender = sender
        self._core, self._acc, self._metadata = sender.core, sender.acc, sender.metadata
        self._max_block = sender.config.max_block_ms / 1000
        transactional = sender.config.transactional
        self._sendable = _SENDABLE_TXN if transactional else _SENDABLE_IDEMPOTENT

    def check_state(self, topic: str) -> None:
        """Raise what ``send()`` would raise in the current state; nothing changes.

        Raises:
            IllegalStateError: no transaction is open, or the producer is closed.
            AbortableError: the transaction failed (FencedError/FatalError likewise).
        """
        if self._core.state not in self._sendable:
            self._core.send(TopicPartition(topic, 0))  # raises: the state refuses sends
            raise IllegalStateError(f"send() is not allowed in {self._core.state.name}")

    def target(self, topic: str, partition: int | None, key: bytes | None) -> TopicPartition:
        """The record's partition, checked against the topic's metadata when known.

        Raises:
            UnknownPartitionError: ``partition`` is beyond the topic's partitions.
            KafkaTimeoutError: the topic's metadata did not come within ``max.block.ms``.
            EosError: the state refuses sends (see :meth:`check_state`), or the metadata
                answer carried a non-retriable error for the topic.
        """
        self.check_state(topic)
        count = self._metadata.partition_count(topic)
        if count is None:
            if partition is not None:  # no need to wait: the leader is looked up before sending
                self._metadata.want((topic,))
                self._sender.wake()
                return TopicPartition(topic, partition)
            count = self._await_metadata(topic)
            self.check_state(topic)
        if partition is None:
            return TopicPartition(topic, self._acc.choose_partition(topic, key, count))
        if partition >= count:
            raise UnknownPartitionError(f"{topic}[{partition}] does not exist: the topic has "
                                        f"{count} partitions; nothing was queued")
        return TopicPartition(topic, partition)

    def group(self, topic: str, partition: int | None, pairs: list[tuple[Any, Any]], *,
              keyed: bool) -> Groups:
        """``send_batch``'s (key, value) pairs grouped by partition, in order.

        Raises:
            The same as :meth:`target`.
        """
        if not pairs:
            self.check_state(topic)
            return {}
        if partition is not None or not keyed:
            tp = self.target(topic, partition, None)
            values = [v for _, v in pairs]
            return {tp: (values, [k for k, _ in pairs] if keyed else None)}
        first = self.target(topic, None, pairs[0][0])
        count = self._metadata.partition_count(topic) or first.partition + 1
        groups: dict[TopicPartition, tuple[list[Any], list[Any]]] = {}
        choose = self._acc.choose_partition
        for key, value in pairs:
            vals, keys = groups.setdefault(TopicPartition(topic, choose(topic, key, count)),
                                           ([], []))
            vals.append(value)
            keys.append(key)
        return cast(Groups, groups)

    def _await_metadata(self, topic: str) -> int:
        deadline = time.monotonic() + self._max_block
        self._metadata.want((topic,))
        self._sender.wake()
        while (count := self._metadata.partition_count(topic)) is None:
            self._sender.check_alive()
            error = self._metadata.topic_error(topic)
            if error is not None:
                raise error
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"topic {topic!r} not in the metadata after "
                                        f"max.block.ms ({self._max_block * 1000:g} ms)")
            self._sender.changed.wait(remaining)
        return count
