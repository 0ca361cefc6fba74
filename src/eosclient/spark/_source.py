"""Spark's ``eosclient-kafka`` reader: a streaming source and a batch reader that read Kafka
topics with read_committed, without the JVM connector.

Theory of operation. Spark's Python data source API (``pyspark.sql.datasource``, Spark 4) plans
each micro-batch as an offset range per Kafka partition: ``latestOffset`` answers each
partition's *last stable offset* (LSO), ``partitions(start, end)`` turns the ranges into one
input partition per Kafka partition, and ``read`` runs on an executor: a
:class:`~eosclient.ReadCommittedConsumer` without a group, assigned that one partition, sought
to the range's start, polled until its position reaches the range's end (:func:`read_range`).
A batch read (``spark.read``) is one such plan, from ``startingOffsets`` to ``endingOffsets``,
read the same way.

Why this is exactly-once with a replay. Below the LSO every transaction is decided, so the
committed records of ``[start, end)`` are the same whenever and however often the range is read:
Spark's checkpoint records the ranges, and a replayed micro-batch reads the same rows. Together
with :class:`~eosclient.spark.ExactlyOnceKafkaSink`, Kafka -> Spark -> Kafka is exactly-once.
The reader's position jumps over aborted records and control markers, so a range may deliver
fewer rows than ``end - start``.

Options (``spark.readStream.format("eosclient-kafka").option(...)``; parsed and checked in
:mod:`eosclient.spark._source_options`, with the meaning Spark's Kafka source gives them):

* ``bootstrap.servers`` (required);
* what to read, exactly one of: ``subscribe`` (comma-separated topics), ``assign`` (JSON
  ``{"topicA": [0, 1]}``) or ``subscribePattern`` (a regular expression matched against whole
  topic names with Python's ``re.fullmatch``: Java's syntax for ordinary patterns; topics
  created later that match are read from the next micro-batch on, from their beginning);
* ``startingOffsets``: ``earliest`` (default), ``latest`` (the LSO when the query starts; not
  for batch reads), or JSON per partition (``{"topicA": {"0": 23, "1": -2}}``; -2 earliest,
  -1 latest, not in batch reads) naming every partition read;
* ``endingOffsets`` (batch reads only): ``latest`` (default: the LSO when the read is planned)
  or JSON per partition, -1 for latest;
* ``maxOffsetsPerTrigger``: at most this many offsets per micro-batch, shared over the
  partitions in proportion to their lag, as Spark's Kafka source shares it (pyspark 4.2+);
* ``timeoutSeconds``: how long one range may take to read (default 60): a range not read by
  then fails its task (Spark retries it) rather than hanging.

Trigger.AvailableNow (pyspark 4.2+, SPARK-55304: admission control for Python sources). At
``prepareForTriggerAvailableNow`` the reader fixes its *target*: every partition's LSO at that
moment. ``latestOffset`` never goes past it, so the run reads what was committed when it started,
in as many batches as ``maxOffsetsPerTrigger`` needs, and ends when a batch's start is the target.
pyspark 4.1 has neither the read limit nor the trigger: ``latestOffset()`` is called with no
arguments and answers the LSOs, Spark runs AvailableNow as one batch, and ``maxOffsetsPerTrigger``
is refused (a ConfigError) rather than ignored.

Columns: ``key`` and ``value`` (binary), ``topic``, ``partition``, ``offset``, ``timestamp``
(UTC), ``timestampType`` (0 CreateTime, 1 LogAppendTime: the record's batch says which),
``headers`` (array of ``key`` string, ``value`` binary), as Spark's Kafka source names and
orders them.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from eosclient._core.types import TopicPartition
from eosclient._processor.topics import partition_count
from eosclient.admin import Admin
from eosclient.consumer import ReadCommittedConsumer
from eosclient.errors import ConfigError, KafkaTimeoutError
from eosclient.spark._source_options import Offsets, Options, Spec, resolve

try:  # pyspark 4.2+: read limits and Trigger.AvailableNow for Python sources (SPARK-55304)
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
    _ADMISSION = True
except ImportError:  # pyspark 4.1: latestOffset() takes no arguments; the names stay unused
    _ADMISSION = False

__all__ = ["SCHEMA", "ReadCommittedKafkaSource", "read_range"]

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int, headers array<struct<key: string, "
          "value: binary>>")
_UTC = datetime.UTC


class ReadCommittedKafkaSource(DataSource):
    """The ``eosclient-kafka`` reader, streaming and batch (see the module docstring).

    Register it once per session, then read::

        spark.dataSource.register(ReadCommittedKafkaSource)
        df = (spark.readStream.format("eosclient-kafka")
              .option("bootstrap.servers", "127.0.0.1:9092").option("subscribe", "in").load())
        once = (spark.read.format("eosclient-kafka")
                .option("bootstrap.servers", "127.0.0.1:9092").option("subscribe", "in").load())
    """

    @classmethod
    def name(cls) -> str:
        return "eosclient-kafka"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        options = Options.parse(self.options, "stream", read_limits=_ADMISSION)
        return _AvailableNowReader(options) if _ADMISSION else _StreamReader(options)

    def reader(self, schema: Any) -> DataSourceReader:
        return _BatchReader(Options.parse(self.options, "batch"))


@dataclass(frozen=True, slots=True)
class _Range(InputPartition):
    """One Kafka partition's offsets ``[start, end)`` of a micro-batch (pickled to a task)."""

    bootstrap_servers: str
    topic: str
    partition: int
    start: int
    end: int
    timeout: float


