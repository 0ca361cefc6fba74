"""The ``eosclient-kafka`` data source writers on real brokers: batch jobs, failed and retried
tasks, zombie attempts, errors raised on executors."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark import TaskContext, cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.types import StringType, StructField, StructType
from test_writer_crash_points import visible

from eosclient.errors import AbortableError, ConfigError, RecordTypeError
from eosclient.spark import ExactlyOnceKafkaDataSource, ExactlyOnceKafkaSink, _driver, eos_error_of
from eosclient.spark._writer import BatchWriter, StreamWriter, WriterPlan
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker]

Names = Callable[[str], str]
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def save(spark: SparkSession, df: Any, servers: str, topic: str | None, sink_id: str,
         **options: str) -> None:
    spark.dataSource.register(ExactlyOnceKafkaDataSource)
    writer = (df.write.format("eosclient-kafka").mode("append")
              .option("bootstrap.servers", servers).option("sinkId", sink_id)
              .option("timeoutSeconds", "30"))
    if topic is not None:
        writer = writer.option("topic", topic)
    writer.options(**options).save()


def test_a_batch_job_is_written_whole_and_each_job_once(
        spark: SparkSession, broker: RunningBroker, unique_name: Names) -> None:
    topic = topics.create_topic(broker, unique_name("out"), 2)
    sink_id, servers = unique_name("sink"), broker.bootstrap_servers
    first = spark.createDataFrame([(f"a{i}", f"k{i}") for i in range(50)], "value string, "
                                  "key string").repartition(3)
    save(spark, first, servers, topic, sink_id)
    save(spark, first.selectExpr("replace(value, 'a', 'b') as value", "key"), servers, topic,
         sink_id)
    seen = visible(servers, topic, 100)
    assert sorted(seen) == sorted([f"a{i}" for i in range(50)] + [f"b{i}" for i in range(50)])


def _fail_first_attempt(value: str) -> str:
    context = TaskContext.get()
    if value.endswith("7") and context is not None and context.attemptNumber() == 0:
        raise RuntimeError("task killed mid-write")
    return value


def test_a_task_that_fails_mid_write_is_retried_and_written_once(
        spark: SparkSession, broker: RunningBroker, unique_name: Names) -> None:
    topic = topics.create_topic(broker, unique_name("out"), 2)
    servers = broker.bootstrap_servers
    fail = udf(_fail_first_attempt, "string")
    df = spark.createDataFrame([(f"v{i:02d}",) for i in range(40)], "value string") \
        .repartition(2).select(fail("value").alias("value"))
    save(spark, df, servers, topic, unique_name("sink"), chunkSize="3")
    seen = visible(servers, topic, 40)
    assert sorted(seen) == [f"v{i:02d}" for i in range(40)]


def test_a_bad_row_fails_the_job_with_its_error_and_leaves_nothing(
        spark: SparkSession, noida_broker: RunningBroker, unique_name: Names) -> None:
    topic = topics.create_topic(noida_broker, unique_name("out"), 1)
    servers = noida_broker.bootstrap_servers
    df = spark.createDataFrame([(topic, "a"), (None, "b")], "topic string, value string")
    with pytest.raises(Exception, match=r"RecordTypeError.*null topic") as caught:
        save(spark, df, servers, None, unique_name("sink"), ledgerTopic=topic)
    assert not isinstance(caught.value, RecordTypeError)  # Spark's wrapper; the name survives
    error = eos_error_of(caught.value)
    assert isinstance(error, RecordTypeError) and "null topic" in str(error)
    assert read_topic(servers, topic) == []


def test_a_bad_schema_is_refused_on_the_driver_before_any_task(
        spark: SparkSession, noida_broker: RunningBroker, unique_name: Names) -> None:
    topic = topics.create_topic(noida_broker, unique_name("out"), 1)
    df = spark.createDataFrame([(1, "v")], "key int, value string")
    with pytest.raises(Exception, match="'key' must be string or binary"):
        save(spark, df, noida_broker.bootstrap_servers, topic, unique_name("sink"))


def _batch(values: list[str]) -> Iterator[pa.RecordBatch]:
    yield pa.record_batch([pa.array(values)], names=["value"])


def test_a_zombie_attempts_stale_hand_over_is_never_decided(
        spark: SparkSession, broker: RunningBroker, unique_name: Names) -> None:
    topic = topics.create_topic(broker, unique_name("out"), 1)
    servers = broker.bootstrap_servers
    schema = spark.createDataFrame([("v",)], "value string").schema
    plan = WriterPlan.make({"bootstrap.servers": servers, "topic": topic,
                            "sinkId": unique_name("sink")}, schema)
    writer = StreamWriter(plan)
    zombie = writer._write(_batch(["z1", "z2"]), None)  # task 0, first attempt: handed over
    retry = writer._write(_batch(["r1", "r2"]), None)  # task 0 again: fences the zombie
    assert zombie.prepared is not None and retry.prepared is not None
    assert retry.prepared.epoch > zombie.prepared.epoch
    with pytest.raises(AbortableError, match="later attempt of the same task"):
        writer.commit([zombie], 0)  # Spark took the zombie's message
    assert read_topic(servers, topic) == []
    replay = writer._write(_batch(["p1", "p2"]), None)  # the batch replayed
    writer.commit([replay], 0)
    assert sorted(visible(servers, topic, 2)) == ["p1", "p2"]
    assert _driver.CRASH_POINTS  # (the commit's crash points: test_writer_crash_points.py)


def test_foreach_batch_datasource_mode_is_a_thin_layer_over_the_writer(
        spark: SparkSession, broker: RunningBroker, unique_name: Names) -> None:
    topic = topics.create_topic(broker, unique_name("out"), 2)
    servers = broker.bootstrap_servers
    first = spark.createDataFrame([(f"a{i}",) for i in range(20)], "value string").repartition(2)
    second = first.selectExpr("replace(value, 'a', 'b') as value")
    with ExactlyOnceKafkaSink(bootstrap_servers=servers, topic=topic, mode="datasource",
                              sink_id=unique_name("sink")) as sink:
        sink(first, 0)
        sink(second, 0)  # a replay of batch 0 (other rows, to tell): skipped
        sink(second, 1)
        assert [(o.batch_id, o.written, o.skipped) for o in sink.outcomes] == [
            (0, 1, 0), (0, 0, 1), (1, 1, 0)]
    seen = visible(servers, topic, 40)
    assert sorted(seen) == sorted([f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)])


def test_two_batch_jobs_of_one_sink_id_at_once_fail_the_later_one_loudly(
        broker: RunningBroker, unique_name: Names) -> None:
    topic = topics.create_topic(broker, unique_name("out"), 1)
    servers = broker.bootstrap_servers
    options = {"bootstrap.servers": servers, "topic": topic, "sinkId": unique_name("sink")}
    schema = StructType([StructField("value", StringType())])
    first, second = (BatchWriter(WriterPlan.make(options, schema)) for _ in range(2))
    assert first.batch == second.batch == 0  # both planned before either committed
    first.commit([first._write(_batch(["a"]), first.batch)])
    with pytest.raises(ConfigError, match="committed batch 0 while this one ran"):
        second.commit([second._write(_batch(["b"]), second.batch)])
    assert visible(servers, topic, 1) == ["a"]
