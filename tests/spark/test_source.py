"""Kafka -> Spark -> Kafka, exactly once, with no JVM connector: ReadCommittedKafkaSource feeding
ExactlyOnceKafkaSink, on real brokers, judged by the checker (``eos.src`` headers built in Spark
from the source's topic, partition and offset columns)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from eosclient import ReadCommittedConsumer, TopicPartition, TransactionalProducer
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
