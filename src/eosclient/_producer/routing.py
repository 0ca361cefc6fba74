"""Which partition a record goes to, checked against the topic's metadata (under the lock).

Private to the producer session (:mod:`eosclient._producer.session`). The producer's state is
checked first, so a call that would be refused anyway never waits for metadata. A keyed or
keyless record without a partition needs the topic's partition count, and a record with an
explicit partition is checked against it (a partition the topic does not have fails at
``send()``, before anything is queued, as in Java); so the first record of a topic waits for its
metadata (at most ``max.block.ms``, releasing the lock meanwhile). That wait is written once, as
steps (:meth:`Router.partition_count`): the sync front's ``send`` drives them in place, the
asyncio front awaits them before it calls ``send``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from eosclient._core.encoder import Header
from eosclient._core.partitioner import default_partitioner
from eosclient._core.txn import IDEMPOTENT_TABLE, TRANSACTIONAL_TABLE, Input
from eosclient._core.types import TopicPartition
from eosclient._net.steps import Steps, wait_until
from eosclient._producer import args
from eosclient._producer.sender import Sender
from eosclient.errors import IllegalStateError, UnknownPartitionError

__all__ = ["Router"]

_SENDABLE_TXN = frozenset(s for (s, i) in TRANSACTIONAL_TABLE if i is Input.CALL_SEND)
_SENDABLE_IDEMPOTENT = frozenset(s for (s, i) in IDEMPOTENT_TABLE if i is Input.CALL_SEND)

Groups = list[tuple[TopicPartition, list[bytes | None] | None, list[bytes | None],
                   list[list[Header]] | None]]
"""Runs of one partition each: (partition, keys or None, values, headers or None)."""
"""``send_batch``'s records as runs: (partition, keys or None, values), in queueing order."""

