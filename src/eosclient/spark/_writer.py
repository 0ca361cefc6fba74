"""The ``eosclient-kafka`` data source's writers: executors write, the driver commits.

``df.writeStream.format("eosclient-kafka")`` (:class:`StreamWriter`) and
``df.write.format("eosclient-kafka")`` (:class:`BatchWriter`). Each task of a batch writes its
rows (Arrow record batches, converted column by column: :func:`~._rows.arrow_chunks`) in a
transaction of its own transactional id, ``<sinkId>-w<partition>``, and returns a
:class:`~._driver.TaskCommit` with the flushed transaction *still open*
(:meth:`~eosclient.TransactionalProducer.prepare_transaction`). The driver ends them all in
one decision (:mod:`eosclient.spark._driver`). With a ``topic`` option, the tasks write behind
a gate (:mod:`eosclient.spark._gate`) that the driver opens when it ships the writer to them,
and releases after ending them: readers see the batch at once. A retried or speculative
attempt of a task initialises the same transactional id, which fences the earlier
attempt and aborts its transaction.

Options: ``bootstrap.servers`` (required), ``sinkId`` (required; one per query),
``topic`` (or a ``topic`` column), ``ledgerTopic`` (an existing topic whose partition 0 keeps
the sink's records; default ``topic``), ``timeoutSeconds`` (60), ``chunkSize`` (5000), and any
producer setting as ``kafka.<dotted key>`` (``kafka.linger.ms``). ``batchId`` (batch writes:
the batch's id; a batch done already is skipped). ``testing.crashAt`` is a test hook
(:func:`eosclient.spark._driver.crash_point`). ``gate`` (``on``, the default, or ``off``):
whether the tasks write behind a gate (``off``: each task's transaction becomes visible on its
own; see docs/spark.md for Tansu).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from eosclient._core.types import TopicPartition
from eosclient._processor.topics import partition_count
from eosclient.config import ProducerConfig, build
from eosclient.errors import ConfigError
from eosclient.producer import TransactionalProducer
from eosclient.spark import _driver, _gate
from eosclient.spark._decisions import Records, transactional_id
from eosclient.spark._rows import Layout, arrow_chunks, layout_of
from eosclient.spark._task import write_chunks

__all__ = ["BatchWriter", "StreamWriter", "WriterPlan"]

log = logging.getLogger("eosclient.spark")

_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
_BATCH_ID = "streaming.sql.batchId"  # the local property Spark sets for a micro-batch's jobs


@dataclass(frozen=True, slots=True)
class WriterPlan:
    """Everything a writer needs on the driver and on the executors (pickled to both)."""

    bootstrap_servers: str
    sink_id: str
    topic: str | None
    anchor: TopicPartition
    partitions: tuple[TopicPartition, ...] | None  # counted when shipped to the tasks
    layout: Layout
    producer_config: dict[str, object]
    timeout: float
    chunk_size: int
    done: int | None  # the last batch done when the writer was made (after recovery)
    crash_at: str | None = None  # tests only: the ``testing.crashAt`` option
    batch_id: int | None = None  # the batch writer's ``batchId`` option
    gate: _gate.Gate | None = None  # the open gate (None: none)
    gated: bool = False  # the tasks write behind a gate (a ``topic`` option, not switched off)

    @classmethod
    def make(cls, options: Mapping[str, str], schema: StructType) -> WriterPlan:
        """Check the options and the schema, then recover the sink (the driver, at planning).

        Raises:
            ConfigError: an option is missing or bad (named by ``.key``).
            RecordTypeError: the DataFrame's columns are not the sink's.
            EosError: Kafka failed while recovering.
        """
        get = _getter(options)
        servers = get("bootstrap.servers") or get("kafka.bootstrap.servers")
        if not servers:
            raise ConfigError("the sink needs the brokers: .option('bootstrap.servers', "
                              "'host:port')", key="bootstrap.servers")
        sink_id = _name(get("sinkId"), "sinkId", required=True)
        assert sink_id is not None
        topic = _name(get("topic"), "topic")
        anchor_topic = _name(get("ledgerTopic"), "ledgerTopic") or topic
        if anchor_topic is None:
            raise ConfigError("without a topic, name an existing topic for the ledger",
                              key="ledgerTopic")
        timeout = positive_option(get("timeoutSeconds"), "timeoutSeconds", float) or 60.0
        chunk_size = positive_option(get("chunkSize"), "chunkSize", int) or 5000
        producer_config: dict[str, object] = {
            k[len("kafka."):]: _setting(k[len("kafka."):], v) for k, v in options.items()
            if k.lower().startswith("kafka.") and k.lower() != "kafka.bootstrap.servers"}
        if "transactional.id" in producer_config:
            raise ConfigError("the sink sets transactional.id from sinkId",
                              key="kafka.transactional.id")
        build(ProducerConfig, {"bootstrap_servers": servers, "transactional_id": sink_id},
              producer_config)  # every key checked now, on the driver
        layout = layout_of(schema, topic)
        anchor = TopicPartition(anchor_topic, 0)
        gate_option = (get("gate") or "on").lower()
        if gate_option not in {"on", "off"}:
            raise ConfigError(f"must be on or off, got {gate_option!r}", key="gate")
        gated = topic is not None and gate_option == "on"
        records = Records(servers, sink_id, anchor, timeout)
        try:
            done = _driver.recover(records, servers, producer_config)
            gate = _gate.current(records)
            if gate is not None and not gated:  # left by a run with one; nothing behind it
                _gate.release(records, servers, gate)
                gate = None
        finally:
            records.close()
        batch_id = get("batchId")
        if batch_id is not None and not (batch_id.isdigit() and int(batch_id) < 1 << 40):
            raise ConfigError(f"must be an int >= 0, got {batch_id!r}", key="batchId")
        return cls(servers, sink_id, topic, anchor, None, layout, producer_config,
                   timeout, chunk_size, done, get("testing.crashAt"),
                   None if batch_id is None else int(batch_id), gate, gated)

    def records(self) -> Records:
        return Records(self.bootstrap_servers, self.sink_id, self.anchor, self.timeout)

    def for_tasks(self) -> WriterPlan:
        """This plan as its tasks get it: the topic's partitions counted now (a topic that
        grew is picked up at the next batch's planning), behind a gate opened now in front of
        them (replacing any open one) unless the writer writes without a gate. Only planning
        needs them: the process that commits never counts.

        Raises:
            EosError: Kafka failed (the topic does not exist, say); no gate is open.
        """
        if self.topic is None:
            return self
        plan = replace(self, partitions=tuple(TopicPartition(self.topic, p) for p in range(
            partition_count(self.bootstrap_servers, self.topic, self.timeout))))
        if not plan.gated:
            return plan
        records = plan.records()
        try:
            gate = _gate.open_gate(records, plan.bootstrap_servers, plan.partitions or (),
                                   plan.producer_config)
        finally:
            records.close()
        return replace(plan, gate=gate)


class _Writing:
    """What both writers do: a task's transaction on an executor, the decision on the driver.

    Pickling a writer opens the gate its tasks write behind (:mod:`eosclient.spark._gate`),
    once per writer: PySpark pickles the writer it made on the driver to plan a batch (twice:
    in the tasks' function and alone), and never the one it makes to commit (which reads the
    open gate from the sink's records). A writer made in this process (not unpickled) has
    recovered the sink just now: its commit need not recover again."""

    plan: WriterPlan
    _shipped: bool = False
    _made_here: bool = False  # True only in the process that made the writer (not pickled)

    def __getstate__(self) -> dict[str, Any]:
        if not self._shipped:
            self.plan, self._shipped = self.plan.for_tasks(), True
        return {k: v for k, v in self.__dict__.items() if k not in ("_shipped", "_made_here")}

    def _write(self, batches: Iterator[Any], batch: int | None) -> _driver.TaskCommit:
        """One task (on an executor): write its rows, flush, hand the transaction over."""
        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        plan = self.plan
        if batch is not None and plan.done is not None and batch <= plan.done:
            log.info("sink %s batch %d task %d: committed before; not written", plan.sink_id,
                     batch, task)
            return _driver.TaskCommit(task, None, 0, True, _gate_of(plan))
        producer: TransactionalProducer | None = None
        count = 0
        try:
            for record_batch in batches:
                if record_batch.num_rows == 0:
                    continue
                if producer is None:
                    producer = _open(plan, task)
                count += write_chunks(producer, arrow_chunks(record_batch, plan.layout,
                                                             plan.chunk_size))
            if producer is None:  # no rows; a retry still fences an earlier attempt, whose
                if context is not None and context.attemptNumber() > 0:  # open transaction
                    _open(plan, task, begin=False).close(plan.timeout)  # holds the LSO back
                return _driver.TaskCommit(task, None, 0, gate=_gate_of(plan))
            prepared = producer.prepare_transaction(plan.timeout)
        except BaseException:
            if producer is not None:
                producer.close(plan.timeout)  # aborts what it began
            raise
        return _driver.TaskCommit(task, prepared, count, gate=_gate_of(plan))

    def _commit(self, messages: Sequence[Any], batch: int) -> bool:
        records = self.plan.records()
        try:
            written = _driver.commit(records, self.plan.bootstrap_servers, messages, batch,
                                     gate=self.plan.gate,
                                     producer_config=self.plan.producer_config,
                                     crash=self.plan.crash_at,
                                     recovered=(self.plan.done,) if self._made_here else None)
        finally:
            records.close()
        counted = sum(m.records for m in messages if m is not None)
        log.info("sink %s batch %d: %s (%d records in %d tasks)", self.plan.sink_id, batch,
                 "committed" if written else "a replay, aborted", counted, len(messages))
        return written

    def _abort(self, messages: Sequence[Any], batch: int) -> None:
        log.warning("sink %s batch %s failed: aborting its transactions", self.plan.sink_id,
                    batch)
        records = self.plan.records()
        try:
            _driver.abort(records, self.plan.bootstrap_servers, messages, batch,
                          gate=self.plan.gate, producer_config=self.plan.producer_config)
        finally:
            records.close()


class StreamWriter(_Writing, DataSourceStreamArrowWriter):
    """``writeStream.format("eosclient-kafka")``: one atomic decision per micro-batch.

    Spark makes one to plan each batch (pickled to the tasks) and another, in another
    process, to commit it; that one is made just before its commit, so its plan's recovery
    holds there."""

    def __init__(self, plan: WriterPlan) -> None:
        self.plan = plan
        self._made_here = True

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        context = TaskContext.get()
        batch = context.getLocalProperty(_BATCH_ID) if context is not None else None
        return self._write(iterator, int(batch) if batch is not None else None)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._commit(messages, batchId)  # a replay of a committed batch: aborted, not an error

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._abort(messages, batchId)


class BatchWriter(_Writing, DataSourceArrowWriter):
    """``write.format("eosclient-kafka")``: the whole job in one decision, as batch
    ``batchId`` of the sink (the option), or ``done + 1`` (one job per sinkId at a time).

    With ``batchId``, a job whose batch is done already writes nothing (a replay, as
    ``foreachBatch`` replays a micro-batch: :class:`~eosclient.spark.ExactlyOnceKafkaSink`'s
    ``datasource`` mode)."""

    def __init__(self, plan: WriterPlan) -> None:
        self.plan = plan
        self.batch = plan.batch_id if plan.batch_id is not None else \
            0 if plan.done is None else plan.done + 1

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self._write(iterator, self.batch)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Raises ConfigError (after aborting this job's transactions) when the job chose its
        batch id itself and another job of the sinkId committed that id meanwhile."""
        if not self._commit(messages, self.batch) and self.plan.batch_id is None:
            raise ConfigError(f"another job of sinkId {self.plan.sink_id!r} committed batch "
                              f"{self.batch} while this one ran; this job's rows were aborted "
                              f"(run one job per sinkId at a time)", key="sinkId")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._abort(messages, self.batch)


def _gate_of(plan: WriterPlan) -> Any:
    return None if plan.gate is None else plan.gate.prepared


def _open(plan: WriterPlan, task: int, *, begin: bool = True) -> TransactionalProducer:
    """The task's producer, initialised (fencing an earlier attempt, aborting its transaction),
    with a transaction begun on the topic's partitions (unless ``begin`` is False)."""
    producer = TransactionalProducer(plan.bootstrap_servers,
                                     transactional_id=transactional_id(plan.sink_id, task),
                                     config=plan.producer_config)
    try:
        producer.init_transactions(plan.timeout)
        if begin:
            producer.begin_transaction(plan.partitions)
    except BaseException:
        producer.close(plan.timeout)
        raise
    return producer


def _setting(key: str, value: str) -> object:
    """A Spark option's text as a setting: integers as int (Spark options are all strings), as
    the CLI's ``-X`` reads them; every ssl.*/sasl.* setting stays text."""
    if value.lstrip("-").isdigit() and not key.startswith(("ssl.", "sasl.")):
        return int(value)
    return value


def _getter(options: Mapping[str, str]) -> Any:
    def get(key: str) -> str | None:
        for name, value in options.items():
            if name.lower() == key.lower():
                return value
        return None
    return get


def _name(value: str | None, key: str, *, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if value is None or not _NAME.fullmatch(value):
        raise ConfigError(f"must be 1-200 characters of A-Z a-z 0-9 . _ -, got {value!r}",
                          key=key)
    return value


def positive_option(text: str | None, key: str, kind: type[int] | type[float]) -> Any:
    """An option's text as a positive ``kind``, None if unset; ConfigError naming ``key``."""
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise ConfigError(f"must be a positive number, got {text!r}", key=key) from None
    if value <= 0:
        raise ConfigError(f"must be a positive number, got {text!r}", key=key)
    return value
