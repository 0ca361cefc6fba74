"""A Spark streaming source that reads Kafka topics with read_committed, without the JVM connector.

Theory of operation. Spark's Python data source API (``pyspark.sql.datasource``, Spark 4) plans
each micro-batch as an offset range per Kafka partition: ``latestOffset`` answers each
partition's *last stable offset* (LSO), ``partitions(start, end)`` turns the ranges into one
input partition per Kafka partition, and ``read`` runs on an executor: a
:class:`~eosclient.ReadCommittedConsumer` without a group, assigned that one partition, sought
to the range's start, polled until its position reaches the range's end.

Why this is exactly-once with a replay. Below the LSO every transaction is decided, so the
committed records of ``[start, end)`` are the same whenever and however often the range is read:
Spark's checkpoint records the ranges, and a replayed micro-batch reads the same rows. Together
with :class:`~eosclient.spark.ExactlyOnceKafkaSink`, Kafka -> Spark -> Kafka is exactly-once.
The reader's position jumps over aborted records and control markers, so a range may deliver
fewer rows than ``end - start``.

Options (``spark.readStream.format("eosclient-kafka").option(...)``):

* ``bootstrap.servers`` (required) and ``subscribe``: a comma-separated list of topics;
* ``startingOffsets``: ``earliest`` (default) or ``latest`` (the LSO when the query starts);
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
(UTC), ``headers`` (array of ``key`` string, ``value`` binary), as Spark's Kafka source names
them.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from eosclient._core.types import TopicPartition
from eosclient._processor.topics import partition_count
from eosclient.consumer import ReadCommittedConsumer
from eosclient.errors import ConfigError, KafkaTimeoutError
from eosclient.spark._writer import positive_option

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

__all__ = ["SCHEMA", "ReadCommittedKafkaSource"]

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, headers array<struct<key: string, value: binary>>")
_UTC = datetime.UTC
Offsets = dict[str, dict[str, int]]  # topic -> partition (a str: JSON keys) -> offset


class ReadCommittedKafkaSource(DataSource):
    """The ``eosclient-kafka`` streaming source (see the module docstring).

    Register it once per session, then read::

        spark.dataSource.register(ReadCommittedKafkaSource)
        df = (spark.readStream.format("eosclient-kafka")
              .option("bootstrap.servers", "127.0.0.1:9092").option("subscribe", "in").load())
    """

    @classmethod
    def name(cls) -> str:
        return "eosclient-kafka"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        options = _Options.parse(self.options)
        return _AvailableNowReader(options) if _ADMISSION else _StreamReader(options)


@dataclass(frozen=True, slots=True)
class _Options:
    bootstrap_servers: str
    topics: tuple[str, ...]
    starting: str
    max_offsets: int | None
    timeout: float

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> _Options:
        """Raises ConfigError naming the option."""
        def get(key: str, default: str | None = None) -> str | None:
            for name, value in options.items():
                if name.lower() == key.lower():
                    return value
            return default

        servers = get("bootstrap.servers") or get("kafka.bootstrap.servers")
        if not servers:
            raise ConfigError("the source needs the brokers: .option('bootstrap.servers', "
                              "'host:port')", key="bootstrap.servers")
        topics = tuple(t.strip() for t in (get("subscribe") or "").split(",") if t.strip())
        if not topics:
            raise ConfigError("name the topics to read: .option('subscribe', 'a,b')",
                              key="subscribe")
        starting = (get("startingOffsets", "earliest") or "").lower()
        if starting not in ("earliest", "latest"):
            raise ConfigError(f"must be earliest or latest, got {starting!r}",
                              key="startingOffsets")
        max_offsets = positive_option(get("maxOffsetsPerTrigger"), "maxOffsetsPerTrigger", int)
        if max_offsets is not None and not _ADMISSION:
            raise ConfigError("needs pyspark 4.2 or later (read limits for Python sources)",
                              key="maxOffsetsPerTrigger")
        return cls(servers, topics, starting, max_offsets,
                   positive_option(get("timeoutSeconds"), "timeoutSeconds", float) or 60.0)


@dataclass(frozen=True, slots=True)
class _Range(InputPartition):
    """One Kafka partition's offsets ``[start, end)`` of a micro-batch (pickled to a task)."""

    bootstrap_servers: str
    topic: str
    partition: int
    start: int
    end: int
    timeout: float