_BATCH_HEADER = 61
# A keyless record's bytes besides its value: length 2, attributes 1, timestamp and offset
# deltas 1-2 each, null key 1, value length 2, header count 1; rounded up, so runs fit a batch.
_RECORD_OVERHEAD = 10


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
        self._known: dict[str, list[TopicPartition]] = {}  # topic -> its partitions, in order
        # topic -> its keyless records' partition, as the accumulator's sticky choice said last;
        # it moves only when a batch fills, i.e. when an append opens a batch: batch_opened().
        self._sticky_tps: dict[str, TopicPartition] = {}
        self._sticky = self._acc.sticky
        self._batch_size = min(sender.config.batch_size, sender.config.max_request_size)
        self._keyless_sticky = sender.config.partitioner is default_partitioner
        self._version = -1  # the metadata version `_known` is from

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
            RecordTypeError: the topic's name does not fit a Kafka STRING.
            KafkaTimeoutError: the topic's metadata did not come within ``max.block.ms``.
            EosError: the state refuses sends (see :meth:`check_state`), or the metadata
                answer carried a non-retriable error for the topic.
        """
        # The hot path: a topic whose partitions are known since the last metadata answer. The
        # state is not checked here; the core's send(tp), which comes next, checks it.
        if partition is None and key is None:
            tp = self._sticky_tps.get(topic)
            if tp is not None and self._version == self._metadata.version:
                return tp
        tps = self._known.get(topic)
        if tps is not None and self._version == self._metadata.version:
            if partition is None:
                if key is None and self._keyless_sticky:  # skip a partitioner answering None
                    tp = self._sticky_tps[topic] = self._keyless(topic, tps)
                    return tp
                return tps[self._acc.choose_partition(topic, key, len(tps))]
            if partition < len(tps):
                return tps[partition]
        return self._target(topic, partition, key)

    def _keyless(self, topic: str, tps: list[TopicPartition]) -> TopicPartition:
        """The sticky partition for a keyless record (KIP-480), kept among the partitions
        declared at ``begin_transaction`` when there are some (KIP-609): an undeclared pick
        moves on to the next declared one, so the choice still rotates as batches fill."""
        tp = tps[self._sticky.current(topic, len(tps))]
        declared = self._core.declared_partitions(topic)
        if not declared or tp in declared:
            return tp
        tp = min((d for d in declared if d.partition > tp.partition), default=declared[0])
        self._sticky.stick_to(topic, tp.partition, len(tps))
        return tp

    def transaction_began(self) -> None:
        """A new transaction may declare other partitions: forget the sticky choices (and
        ``send()``'s shortcuts, which point at batches of the transaction before)."""
        self._sticky_tps.clear()
        self._sender.shortcuts.clear()

    def batch_opened(self) -> None:
        """A batch was opened (the one before may have filled): the sticky partitions the
        accumulator chose may have moved (KIP-480 moves on when a batch fills), so ask again;
        ``send()``'s shortcuts may point at a batch that is no longer the newest."""
        self._sticky_tps.clear()
        self._sender.shortcuts.clear()

    def _target(self, topic: str, partition: int | None, key: bytes | None) -> TopicPartition:
        self.check_state(topic)
        count = self._metadata.partition_count(topic)
        if count is None:  # even for an explicit partition: it is checked before queueing
            count = self._await_metadata(topic)
            self.check_state(topic)
        tps = self._remember(topic, count)
        if partition is None:
            if key is None and self._keyless_sticky:
                return self._keyless(topic, tps)
            return tps[self._acc.choose_partition(topic, key, count)]
        if partition >= count:
            raise UnknownPartitionError(f"{topic}[{partition}] does not exist: the topic has "
                                        f"{count} partitions; nothing was queued")
        return tps[partition]

    def _remember(self, topic: str, count: int) -> list[TopicPartition]:
        """The topic's partitions, kept until the next metadata answer (which may change them)."""
        if self._version != self._metadata.version:
            self._known.clear()
            self._version = self._metadata.version
        tps = self._known.get(topic)
        if tps is None or len(tps) != count:
            tps = self._known[topic] = [TopicPartition(topic, p) for p in range(count)]
        return tps

    def group(self, topic: str, partition: int | None, keys: list[bytes | None] | None,
              values: list[bytes | None], headers: list[list[Header]] | None = None,
              ) -> Groups:
        """``send_batch``'s checked records as runs of one partition each, in queueing order.

        Keyed records go where the partitioner puts them (one run per partition); keyless
        ones without a partition are spread batch by batch (:meth:`_spread`), unless a custom
        partitioner places them (then all where it puts the first).

        Raises:
            The same as :meth:`target`.
        """
        if not values:
            self.check_state(topic)
            return []
        if partition is not None or (keys is None and not self._keyless_sticky):
            return [(self.target(topic, partition, None), keys, values, headers)]
        if keys is None:
            return self._spread(topic, values, headers)
        first = self.target(topic, None, keys[0])
        count = self._metadata.partition_count(topic) or first.partition + 1
        choose = self._acc.choose_partition
        if headers is None:  # the hot path: one partition number per record, nothing more
            runs: dict[int, tuple[list[bytes | None], list[bytes | None]]] = {}
            for key, value in zip(keys, values, strict=True):
                number = choose(topic, key, count)
                run = runs.get(number)
                if run is None:
                    runs[number] = ([key], [value])
                else:
                    run[0].append(key)
                    run[1].append(value)
            tps = self._remember(topic, count)
            return [(tps[number], ks, vals, None) for number, (ks, vals) in runs.items()]
        with_headers: dict[int, tuple[list[bytes | None], list[bytes | None],
                                      list[list[Header]]]] = {}
        for key, value, header in zip(keys, values, headers, strict=True):
            ks, vals, hs = with_headers.setdefault(choose(topic, key, count), ([], [], []))
            ks.append(key)
            vals.append(value)
            hs.append(header)
        return [(TopicPartition(topic, number), ks, vals, hs)
                for number, (ks, vals, hs) in with_headers.items()]

    def _spread(self, topic: str, values: list[bytes | None],
                headers: list[list[Header]] | None) -> Groups:
        """Keyless records in runs of about one batch, on the sticky partition and the next
        ones in turn, as KIP-480 spreads ``send()``'s records (it moves on when a batch fills):
        a bulk call fills batches on several partitions, and one Produce request carries a
        batch of each. Only partitions the transaction accepts are used (KIP-609: declared)."""
        first = self.target(topic, None, None)
        size = sum(map(len, filter(None, values))) / len(values) + _RECORD_OVERHEAD
        per_batch = max(1, int((self._batch_size - _BATCH_HEADER) // size))
        runs = -(-len(values) // per_batch)
        tps = self._remember(topic, self._metadata.partition_count(topic) or first.partition + 1)
        order: list[TopicPartition] = []
        for offset in range(len(tps)):
            if len(order) == runs:
                break
            tp = tps[(first.partition + offset) % len(tps)]
            with contextlib.suppress(UnknownPartitionError):  # not declared at begin
                self._core.send(tp)
                order.append(tp)
        if not order:
            self._core.send(first)  # raises: no partition of the topic was declared
        return [(order[run % len(order)], None, values[run * per_batch:(run + 1) * per_batch],
                 None if headers is None else headers[run * per_batch:(run + 1) * per_batch])
                for run in range(runs)]

    def partition_count(self, topic: str, check: Callable[[str], None] | None = None,
                        ) -> Steps[int]:
        """``topic``'s partition count, its metadata asked for and waited for (at most
        ``max.block.ms``) if not known yet. ``check(topic)`` (default :meth:`check_state`)
        raises to end the wait: close() or an abort from another thread.

        Raises:
            KafkaTimeoutError: the metadata did not come in time (chained from why).
            EosError: the metadata answer carried a non-retriable error for the topic, or
                ``check`` raised.
        """
        metadata = self._metadata
        count = metadata.partition_count(topic)
        if count is not None:
            return count
        # The one way a topic of send() gets into a request (Metadata, then Produce): its
        # name is checked against the wire here, off send()'s hot path (RecordTypeError).
        args.topic_of(topic)
        deadline = time.monotonic() + self._max_block
        metadata.want((topic,))

        def check_topic() -> None:
            self._sender.check_alive()
            (check or self.check_state)(topic)
            error = metadata.topic_error(topic)
            if error is not None:
                raise error

        yield from wait_until(
            self._sender, lambda: metadata.partition_count(topic) is not None, deadline,
            f"Metadata for topic {topic!r}", check_topic,
            unchanged=f"the topic is not known after max.block.ms ({self._max_block * 1000:g} ms)")
        return metadata.partition_count(topic) or 0  # (known now: ready said so)

    def _await_metadata(self, topic: str) -> int:
        """:meth:`partition_count` in ``send()`` on the sync front (under the lock).

        Raises:
            WouldWait: an event loop runs the turns (it awaits ``room`` first); nothing
                changed.
        """
        args.topic_of(topic)  # (a bad name is that, even where waiting is refused)
        self._sender.refuse_to_wait("send")
        return self._sender.drive(self.partition_count(topic))
