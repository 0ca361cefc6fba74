"""Kafka -> Spark -> Kafka, exactly once, with no JVM connector: ReadCommittedKafkaSource feeding
ExactlyOnceKafkaSink, on real brokers, judged by the checker (``eos.src`` headers built in Spark
from the source's topic, partition and offset columns). Then the reader's options, on noida-db:
offsets per partition, assign, subscribePattern, the batch reader, the timestampType column."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, DataFrameReader, SparkSession

from eosclient import Admin, ReadCommittedConsumer, TopicPartition, TransactionalProducer
from eosclient.processor import SOURCE_HEADER
from eosclient.spark import ExactlyOnceKafkaSink, ReadCommittedKafkaSource
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import check

pytestmark = [pytest.mark.spark, pytest.mark.broker]

Names = Callable[[str], str]
PARTITIONS = 2


def write(broker: RunningBroker, topic: str, txn_id: str, rounds: range) -> int:
    """Transactions of 30 records over the partitions, every third aborted; the committed count."""
    committed = 0
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=txn_id) as producer:
        producer.init_transactions(15)
        for t in rounds:
            producer.begin_transaction()
            for i in range(30):
                producer.send(topic, f"{t}-{i}".encode(), partition=i % PARTITIONS)
            if t % 3 == 1:
                producer.abort_transaction(15)
            else:
                producer.commit_transaction(15)
                committed += 30
    return committed


def last_stable_offsets(broker: RunningBroker, topic: str) -> list[int]:
    """Each partition's LSO (the end a read_committed consumer sees)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer = ReadCommittedConsumer(broker.bootstrap_servers)
    try:
        consumer.assign(tps)
        consumer.seek_to_end(tps)
        return [consumer.position(tp, 15) for tp in tps]
    finally:
        consumer.close()


def offsets_in(progress_offset: str | None) -> int:
    """The offsets summed over partitions of a progress report's source offset (JSON)."""
    if progress_offset in (None, "null"):
        return 0
    return sum(sum(parts.values()) for parts in json.loads(progress_offset).values())