class _StreamReader(DataSourceStreamReader):
    """Offsets on the driver (one consumer kept for the query), ranges read on executors.

    Spark calls ``latestOffset(start, limit)`` from pyspark 4.2 (it reads the signature), and
    ``latestOffset()`` in 4.1.
    """

    def __init__(self, options: _Options) -> None:
        self._options = options
        self._consumer: ReadCommittedConsumer | None = None
        self._target: Offsets | None = None   # Trigger.AvailableNow's end, fixed at its start

    def initialOffset(self) -> Offsets:
        return self._ends(self._options.starting)

    def latestOffset(self, start: Offsets | None = None,
                     limit: ReadLimit | None = None) -> Offsets:
        if start is None:       # pyspark 4.1: no start, so no limit
            return self._ends("latest")
        latest = self._ends("latest") if self._target is None else _held(start, self._target)
        budget = self._budget(limit)
        return latest if budget is None else _capped(start, latest, budget)

    def _budget(self, limit: ReadLimit | None) -> int | None:
        """The offsets a batch may take: none for ReadAllAvailable (Trigger.Once, or Spark's
        own choice: the option must then be ignored), else the limit's or the option's."""
        if isinstance(limit, ReadAllAvailable):
            return None
        if isinstance(limit, ReadMaxRows):
            return limit.max_rows
        return self._options.max_offsets

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        options = self._options
        return [_Range(options.bootstrap_servers, topic, int(p), _start_of(start, topic, p),
                       stop, options.timeout)
                for topic, ends in end.items() for p, stop in ends.items()
                if stop > _start_of(start, topic, p)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _Range)
        return read_range(partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: Spark's checkpoint keeps the offsets."""

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _ends(self, which: str) -> Offsets:
        """Each partition's start (``earliest``) or LSO (``latest``), partitions found anew."""
        options = self._options
        tps = [TopicPartition(topic, p) for topic in options.topics
               for p in range(partition_count(options.bootstrap_servers, topic,
                                              options.timeout))]
        consumer = self._consumer
        if consumer is None:
            consumer = self._consumer = ReadCommittedConsumer(options.bootstrap_servers)
        if set(consumer.assignment()) != set(tps):
            consumer.assign(tps)
        (consumer.seek_to_beginning if which == "earliest" else consumer.seek_to_end)(tps)
        out: Offsets = {}
        for tp in tps:
            out.setdefault(tp.topic, {})[str(tp.partition)] = consumer.position(
                tp, options.timeout)
        return out


if _ADMISSION:
    class _AvailableNowReader(_StreamReader, SupportsTriggerAvailableNow):
        """The reader with pyspark 4.2's read limit and Trigger.AvailableNow."""

        def getDefaultReadLimit(self) -> ReadLimit:
            max_offsets = self._options.max_offsets
            return ReadAllAvailable() if max_offsets is None else ReadMaxRows(max_offsets)

        def prepareForTriggerAvailableNow(self) -> None:
            """Fix the run's end: each partition's LSO now. A partition created later, and
            whatever is committed later, waits for the next run."""
            self._target = self._ends("latest")


def _held(start: Offsets, target: Offsets) -> Offsets:
    """The latest offsets of an AvailableNow run: ``target``, never behind ``start`` (an LSO
    can move back when a log is truncated), with ``start``'s partitions kept, so the run
    reaches an end equal to its start, and Spark stops it."""
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
            for r in consumer.poll(min(left, 1.0)):
                if r.offset >= part.end:
                    return
                stamp = datetime.datetime.fromtimestamp(r.timestamp_ms / 1000, tz=_UTC)
                yield (r.key, r.value, r.topic, r.partition, r.offset, stamp,
                       [(k, v) for k, v in r.headers])
    finally:
        consumer.close()
