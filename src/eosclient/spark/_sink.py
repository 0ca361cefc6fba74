"""ExactlyOnceKafkaSink: a ``foreachBatch`` function whose micro-batches land exactly once.

Theory of operation. Spark's Kafka sink is at-least-once: when the driver dies after a batch was
written but before Spark recorded it in the checkpoint's commit log, the restarted query runs
the same batch id over the same rows, and writes them again. This sink makes that replay
harmless by recording the batch id in Kafka, inside the same transaction as the rows (a
ledger, :mod:`eosclient.spark._ledger`): the replay finds its batch id recorded and skips it;
a batch that died before its commit left nothing visible to read_committed readers (its
transaction is aborted when the sink starts again) and is written again.

Two modes:

``atomic`` (the default)
    One transactional.id for the sink (``sink_id``), one transaction per micro-batch, written by
    the driver. The rows come to the driver partition by partition with the DataFrame's
    ``toLocalIterator()`` (memory bounded by a partition, not by the batch; Spark computes the
    next partition while the driver sends); there they are converted to bytes and keyed records
    given their partition (:class:`~eosclient.spark._rows.Prepare`), then sent. No Python runs
    on the executors: a pass there (rows into a Python worker, chunks pickled back) cost more
    than the driver's conversion, which overlaps Spark computing the next partition. A failed
    task fails the job before any of its output reaches the driver. A micro-batch is all or
    nothing.
``partitioned``
    One transactional.id per Spark partition (``<sink_id>-p<n>``) and one ledger entry each;
    each task writes its partition from its executor in its own transaction. A retried or
    zombie attempt of a task is fenced by the next one's InitProducerId. A micro-batch is not
    atomic across partitions: a reader may see some partitions of a batch before the others
    (each exactly once). Replays must put the same rows in the same Spark partition, which
    holds when the batch's plan is deterministic.
``datasource``
    A thin layer over the ``eosclient-kafka`` data source's batch writer
    (:mod:`eosclient.spark._writer`): the executors write, one transaction per Spark
    partition, and the driver commits the micro-batch as one decision under Spark's batch id
    (a replay is skipped). Atomic per batch, parallel, and no plan determinism needed.

At start (the first batch a sink object sees), the sink initialises every transactional.id it
may have used, which aborts transactions a dead predecessor left open. In partitioned mode the
number of ids used so far is kept in Kafka too (a plain offset commit of a third reserved group,
raised before a batch's tasks start), because brokers without ListTransactions (Tansu) cannot be
asked which ids exist.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql.functions import lit, spark_partition_id

from eosclient._core.types import TopicPartition
from eosclient._processor.topics import partition_count
from eosclient.config import ConsumerConfig, ProducerConfig, build
from eosclient.consumer import ReadCommittedConsumer
from eosclient.errors import ConfigError
from eosclient.producer import TransactionalProducer
from eosclient.spark._datasource import ExactlyOnceKafkaDataSource
from eosclient.spark._decisions import Records
from eosclient.spark._driver import recover
from eosclient.spark._ledger import Ledger, decide, ledger_group
from eosclient.spark._rows import Layout, Prepare, layout_of
from eosclient.spark._task import (
    ARROW_COUNT,
    ARROW_RESULT,
    PartitionJob,
    SinkSpec,
    TaskResult,
    count_rows,
    open_producer,
    transaction,
)

__all__ = ["BatchOutcome", "ExactlyOnceKafkaSink", "Mode"]

log = logging.getLogger("eosclient.spark")

Mode = Literal["atomic", "partitioned", "datasource"]
_MODES = ("atomic", "partitioned", "datasource")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
_HISTORY = 100  # outcomes kept


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What the sink did with one micro-batch.

    Attributes:
        batch_id: Spark's batch id.
        records: Records written by this call (0 when every part was skipped; -1 in
            ``datasource`` mode, where the executors count them).
        written: Transactions committed (atomic: 0 or 1; partitioned: one per Spark partition).
        skipped: Transactions skipped because the ledger had them (a replay).
    """

    batch_id: int
    records: int
    written: int
    skipped: int


