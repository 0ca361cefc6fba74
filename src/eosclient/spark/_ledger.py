"""The sink's ledger: which micro-batch committed last, kept in Kafka's own offset store.

Theory of operation. Each transaction the sink writes also commits, through TxnOffsetCommit
(KIP-98, ``send_offsets_to_transaction``), the offset ``batch_id + 1`` for a reserved consumer
group on one real partition (the output topic's partition 0: OffsetCommit for a topic that does
not exist is refused with UNKNOWN_TOPIC_OR_PARTITION). The offset is a number the group
coordinator keeps, not a position in that partition, and it moves if and only if the
transaction commits. Before writing batch ``b`` the sink reads it back (OffsetFetch with
``require_stable``, KIP-447, so a read cannot overtake a commit whose markers are still being
written):

* nothing recorded, or ``b`` past the recorded batch: write ``b``;
* ``b`` is the recorded batch: Spark replays a batch whose output committed but whose end it
  never recorded (the driver died in between): skip it;
* ``b`` before the recorded batch: the ledger is ahead of the query by more than one replay.
  Spark runs batch ``b + 1`` only after recording ``b``, so this means a query with a new
  checkpoint reuses an old ``sink_id``: a :class:`~eosclient.errors.ConfigError`, rather than
  skipping batches that were never written.

The read never runs while a transaction of the same transactional.id may be open: a sink
initialises its producer (InitProducerId aborts what a dead predecessor left open) before its
first read, and commits or aborts each transaction before the next read.

After each commit the sink reads the ledger back until it shows the batch
(:meth:`Ledger.confirm`), and only then reports the batch done: on Apache Kafka the first read
already does, but a broker may apply a transaction's offsets after acknowledging its commit
(:mod:`eosclient._processor.visible`), and a task retried meanwhile would write its rows again.
"""

from __future__ import annotations

import enum

from eosclient._core.types import TopicPartition
from eosclient._processor.visible import await_committed
from eosclient.consumer import ReadCommittedConsumer
from eosclient.errors import ConfigError, KafkaTimeoutError
from eosclient.producer import TransactionalProducer

__all__ = ["Decision", "Ledger", "decide", "ledger_group"]

GROUP_SUFFIX = ".eosclient-sink"


class Decision(enum.Enum):
    WRITE = "write"
    SKIP = "skip"  # the batch committed before: a replay


def ledger_group(sink_id: str, partition: int | None = None) -> str:
    """The reserved group of a sink (atomic mode), or of one Spark partition of it."""
    base = sink_id + GROUP_SUFFIX
    return base if partition is None else f"{base}.p{partition}"


def decide(recorded: int | None, batch_id: int, sink_id: str) -> Decision:
    """What to do with ``batch_id`` given the last batch id the ledger recorded.

    Raises:
        ConfigError: ``batch_id`` is before the recorded batch (see the module docstring).
    """
    if recorded is None or batch_id > recorded:
        return Decision.WRITE
    if batch_id == recorded:
        return Decision.SKIP
    raise ConfigError(f"sink_id {sink_id!r} already committed batch {recorded}, and this query "
                      f"is at batch {batch_id}: a query with a new checkpoint needs a new "
                      f"sink_id (or these batches would be skipped)", key="sink_id")


class Ledger:
    """One reserved group's record of the last committed batch id.

    Args:
        bootstrap_servers: The cluster.
        group_id: From :func:`ledger_group`.
        anchor: The real partition the offset is kept on.
        consumer_config: Consumer settings by Kafka's dotted key.
    """

    def __init__(self, *, bootstrap_servers: str, group_id: str, anchor: TopicPartition,
                 consumer_config: dict[str, object]) -> None:
        self.group_id = group_id
        self.anchor = anchor
        self._consumer = ReadCommittedConsumer(bootstrap_servers, group_id=group_id,
                                               config=consumer_config)

    def recorded(self, timeout: float) -> int | None:
        """The last batch id committed with this ledger, or None.

        Raises:
            KafkaTimeoutError: no stable answer within ``timeout``.
            EosError: the coordinator refused.
        """
        offset = self._consumer.committed([self.anchor], timeout)[self.anchor]
        return None if offset is None else offset - 1

    def confirm(self, batch_id: int, timeout: float) -> None:
        """Wait until the ledger shows ``batch_id`` (or a later batch) as committed.

        Raises:
            KafkaTimeoutError: the committed entry did not show within ``timeout``; the batch
                committed, but a replay of it before the entry shows would write it again.
            EosError: the coordinator refused.
        """
        try:
            await_committed(self._consumer, {self.anchor: batch_id + 1}, timeout)
        except KafkaTimeoutError as exc:
            raise KafkaTimeoutError(
                f"batch {batch_id} committed, but the ledger group {self.group_id!r} does not "
                f"show it yet ({exc}): a replay of this batch now would write it again") from exc

    def record(self, producer: TransactionalProducer, batch_id: int) -> None:
        """Put ``batch_id`` into the producer's open transaction (never waits)."""
        producer.send_offsets_to_transaction({self.anchor: batch_id + 1}, self.group_id)

    def close(self) -> None:
        self._consumer.close()