class _Brokers:
    """The planner's questions to the brokers: which partitions are read now, and where each
    begins or ends. One consumer (no group) kept until :meth:`close`, and for
    ``subscribePattern`` one admin client, to list the topics."""

    def __init__(self, options: Options) -> None:
        self._options = options
        self._consumer: ReadCommittedConsumer | None = None
        self._admin: Admin | None = None

    def partitions(self) -> list[TopicPartition]:
        """The partitions read now, found anew (new partitions, new matching topics)."""
        options = self._options
        return options.subscription.partitions(
            self._topics,
            lambda topic: partition_count(options.bootstrap_servers, topic, options.timeout))

    def offsets(self, spec: Spec, key: str,
                partitions: list[TopicPartition] | None = None) -> Offsets:
        """``spec`` (an option's value, named ``key`` in errors) as offsets of ``partitions``
        (default: those read now)."""
        tps = self.partitions() if partitions is None else partitions
        return resolve(spec, tps, key, self._positions)

    def close(self) -> None:
        for client in (self._consumer, self._admin):
            if client is not None:
                client.close()
        self._consumer = self._admin = None

    def _topics(self) -> list[str]:
        if self._admin is None:
            self._admin = Admin(self._options.bootstrap_servers)
        return self._admin.list_topics(timeout=self._options.timeout)

    def _positions(self, tps: list[TopicPartition], which: str) -> dict[TopicPartition, int]:
        """Each partition's start (``earliest``) or LSO (``latest``)."""
        consumer = self._consumer
        if consumer is None:
            consumer = self._consumer = ReadCommittedConsumer(self._options.bootstrap_servers)
        if set(consumer.assignment()) != set(tps):
            consumer.assign(tps)
        (consumer.seek_to_beginning if which == "earliest" else consumer.seek_to_end)(tps)
        return {tp: consumer.position(tp, self._options.timeout) for tp in tps}


class _StreamReader(DataSourceStreamReader):
    """Offsets on the driver (one :class:`_Brokers` kept for the query), ranges read on
    executors.

    Spark calls ``latestOffset(start, limit)`` from pyspark 4.2 (it reads the signature), and
    ``latestOffset()`` in 4.1.
    """

    def __init__(self, options: Options) -> None:
        self._options = options
        self._brokers = _Brokers(options)
        self._target: Offsets | None = None   # Trigger.AvailableNow's end, fixed at its start

    def initialOffset(self) -> Offsets:
        return self._brokers.offsets(self._options.starting, "startingOffsets")

    def latestOffset(self, start: Offsets | None = None,
                     limit: ReadLimit | None = None) -> Offsets:
        if start is None:       # pyspark 4.1: no start, so no limit
            return self._latest()
        # Never behind the start: a JSON startingOffsets past the LSO waits for it.
        latest = _held(start, self._latest() if self._target is None else self._target)
        budget = self._budget(limit)
        return latest if budget is None else _capped(start, latest, budget)

    def _latest(self) -> Offsets:
        return self._brokers.offsets("latest", "startingOffsets")

    def _budget(self, limit: ReadLimit | None) -> int | None:
        """The offsets a batch may take: none for ReadAllAvailable (Trigger.Once, or Spark's
        own choice: the option must then be ignored), else the limit's or the option's."""
        if isinstance(limit, ReadAllAvailable):
            return None
        if isinstance(limit, ReadMaxRows):
            return limit.max_rows
        return self._options.max_offsets

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        return _ranges(self._options, start, end)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _Range)
        return read_range(partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: Spark's checkpoint keeps the offsets."""

    def stop(self) -> None:
        self._brokers.close()


if _ADMISSION:
    class _AvailableNowReader(_StreamReader, SupportsTriggerAvailableNow):
        """The reader with pyspark 4.2's read limit and Trigger.AvailableNow."""

        def getDefaultReadLimit(self) -> ReadLimit:
            max_offsets = self._options.max_offsets
            return ReadAllAvailable() if max_offsets is None else ReadMaxRows(max_offsets)

        def prepareForTriggerAvailableNow(self) -> None:
            """Fix the run's end: each partition's LSO now. A partition created later, and
            whatever is committed later, waits for the next run."""
            self._target = self._latest()


class _BatchReader(DataSourceReader):
    """``spark.read``: one plan from ``startingOffsets`` to ``endingOffsets`` over the
    partitions read when it is planned, its ranges read as a stream's are."""

    def __init__(self, options: Options) -> None:
        self._options = options

    def partitions(self) -> Sequence[InputPartition]:
        """The ranges (planned on the driver).

        Raises:
            ConfigError: a JSON offsets option does not name exactly the partitions read, or
                a partition would end before it starts (``endingOffsets``).
        """
        options = self._options
        brokers = _Brokers(options)
        try:
            tps = brokers.partitions()
            start = brokers.offsets(options.starting, "startingOffsets", tps)
            end = brokers.offsets(options.ending, "endingOffsets", tps)
        finally:
            brokers.close()
        behind = [f"{topic}-{p} ends at {stop} before it starts at {start[topic][p]}"
                  for topic, ends in end.items() for p, stop in ends.items()
                  if stop < start[topic][p]]
        if behind:
            raise ConfigError("; ".join(behind), key="endingOffsets")
        return _ranges(options, start, end)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _Range)
        return read_range(partition)