class ExactlyOnceKafkaSink:
    """A ``foreachBatch`` function that writes each micro-batch to Kafka exactly once.

    ``df.writeStream.foreachBatch(ExactlyOnceKafkaSink(bootstrap_servers=..., topic="out",
    sink_id="orders-sink")).option("checkpointLocation", ...).start()``

    Args:
        bootstrap_servers: ``"host:port,host:port"``.
        sink_id: Names the sink across restarts: its transactional.id(s) and ledger groups
            derive from it. One per query (a query with a new checkpoint needs a new one).
        topic: The output topic; None to take each row's ``topic`` column.
        mode: ``"atomic"`` (default), ``"partitioned"`` or ``"datasource"`` (see the module
            docstring).
        ledger_topic: The existing topic whose partition 0 keeps the ledger offsets (default:
            ``topic``; required without one).
        producer_config: Producer settings by Kafka's dotted key (not ``transactional.id``).
        consumer_config: Settings of the consumer that reads the ledger.
        timeout: Seconds for each blocking call (init, ledger read, commit).
        chunk_size: Rows converted and queued at a time.

    Raises:
        ConfigError: a bad setting, named by ``.key``; nothing was started.
    """

    def __init__(self, *, bootstrap_servers: str, sink_id: str, topic: str | None = None,
                 mode: Mode = "atomic", ledger_topic: str | None = None,
                 producer_config: Mapping[str, object] | None = None,
                 consumer_config: Mapping[str, object] | None = None,
                 timeout: float = 60.0, chunk_size: int = 5000) -> None:
        _check_settings(bootstrap_servers=bootstrap_servers, sink_id=sink_id, topic=topic,
                        mode=mode, ledger_topic=ledger_topic, timeout=timeout,
                        chunk_size=chunk_size)
        anchor_topic = ledger_topic or topic
        if anchor_topic is None:
            raise ConfigError("without a topic, name an existing topic for the ledger",
                              key="ledger_topic")
        producer = _producer_settings(bootstrap_servers, sink_id, producer_config)
        consumer = _consumer_settings(bootstrap_servers, consumer_config)
        self.mode: Mode = mode
        self._spec = SinkSpec(bootstrap_servers, sink_id, topic, TopicPartition(anchor_topic, 0),
                              None, producer, consumer, float(timeout), chunk_size)
        self._reset()

    @property
    def sink_id(self) -> str:
        return self._spec.sink_id

    @property
    def outcomes(self) -> list[BatchOutcome]:
        """The last 100 batches this sink object handled, oldest first."""
        with self._lock:
            return list(self._outcomes)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Write one micro-batch (Spark calls this; ``foreachBatch`` passes the arguments).

        Raises:
            RecordTypeError: the DataFrame lacks ``value`` or has a column of the wrong type
                (checked before any transaction), or a row is malformed (its transaction is
                aborted).
            ConfigError: the ledger is ahead of the query (a reused ``sink_id``).
            EosError: Kafka failed; nothing of this batch is visible to read_committed readers
                (partitioned: of the failed partitions). Spark fails the batch; a restarted
                query replays it.
        """
        layout = layout_of(df.schema, self._spec.topic)
        selected = df.select(*layout.columns)
        if self.mode == "datasource":
            outcome = self._datasource(selected, batch_id)
            with self._lock:
                self._outcomes.append(outcome)
            log.info("sink %s batch %d: %s", self.sink_id, batch_id,
                     "skipped" if outcome.skipped else "written")
            return
        with self._lock:
            try:
                self._start()
            except BaseException:
                self._drop()
                raise
            if self.mode == "atomic":
                outcome = self._atomic(selected, batch_id, layout)
            else:
                outcome = self._partitioned(selected, batch_id, layout)
            self._outcomes.append(outcome)
        log.info("sink %s batch %d: %d records, %d transactions written, %d skipped",
                 self.sink_id, batch_id, outcome.records, outcome.written, outcome.skipped)

    def close(self) -> None:
        """Close the driver's clients (a transaction still open is aborted). The sink may be
        called again: it starts over as on its first batch."""
        with self._lock:
            self._drop()

    def __enter__(self) -> ExactlyOnceKafkaSink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        """Settings only: a pickled sink (Spark Connect ships the function) starts over."""
        return {"mode": self.mode, "spec": self._spec}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.mode, self._spec = state["mode"], state["spec"]
        self._reset()

    def __repr__(self) -> str:
        return f"<ExactlyOnceKafkaSink {self.sink_id!r} mode={self.mode}>"

    # -- modes ----------------------------------------------------------------------------------

    def _atomic(self, df: DataFrame, batch_id: int, layout: Layout) -> BatchOutcome:
        producer, ledger = self._producer, self._ledger
        assert producer is not None and ledger is not None  # _start() made them
        spec = self._spec
        count = len(spec.partitions) if spec.partitions else None
        try:  # rows streamed to the driver, converted (and placed) here
            rows = Prepare(layout, spec.chunk_size, count)(
                df.toLocalIterator(prefetchPartitions=True))
            written = transaction(spec, producer, ledger, batch_id=batch_id, rows=rows)
        except BaseException:
            self._drop()  # closing aborts the open transaction; the next batch starts over
            raise
        if written is None:
            return BatchOutcome(batch_id, 0, 0, 1)
        return BatchOutcome(batch_id, written, 1, 0)

    def _datasource(self, df: DataFrame, batch_id: int) -> BatchOutcome:
        """A thin layer over the ``eosclient-kafka`` batch writer: the micro-batch as its batch
        ``batch_id`` (written from the executors, one decision; a replay is skipped)."""
        spec = self._spec
        records = Records(spec.bootstrap_servers, spec.sink_id, spec.anchor, spec.timeout)
        try:
            done = recover(records, spec.bootstrap_servers, spec.producer_config)
        finally:
            records.close()
        if done is not None and batch_id <= done:
            decide(done, batch_id, spec.sink_id)  # raises for a batch before the last done
            return BatchOutcome(batch_id, 0, 0, 1)
        df.sparkSession.dataSource.register(ExactlyOnceKafkaDataSource)
        writer = (df.write.format("eosclient-kafka").mode("append")
                  .option("bootstrap.servers", spec.bootstrap_servers)
                  .option("sinkId", spec.sink_id).option("ledgerTopic", spec.anchor.topic)
                  .option("timeoutSeconds", str(spec.timeout))
                  .option("chunkSize", str(spec.chunk_size)).option("batchId", str(batch_id))
                  .options(**{f"kafka.{k}": str(v) for k, v in spec.producer_config.items()}))
        if spec.topic is not None:
            writer = writer.option("topic", spec.topic)
        writer.save()
        return BatchOutcome(batch_id, -1, 1, 0)

    def _partitioned(self, df: DataFrame, batch_id: int, layout: Layout) -> BatchOutcome:
        """Cache the batch and count each partition's rows (upstream work and its failures
        happen here, before any transaction), then one transaction per partition."""
        cached = df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            if _is_connect(cached):
                results = self._partitioned_over_connect(cached, batch_id, layout)
            else:
                counts = {row[0]: row[1] for row in cached.groupBy(
                    spark_partition_id()).count().collect()}
                rdd = cached.rdd
                self._raise_id_count(rdd.getNumPartitions())
                results = rdd.mapPartitionsWithIndex(
                    self._task(layout, batch_id, counts)).collect()
        finally:
            cached.unpersist()
        return BatchOutcome(batch_id, sum(r.records or 0 for r in results),
                            sum(r.records is not None for r in results),
                            sum(r.records is None for r in results))

    def _partitioned_over_connect(self, cached: DataFrame, batch_id: int, layout: Layout,
                                  ) -> list[TaskResult]:
        """Partitioned mode on a Spark Connect DataFrame, which has no ``rdd``: the count and
        the writing tasks through ``mapInArrow`` (a narrow step, so its tasks are the cached
        batch's partitions). The count's job runs a task for each partition the writing job
        will, empty ones included, which gives the number of transactional.ids to record."""
        counted = cached.select(lit(0).alias("one")).mapInArrow(count_rows, ARROW_COUNT)
        counts = {row.partition: row.rows for row in counted.collect()}
        self._raise_id_count(max(counts, default=-1) + 1)
        job = PartitionJob(self._spec, layout, batch_id, counts)
        return [TaskResult(row.partition, row.records)
                for row in cached.mapInArrow(job.arrow, ARROW_RESULT).collect()]

    def _task(self, layout: Layout, batch_id: int, counts: dict[int, int],
              ) -> Callable[[int, Iterable[Any]], Iterator[TaskResult]]:
        """The function each partitioned-mode task runs (pickled to the executors)."""
        return PartitionJob(self._spec, layout, batch_id, counts)

    # -- start and the partitioned id count -----------------------------------------------------

    def _reset(self) -> None:
        self._lock = threading.RLock()
        self._outcomes: collections.deque[BatchOutcome] = collections.deque(maxlen=_HISTORY)
        self._started = False
        self._producer: TransactionalProducer | None = None
        self._ledger: Ledger | None = None
        self._ids: ReadCommittedConsumer | None = None
        self._id_count = 0

    def _start(self) -> None:
        """On the first batch: the topic's partitions (pre-registered, and to place keyed rows),
        then abort what a predecessor left."""
        if self._started:
            return
        spec = self._spec
        if spec.topic is not None:
            count = partition_count(spec.bootstrap_servers, spec.topic, spec.timeout,
                                    auto_create=True)  # as Spark's Kafka sink's producer
            self._spec = spec = _with_partitions(spec, count)
        if self.mode == "atomic":
            self._producer = open_producer(spec, None)  # aborts a leftover transaction
            self._ledger = spec.ledger(None)
        else:
            self._ids = ReadCommittedConsumer(spec.bootstrap_servers,
                                              group_id=ledger_group(spec.sink_id) + ".ids",
                                              config=spec.consumer_config)
            recorded = self._ids.committed([spec.anchor], spec.timeout)[spec.anchor]
            self._id_count = recorded or 0
            for index in range(self._id_count):
                open_producer(spec, index).close(spec.timeout)  # aborts a leftover transaction
            log.info("sink %s: %d partition ids initialised", spec.sink_id, self._id_count)
        self._started = True

    def _raise_id_count(self, partitions: int) -> None:
        """Record, before any task runs, that ids up to ``partitions`` may hold transactions."""
        if partitions > self._id_count:
            assert self._ids is not None
            self._ids.commit({self._spec.anchor: partitions}, self._spec.timeout)
            self._id_count = partitions

    def _drop(self) -> None:
        for client in (self._ledger, self._ids, self._producer):
            if client is not None:
                client.close()
        self._producer = self._ledger = self._ids = None
        self._started = False


def _is_connect(df: DataFrame) -> bool:
    """Whether ``df`` is a Spark Connect DataFrame (``foreachBatch`` from a Connect client
    passes one), which has no ``rdd``."""
    return type(df).__module__.startswith("pyspark.sql.connect.")


def _with_partitions(spec: SinkSpec, count: int) -> SinkSpec:
    topic = spec.topic
    assert topic is not None
    return dataclasses.replace(
        spec, partitions=tuple(TopicPartition(topic, p) for p in range(count)))


def _check_settings(*, bootstrap_servers: object, sink_id: object, topic: object, mode: object,
                    ledger_topic: object, timeout: object, chunk_size: object) -> None:
    if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
        raise ConfigError("must be a non-empty 'host:port,...' string",
                          key="bootstrap_servers")
    for key, value, optional in (("sink_id", sink_id, False), ("topic", topic, True),
                                 ("ledger_topic", ledger_topic, True)):
        if (value is not None or not optional) and (
                not isinstance(value, str) or not _NAME.fullmatch(value)):
            raise ConfigError(f"must be 1-200 characters of A-Z a-z 0-9 . _ -, got {value!r}",
                              key=key)
    if mode not in _MODES:
        raise ConfigError(f"must be 'atomic', 'partitioned' or 'datasource', got {mode!r}",
                          key="mode")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigError(f"must be a number of seconds > 0, got {timeout!r}", key="timeout")
    if type(chunk_size) is not int or chunk_size < 1:
        raise ConfigError(f"must be an int >= 1, got {chunk_size!r}", key="chunk_size")


def _producer_settings(bootstrap_servers: str, sink_id: str,
                       config: Mapping[str, object] | None) -> dict[str, object]:
    settings = dict(config or {})
    if "transactional.id" in settings:
        raise ConfigError("the sink sets transactional.id from sink_id", key="producer_config")
    build(ProducerConfig, {"bootstrap_servers": bootstrap_servers,
                           "transactional_id": sink_id}, settings)  # checks every key now
    return settings


def _consumer_settings(bootstrap_servers: str,
                       config: Mapping[str, object] | None) -> dict[str, object]:
    settings = dict(config or {})
    if "group.id" in settings:
        raise ConfigError("the sink names its ledger groups from sink_id",
                          key="consumer_config")
    build(ConsumerConfig, {"bootstrap_servers": bootstrap_servers}, settings)
    return settings
