"""The demo's data: the input it writes, and how far the processors have got through it.

Both talk to the broker directly, never through the fault-injecting proxy: the faults are for
the processor alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from eosclient._consumer.protocol import offset_fetch, read_offset_fetch
from eosclient._core.types import TopicPartition
from eosclient._net.blocking import BlockingConnection
from eosclient.producer import TransactionalProducer
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import source_id

__all__ = ["Input", "committed_offsets", "write_input"]

_TIMEOUT: Final = 30.0
_POISON_PER_TRANSACTION: Final = 5  # records per partition in each aborted input transaction


@dataclass(frozen=True, slots=True)
class Input:
    """What :func:`write_input` wrote.

    Attributes:
        records: Committed input records (what the output must hold, exactly once each).
        transactions: Committed input transactions.
        aborted_ids: Checker ids (``topic/partition/offset``) of records written in aborted
            transactions: a read_committed reader never sees them, so neither may the output.
        next_offsets: Per partition, the offset after its last committed record: where the
            group's committed offset stands once every record is copied (the COMMIT marker
            after it is never a consumer's position).
    """

    records: int
    transactions: int
    aborted_ids: list[str]
    next_offsets: dict[TopicPartition, int]


def write_input(broker: RunningBroker, topic: str, partitions: int, records: int, *,
                per_transaction: int = 5000, aborted_every: int = 2,
                progress: Callable[[int], None] | None = None) -> Input:
    """Write ``records`` records (``b"record <n>"``) round-robin over the partitions, in
    transactions of ``per_transaction``; after every ``aborted_every``-th of them, a transaction
    of a few records per partition that is aborted.

    Raises:
        EosError: the broker refused, or did not answer within the producer's timeouts.
    """
    aborted: list[str] = []
    written = transactions = 0
    ends: dict[TopicPartition, int] = {}
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=f"{topic}-writer",
                               linger_ms=5) as producer:
        producer.init_transactions(_TIMEOUT)
        while written < records:
            count = min(per_transaction, records - written)
            with producer.transaction():
                futures = [producer.send_batch(topic, [b"record %d" % n for n in range(
                    written + p, written + count, partitions)], partition=p)
                    for p in range(partitions)]
            for future in futures:
                for where in future.result(_TIMEOUT):
                    tp = TopicPartition(topic, where.partition)
                    ends[tp] = max(ends.get(tp, 0), where.offset + where.record_count)
            written += count
            transactions += 1
            if progress is not None:
                progress(written)
            if transactions % aborted_every == 0 and written < records:
                aborted += _aborted_transaction(producer, topic, partitions)
    return Input(written, transactions, aborted, ends)


def _aborted_transaction(producer: TransactionalProducer, topic: str,
                         partitions: int) -> list[str]:
    """Write a few records per partition, wait until the broker has them, then abort."""
    producer.begin_transaction()
    futures = [producer.send_batch(topic, [b"aborted"] * _POISON_PER_TRANSACTION, partition=p)
               for p in range(partitions)]
    producer.flush(_TIMEOUT)
    ids = [source_id(topic, where.partition, where.offset + i)
           for future in futures for where in future.result(_TIMEOUT)
           for i in range(where.record_count)]
    producer.abort_transaction(_TIMEOUT)
    return ids


def committed_offsets(broker: RunningBroker, group: str, partitions: list[TopicPartition],
                      timeout: float = 5.0) -> dict[TopicPartition, int]:
    """The group's committed offsets that are stable now (KIP-447 ``require_stable``); a
    partition with none, or one a transaction is about to change, is left out.

    Raises:
        KafkaTimeoutError, KafkaConnectionError: the broker did not answer in time.
    """
    with BlockingConnection(broker.host, broker.port, timeout=timeout) as conn:
        response = conn.request(offset_fetch(group, partitions), timeout=timeout)
    _, answers = read_offset_fetch(response)
    return {tp: answer.offset for tp, answer in answers.items()
            if not answer.error_code and answer.offset is not None}