def _ranges(options: Options, start: Offsets, end: Offsets) -> list[InputPartition]:
    """One :class:`_Range` per partition with offsets between ``start`` and ``end``."""
    return [_Range(options.bootstrap_servers, topic, int(p), _start_of(start, topic, p), stop,
                   options.timeout)
            for topic, ends in end.items() for p, stop in ends.items()
            if stop > _start_of(start, topic, p)]


def _held(start: Offsets, target: Offsets) -> Offsets:
    """A batch's latest offsets: ``target`` (the LSOs, or an AvailableNow run's end), never
    behind ``start`` (an LSO can move back when a log is truncated; a JSON startingOffsets may
    be past it), with ``start``'s partitions kept (a topic no longer matched, deleted), so an
    AvailableNow run reaches an end equal to its start, and Spark stops it."""
    out = {topic: {p: max(end, _start_of(start, topic, p)) for p, end in ends.items()}
           for topic, ends in target.items()}
    for topic, ends in start.items():
        for p, offset in ends.items():
            out.setdefault(topic, {}).setdefault(p, offset)
    return out


def _start_of(start: Offsets, topic: str, partition: str) -> int:
    """Where a range of ``partition`` begins: a partition created since ``start`` was planned
    is read from its beginning (offset 0, or its log start: the reader resets to earliest)."""
    return start.get(topic, {}).get(partition, 0)


def _capped(start: Offsets, latest: Offsets, budget: int) -> Offsets:
    """``latest``, moved back so that at most ``budget`` offsets are read over all partitions,
    shared in proportion to each partition's lag as Spark's Kafka source shares
    ``maxOffsetsPerTrigger``; the shares are rounded down and the offsets left over go to the
    largest remainders, so a batch takes exactly ``budget`` (Spark rounds small shares up and
    may take a few more)."""
    lag = {(topic, p): max(0, end - _start_of(start, topic, p))
           for topic, ends in latest.items() for p, end in ends.items()}
    total = sum(lag.values())
    if total <= budget:
        return latest
    share = {tp: budget * n // total for tp, n in lag.items()}
    left = budget - sum(share.values())
    for tp in sorted(lag, key=lambda tp: -(budget * lag[tp] % total))[:left]:
        share[tp] += 1
    return {topic: {p: _start_of(start, topic, p) + share[topic, p] for p in ends}
            for topic, ends in latest.items()}


def read_range(part: _Range) -> Iterator[tuple[Any, ...]]:
    """The committed records of one range, as rows of :data:`SCHEMA`.

    Raises:
        KafkaTimeoutError: the range was not read within its timeout (the task fails; Spark
            retries it).
    """
    tp = TopicPartition(part.topic, part.partition)
    deadline = time.monotonic() + part.timeout
    consumer = ReadCommittedConsumer(part.bootstrap_servers,
                                     config={"auto.offset.reset": "earliest"})
    try:
        consumer.assign([tp])
        consumer.seek(tp, part.start)
        while consumer.position(tp, part.timeout) < part.end:
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaTimeoutError(
                    f"{part.topic}-{part.partition}: offsets {part.start}..{part.end} not read "
                    f"within {part.timeout:g} s (position {consumer.position(tp)})")
            for c in consumer.poll_batch(min(left, 1.0)).values():
                for offset, key, value, stamp, kind, headers in zip(
                        c.offsets, c.keys, c.values, c.timestamps, c.timestamp_types,
                        c.headers, strict=True):
                    if offset >= part.end:
                        return
                    yield (key, value, part.topic, part.partition, offset,
                           datetime.datetime.fromtimestamp(stamp / 1000, tz=_UTC), kind,
                           [(k, v) for k, v in headers])
    finally:
        consumer.close()
