"""Kafka -> Spark -> Kafka, exactly once, with no JVM connector: ReadCommittedKafkaSource feeding
ExactlyOnceKafkaSink, on real brokers, judged by the checker (``eos.src`` headers built in Spark
from the source's topic, partition and offset columns)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from eosclient import TransactionalProducer
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


def test_bad_options_fail_when_the_query_starts(spark: SparkSession, tmp_path: Path) -> None:
    spark.dataSource.register(ReadCommittedKafkaSource)
    frame = spark.readStream.format("eosclient-kafka").option("subscribe", "t").load()
    query = (frame.writeStream.foreachBatch(lambda df, batch_id: None)
             .option("checkpointLocation", str(tmp_path / "c")).start())
    with pytest.raises(Exception, match=r"bootstrap\.servers"):
        query.awaitTermination(60)
