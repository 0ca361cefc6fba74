"""One transaction of the sink: check the ledger, record the batch, write the rows, commit.

Both modes run this: atomic mode once per micro-batch on the driver, partitioned mode once per
Spark partition in each task (:class:`PartitionJob`, which Spark pickles and calls on an
executor: through ``rdd.mapPartitionsWithIndex`` on a classic DataFrame, through
``DataFrame.mapInArrow`` on a Spark Connect one, which has no ``rdd``). What travels to an
executor is a :class:`SinkSpec`, settings only; each task builds its own clients and closes
them before it returns.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eosclient._core.types import TopicPartition
from eosclient.errors import RecordTypeError
from eosclient.producer import TransactionalProducer
from eosclient.spark._ledger import Decision, Ledger, decide, ledger_group
from eosclient.spark._rows import Chunk, Layout, arrow_chunks, chunks

__all__ = ["ARROW_COUNT", "ARROW_RESULT", "IncompleteInputError", "PartitionJob", "SinkSpec",
           "TaskResult", "count_rows", "open_producer", "transaction", "write_chunks"]

log = logging.getLogger("eosclient.spark")

# mapInArrow's output schemas: PartitionJob.arrow's (one row per task), count_rows's.
ARROW_RESULT = "partition int, records long"
ARROW_COUNT = "partition int, rows long"


class IncompleteInputError(RuntimeError):
    """A task's rows ended before all had arrived; its transaction is not committed.

    A PySpark Python worker cannot tell the end of its input from a failure upstream in the
    JVM (the stream just ends), so partitioned mode counts the rows of each partition first and
    commits only a partition that arrived whole; Spark retries the task.
    """


@dataclass(frozen=True, slots=True)
class SinkSpec:
    """Everything a sink's transaction needs, and nothing that cannot be pickled."""

    bootstrap_servers: str
    sink_id: str
    topic: str | None
    anchor: TopicPartition  # the real partition the ledger's offsets are kept on
    partitions: tuple[TopicPartition, ...] | None  # pre-registered at begin; keyed rows placed
    producer_config: dict[str, object]
    consumer_config: dict[str, object]
    timeout: float
    chunk_size: int

    def transactional_id(self, partition: int | None) -> str:
        """Atomic mode: the sink id; partitioned mode: one id per Spark partition."""
        return self.sink_id if partition is None else f"{self.sink_id}-p{partition}"

    def ledger(self, partition: int | None) -> Ledger:
        return Ledger(bootstrap_servers=self.bootstrap_servers,
                      group_id=ledger_group(self.sink_id, partition), anchor=self.anchor,
                      consumer_config=self.consumer_config)


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What one transaction did: ``records`` is None when the batch was skipped (a replay)."""

    partition: int | None
    records: int | None


def open_producer(spec: SinkSpec, partition: int | None) -> TransactionalProducer:
    """A producer of the sink's transactional.id, initialised: an older holder of the id is
    fenced and the transaction it left open is aborted (InitProducerId).

    Raises:
        EosError: init failed (the producer is closed).
    """
    producer = TransactionalProducer(spec.bootstrap_servers,
                                     transactional_id=spec.transactional_id(partition),
                                     config=spec.producer_config)
    try:
        producer.init_transactions(spec.timeout)
    except BaseException:
        producer.close(spec.timeout)
        raise
    return producer


def transaction(spec: SinkSpec, producer: TransactionalProducer, ledger: Ledger, *,
                batch_id: int, rows: Iterable[Chunk], expected: int | None = None,
                ) -> int | None:
    """Write ``rows`` (converted, in chunks) as batch ``batch_id`` in one transaction, unless
    the ledger says it committed before; return the record count, or None when skipped.

    Args:
        expected: The number of rows there must be; any other count is not committed.

    Raises:
        ConfigError: the ledger is ahead of the query (a reused sink_id).
        KafkaTimeoutError: committed, but the ledger did not show it in time.
        IncompleteInputError: the rows did not number ``expected``.
        EosError, or whatever the rows' iterator raised: the transaction is left open or
        failed; the caller closes the producer, which aborts it.
    """
    if decide(ledger.recorded(spec.timeout), batch_id, spec.sink_id) is Decision.SKIP:
        return None
    producer.begin_transaction(spec.partitions, ledger.group_id)
    ledger.record(producer, batch_id)  # the ledger entry first: it commits with the rows or not
    written = write_chunks(producer, rows)
    if expected is not None and written != expected:
        raise IncompleteInputError(f"batch {batch_id}: {written} rows arrived of {expected}; "
                                   f"not committed")
    commit(producer, spec.timeout)
    ledger.confirm(batch_id, spec.timeout)  # done only once a replay would see it
    return written


def commit(producer: TransactionalProducer, timeout: float) -> None:
    """Commit the open transaction (a seam: tests crash here)."""
    producer.commit_transaction(timeout)


def write_chunks(producer: TransactionalProducer, rows: Iterable[Chunk]) -> int:
    """Send the chunks' records in the open transaction (``send_batch`` per topic and
    partition, ``send`` for rows with headers); return how many. Delivery failures surface at
    commit."""
    count = 0
    for chunk in rows:
        if chunk.error is not None:
            raise RecordTypeError(chunk.error)
        for (topic, partition), (keys, values) in chunk.groups.items():
            keyed = keys if any(k is not None for k in keys) else None
            producer.send_batch(topic, values, keyed, partition)
        for topic, partition, key, value, headers in chunk.singles:
            producer.send(topic, value, key, partition=partition, headers=headers)
        count += chunk.rows
    return count


@dataclass(frozen=True, slots=True)
class PartitionJob:
    """Partitioned mode, one micro-batch: what each Spark task runs (pickled to executors).

    ``counts`` has each Spark partition's row count: a partition whose rows stop short is not
    committed (:class:`IncompleteInputError`).
    """

    spec: SinkSpec
    layout: Layout
    batch_id: int
    counts: Mapping[int, int]

    def __call__(self, index: int, rows: Iterable[Sequence[Any]]) -> Iterator[TaskResult]:
        """One task (``rdd.mapPartitionsWithIndex``): one transaction of the partition's own
        transactional.id. Yields one :class:`TaskResult`."""
        yield self.write(index, chunks(rows, self.layout, self.spec.chunk_size))

    def arrow(self, batches: Iterable[Any]) -> Iterator[Any]:
        """One task (``DataFrame.mapInArrow``, which Spark Connect has where it has no
        ``rdd``): the same transaction, fed by the partition's Arrow record batches; the
        partition comes from the task's context. Yields one Arrow record batch of one row
        (:data:`ARROW_RESULT`)."""
        import pyarrow  # noqa: PLC0415 - present wherever mapInArrow runs; not for classic tasks
        from pyspark import TaskContext  # noqa: PLC0415

        context = TaskContext.get()
        assert context is not None  # set in every Python worker that runs a task
        size = self.spec.chunk_size
        result = self.write(context.partitionId(),
                            (c for b in batches for c in arrow_chunks(b, self.layout, size)))
        yield pyarrow.RecordBatch.from_pylist(
            [{"partition": result.partition, "records": result.records}],
            schema=pyarrow.schema([("partition", pyarrow.int32()),
                                   ("records", pyarrow.int64())]))

    def write(self, index: int, rows: Iterable[Chunk]) -> TaskResult:
        """Partition ``index``'s rows in one transaction of its own transactional.id.

        The id comes from the Spark partition, so a retried or speculative attempt of the same
        task fences the earlier one (InitProducerId): the earlier one's open transaction is
        aborted, its commit refused.
        """
        spec = self.spec
        producer = open_producer(spec, index)
        ledger = spec.ledger(index)
        try:
            written = transaction(spec, producer, ledger, batch_id=self.batch_id, rows=rows,
                                  expected=self.counts.get(index, 0))
        finally:
            ledger.close()
            producer.close(spec.timeout)
        if written is None:
            log.info("sink %s batch %d partition %d: committed before, skipped",
                     spec.sink_id, self.batch_id, index)
        return TaskResult(index, written)



def count_rows(batches: Iterable[Any]) -> Iterator[Any]:
    """Partitioned mode over Spark Connect, before the writing job: one row (the partition,
    its row count) per task, from the partition's Arrow record batches (of one small column).

    Without side effects, a count that a failed upstream cut short never arrives: the job
    fails with its task. Yields one Arrow record batch (:data:`ARROW_COUNT`).
    """
    import pyarrow  # noqa: PLC0415 - see PartitionJob.arrow
    from pyspark import TaskContext  # noqa: PLC0415

    context = TaskContext.get()
    assert context is not None
    rows = sum(batch.num_rows for batch in batches)
    yield pyarrow.RecordBatch.from_pylist(
        [{"partition": context.partitionId(), "rows": rows}],
        schema=pyarrow.schema([("partition", pyarrow.int32()), ("rows", pyarrow.int64())]))