def copy(spark: SparkSession, broker: RunningBroker, source: str, sink: str, *, sink_id: str,
         checkpoint: Path, max_offsets: int) -> None:
    """One availableNow run of the query: source -> (eos.src header) -> sink."""
    frame = (spark.readStream.format("eosclient-kafka")
             .option("bootstrap.servers", broker.bootstrap_servers).option("subscribe", source)
             .option("maxOffsetsPerTrigger", str(max_offsets)).load())
    out = frame.selectExpr(
        "key", "value",
        f"array(named_struct('key', '{SOURCE_HEADER}', 'value', cast(concat(topic, '/', "
        "partition, '/', offset) as binary))) as headers")
    sink_fn = ExactlyOnceKafkaSink(bootstrap_servers=broker.bootstrap_servers, topic=sink,
                                   sink_id=sink_id)

    def batch(df: DataFrame, batch_id: int) -> None:
        sink_fn(df, batch_id)

    query = (out.writeStream.foreachBatch(batch).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the query did not finish"
    assert query.exception() is None


def test_kafka_to_spark_to_kafka_exactly_once_across_a_restart(
        spark: SparkSession, broker: RunningBroker, unique_name: Names, tmp_path: Path) -> None:
    spark.dataSource.register(ReadCommittedKafkaSource)
    source = topics.create_topic(broker, unique_name("in"), PARTITIONS)
    sink = topics.create_topic(broker, unique_name("out"), PARTITIONS)
    txn_id, sink_id, checkpoint = unique_name("w"), unique_name("s"), tmp_path / "checkpoint"
    first = write(broker, source, txn_id, range(0, 6))
    copy(spark, broker, source, sink, sink_id=sink_id, checkpoint=checkpoint, max_offsets=50)
    report = check(broker.bootstrap_servers, source, sink)
    assert report.ok and report.output_records == first == 120, str(report)
    # More input, the same checkpoint: only what is new is read, nothing twice.
    second = write(broker, source, txn_id, range(6, 9))
    copy(spark, broker, source, sink, sink_id=sink_id, checkpoint=checkpoint, max_offsets=50)
    report = check(broker.bootstrap_servers, source, sink)
    assert report.ok and report.output_records == first + second == 180, str(report)


@pytest.mark.parametrize("max_offsets", [None, 50])
def test_available_now_reads_what_was_committed_at_its_start_then_stops(
        spark: SparkSession, broker: RunningBroker, unique_name: Names, tmp_path: Path,
        max_offsets: int | None) -> None:
    # Spark used to run AvailableNow as one batch (the source lacked the trigger's API).
    spark.dataSource.register(ReadCommittedKafkaSource)
    source = topics.create_topic(broker, unique_name("in"), PARTITIONS)
    txn_id = unique_name("w")
    committed = write(broker, source, txn_id, range(0, 6))
    stable_offsets = sum(last_stable_offsets(broker, source))
    reader = (spark.readStream.format("eosclient-kafka")
              .option("bootstrap.servers", broker.bootstrap_servers).option("subscribe", source))
    if max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    batches: list[list[str]] = []

    def collect(df: DataFrame, batch_id: int) -> None:
        batches.append([r.value.decode() for r in df.select("value").collect()])
        if len(batches) == 1:    # committed after the run started: left for the next run
            write(broker, source, txn_id, range(6, 7))

    query = (reader.load().writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "c"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the query did not finish"
    assert query.exception() is None
    rows = [value for batch in batches for value in batch]
    expected = {f"{t}-{i}" for t in range(6) if t % 3 != 1 for i in range(30)}
    assert len(rows) == committed == 120 and set(rows) == expected
    inputs = [p["numInputRows"] for p in query.recentProgress]
    assert sum(inputs) == 120
    if max_offsets is None:
        assert len(batches) == 1, inputs
    else:   # every batch but the last takes max_offsets offsets (rows: fewer, less markers)
        assert len(batches) == -(-stable_offsets // max_offsets) > 1, inputs
        spans = [offsets_in(p["sources"][0]["endOffset"]) - offsets_in(
            p["sources"][0]["startOffset"]) for p in query.recentProgress]
        assert spans[:-1] == [max_offsets] * (len(spans) - 1), spans


@pytest.mark.parametrize(("options", "error"), [
    ({}, r"bootstrap\.servers"),
    ({"bootstrap.servers": "127.0.0.1:9", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
    ({"bootstrap.servers": "127.0.0.1:9", "maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger"),
    ({"bootstrap.servers": "127.0.0.1:9", "assign": '{"t": [0]}'}, "assign"),
    ({"bootstrap.servers": "127.0.0.1:9", "startingOffsets": '{"t": {"0": -3}}'},
     "startingOffsets"),
    ({"bootstrap.servers": "127.0.0.1:9", "endingOffsets": "latest"}, "endingOffsets"),
])
def test_bad_options_fail_when_the_query_starts(
        spark: SparkSession, tmp_path: Path, options: dict[str, str], error: str) -> None:
    spark.dataSource.register(ReadCommittedKafkaSource)
    frame = spark.readStream.format("eosclient-kafka").option("subscribe", "t").options(
        **options).load()
    query = (frame.writeStream.foreachBatch(lambda df, batch_id: None)
             .option("checkpointLocation", str(tmp_path / "c")).start())
    with pytest.raises(Exception, match=error):
        query.awaitTermination(60)


def values_of(frame: DataFrame) -> set[str]:
    return {r.value.decode() for r in frame.select("value").collect()}


def committed_values(rounds: range, partition: int, below: int | None = None) -> set[str]:
    """What write() committed to ``partition`` (offsets below ``below`` only, when given: a
    transaction holds 15 records per partition and its marker)."""
    values = [f"{t}-{i}" for t in rounds for i in range(30) if i % PARTITIONS == partition
              and t % 3 != 1]
    if below is not None:
        assert rounds.start == 0 and below <= 15  # within the first, committed, transaction
        values = values[:below]
    return set(values)


def read_stream(spark: SparkSession, options: dict[str, str], checkpoint: Path) -> list[str]:
    """One availableNow run of the source with ``options``: the values read."""
    rows: list[str] = []

    def collect(df: DataFrame, batch_id: int) -> None:
        rows.extend(r.value.decode() for r in df.select("value").collect())

    query = (spark.readStream.format("eosclient-kafka").options(**options).load()
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the query did not finish"
    assert query.exception() is None
    return rows


def test_starting_offsets_per_partition_and_assign(
        spark: SparkSession, noida_broker: RunningBroker, unique_name: Names,
        tmp_path: Path) -> None:
    spark.dataSource.register(ReadCommittedKafkaSource)
    source = topics.create_topic(noida_broker, unique_name("in"), PARTITIONS)
    write(noida_broker, source, unique_name("w"), range(0, 3))
    servers = {"bootstrap.servers": noida_broker.bootstrap_servers}
    # Partition 0 from its LSO (nothing yet), partition 1 from offset 5.
    rows = read_stream(spark, {**servers, "subscribe": source,
                               "startingOffsets": json.dumps({source: {"0": -1, "1": 5}})},
                       tmp_path / "json")
    assert sorted(rows) == sorted(committed_values(range(3), 1) - committed_values(range(1), 1, 5))
    # assign: partition 0 only, from its earliest offset (-2).
    rows = read_stream(spark, {**servers, "assign": json.dumps({source: [0]}),
                               "startingOffsets": json.dumps({source: {"0": -2}})},
                       tmp_path / "assign")
    assert sorted(rows) == sorted(committed_values(range(3), 0))


def test_subscribe_pattern_reads_a_topic_created_after_the_query_started(
        spark: SparkSession, noida_broker: RunningBroker, unique_name: Names,
        tmp_path: Path) -> None:
    spark.dataSource.register(ReadCommittedKafkaSource)
    prefix = unique_name("pat")
    first = topics.create_topic(noida_broker, f"{prefix}-a", PARTITIONS)
    # Matches in part only: not read (re.search would read it; the whole name must match).
    partly = topics.create_topic(noida_broker, f"x{prefix}-b", PARTITIONS)
    write(noida_broker, first, unique_name("w"), range(0, 1))
    write(noida_broker, partly, unique_name("w"), range(0, 1))
    seen: list[tuple[str, str]] = []

    def collect(df: DataFrame, batch_id: int) -> None:
        seen.extend((r.topic, r.value.decode()) for r in df.select("topic", "value").collect())

    query = (spark.readStream.format("eosclient-kafka")
             .option("bootstrap.servers", noida_broker.bootstrap_servers)
             .option("subscribePattern", re.escape(prefix) + "-.*").load()
             .writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "c")).start())
    try:
        query.processAllAvailable()
        assert {topic for topic, _ in seen} == {first} and len(seen) == 30
        later = topics.create_topic(noida_broker, f"{prefix}-c", PARTITIONS)
        write(noida_broker, later, unique_name("w"), range(0, 1))
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(v for t, v in seen if t == later) == sorted(f"0-{i}" for i in range(30))
    assert len(seen) == 60, seen


def test_a_batch_read_ends_at_ending_offsets_and_tells_each_timestamp_type(
        spark: SparkSession, noida_broker: RunningBroker, unique_name: Names) -> None:
    spark.dataSource.register(ReadCommittedKafkaSource)
    source = topics.create_topic(noida_broker, unique_name("in"), PARTITIONS)
    write(noida_broker, source, unique_name("w"), range(0, 3))
    appended = unique_name("lat")
    with Admin(noida_broker.bootstrap_servers) as admin:   # noida-db honours it (Tansu: not)
        admin.create_topic(appended, PARTITIONS,
                           config={"message.timestamp.type": "LogAppendTime"})
    write(noida_broker, appended, unique_name("w"), range(0, 1))
    def reader(topics_read: str) -> DataFrameReader:   # a new one: options accumulate
        return spark.read.format("eosclient-kafka").option(
            "bootstrap.servers", noida_broker.bootstrap_servers).option("subscribe", topics_read)

    # Partition 0 to its LSO (-1), partition 1 to offset 10; from earliest, the default.
    frame = reader(source).option(
        "endingOffsets", json.dumps({source: {"0": -1, "1": 10}})).load()
    assert values_of(frame) == committed_values(range(3), 0) | committed_values(range(1), 1, 10)
    assert frame.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType", "headers"]
    now = datetime.datetime.now()  # Spark gives the session's local time, naive
    stamps = frame.select("timestamp", "timestampType").collect()
    assert {r.timestampType for r in stamps} == {0}     # CreateTime, set by the producer
    assert all(abs((r.timestamp - now).total_seconds()) < 600 for r in stamps)
    both = reader(f"{source},{appended}").load()
    kinds = {(r.topic, r.timestampType) for r in both.select("topic", "timestampType").collect()}
    assert kinds == {(source, 0), (appended, 1)}
    # The default end: each partition's LSO.
    assert values_of(reader(source).load()) == committed_values(
        range(3), 0) | committed_values(range(3), 1)
