"""A driver on the standalone cluster (``--master spark://...``), run by ``test_cluster.py`` as a
child process: the test process may already hold a local SparkContext, and a process has one.

``atomic``, ``partitioned`` and ``writer`` stream the text files of ``--input`` (one file per
micro-batch) to Kafka: through ``ExactlyOnceKafkaSink`` in that mode, or through the
``eosclient-kafka`` data source's streaming writer. In batch ``--hold-batch`` one task (the
first to get there; once per query) stops mid-batch after a few rows, writes ``held-<pid>`` in
``--markers`` (its Python worker's pid, its partition, the interpreter it runs and where it
imported eosclient from: executors must import it as a user's cluster would, installed in the
interpreter ``PYSPARK_PYTHON`` names) and waits there (at most ``HOLD_SECONDS``) for the test
to kill its executor (or the driver); every task attempt writes ``ran-<batch>-<partition>-<task
attempt id>``, and the driver ``driver-<application id>`` once its application is registered (a
restarted driver is a new application; the ids sort by start). At the end the job prints the
sink's outcomes as JSON (the writer has none: ``[]``).

``source`` reads ``--source-topic`` with the ``eosclient-kafka`` source (read_committed,
``MAX_OFFSETS`` offsets per micro-batch, so several batches) and writes it with the data source
writer, each record with an ``eos.src`` header naming its topic, partition and offset (the
checker matches output to input by it). A Python UDF in the reading task holds it at the
record at offset ``HOLD_OFFSET`` of partition 0 (a committed record, in batch 1), and every
attempt that reaches that record writes its ``ran-<hold batch>-...`` marker.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col, expr, udf
from pyspark.sql.types import BinaryType, StringType

from eosclient.processor import SOURCE_HEADER
from eosclient.spark import ExactlyOnceKafkaDataSource, ExactlyOnceKafkaSink
from eosclient.spark._task import TaskResult

HOLD_SECONDS = 60.0
HELD_AFTER = 5  # rows of a held task that pass before it stops
QUERY_SECONDS = 150
MAX_OFFSETS = 50  # per micro-batch of the source: batch 1 reads offsets 25-49 of each partition
HOLD_OFFSET = 35  # committed (test_source.write(): offsets 16-31 are an aborted transaction's)


def build_cluster_session(master: str, app: str) -> SparkSession:
    """A driver on ``master``: loopback only, no UI, shuffles of two partitions (one per
    worker), this interpreter on the executors."""
    os.environ.update({"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                       "SPARK_LOCAL_IP": "127.0.0.1"})
    session = (SparkSession.builder.master(master).appName(app)
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.executor.cores", "1")
               .config("spark.executor.memory", "768m")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


# -- what runs on the executors (pickled by value: this file is __main__ there) ------------------


def _ran(markers: str, batch_id: int) -> None:
    """Record that this task attempt ran (``taskAttemptId`` is unique in the application; the
    attempt number is not: a stage run again numbers its tasks' attempts from 0)."""
    context = TaskContext.get()
    assert context is not None
    Path(markers, f"ran-{batch_id}-{context.partitionId()}-{context.taskAttemptId()}").touch()


def _holds(markers: str, batch_id: int, hold_batch: int) -> bool:
    """Whether to hold here: in ``hold_batch``, once per query (no task held before)."""
    return batch_id == hold_batch and not any(Path(markers).glob("held-*"))


def _hold(markers: str) -> None:
    """Tell the test where this task's Python worker is (its partition, and what it imported
    eosclient from, with which interpreter), then wait for the kill (bounded: a test that never
    kills finds the batch written late, and fails on its own checks)."""
    import eosclient  # noqa: PLC0415 - what the executor's Python finds

    context = TaskContext.get()
    assert context is not None
    where = {"pid": os.getpid(), "partition": context.partitionId(), "python": sys.executable,
             "eosclient": eosclient.__file__}
    Path(markers, f"held-{os.getpid()}.tmp").write_text(json.dumps(where))
    Path(markers, f"held-{os.getpid()}.tmp").rename(Path(markers, f"held-{os.getpid()}"))
    time.sleep(HOLD_SECONDS)


def held_rows(markers: str, batch_id: int, hold_batch: int,
              ) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """A row filter that records each attempt, and holds the first task of ``hold_batch``
    after ``HELD_AFTER`` rows."""

    def rows_of(rows: Iterable[Any]) -> Iterator[Any]:
        _ran(markers, batch_id)
        for i, row in enumerate(rows):
            if i == HELD_AFTER and _holds(markers, batch_id, hold_batch):
                _hold(markers)
            yield row

    return rows_of


class HeldSink(ExactlyOnceKafkaSink):
    """The partitioned sink, with each task's rows passed through :func:`held_rows`: a held
    task stops mid-transaction (begun, its first rows handed to the producer)."""

    markers = ""
    hold_batch = -1

    def _task(self, layout: Any, batch_id: int, counts: dict[int, int],
              ) -> Callable[[int, Iterable[Any]], Iterator[TaskResult]]:
        task = super()._task(layout, batch_id, counts)
        rows_of = held_rows(self.markers, batch_id, self.hold_batch)

        def held_task(index: int, rows: Iterable[Any]) -> Iterator[TaskResult]:
            return task(index, rows_of(rows))

        return held_task


# -- the driver ----------------------------------------------------------------------------------


def stream(spark: SparkSession, opts: argparse.Namespace) -> list[dict[str, int]]:
    if opts.mode == "source":
        return _source(spark, opts)
    lines = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(opts.input)
    out = lines.selectExpr("concat(value, '!') as value", "value as key")
    if opts.mode == "writer":
        return _writer(spark, out, opts)
    sink = (HeldSink if opts.mode == "partitioned" else ExactlyOnceKafkaSink)(
        bootstrap_servers=opts.bootstrap, topic=opts.topic, sink_id=opts.sink_id,
        mode=opts.mode, chunk_size=2, timeout=30.0)
    if isinstance(sink, HeldSink):
        sink.markers, sink.hold_batch = opts.markers, opts.hold_batch

    def batch(df: DataFrame, batch_id: int) -> None:
        if opts.mode == "atomic":  # held upstream: the driver's transaction is open, waiting
            df = df.rdd.mapPartitions(held_rows(opts.markers, batch_id, opts.hold_batch)
                                      ).toDF(df.schema)
        sink(df, batch_id)

    with sink:
        query = (out.writeStream.foreachBatch(batch)
                 .option("checkpointLocation", opts.checkpoint)
                 .trigger(availableNow=True).start())
        _finish(query)
        return [{"batch_id": o.batch_id, "written": o.written, "skipped": o.skipped}
                for o in sink.outcomes]


def _writer(spark: SparkSession, out: DataFrame, opts: argparse.Namespace,
            ) -> list[dict[str, int]]:
    """The data source writer, two tasks per batch; a Python UDF holds the task of the hold
    batch that has its line ``HELD_AFTER`` (it runs in the writing task, before the rows reach
    the writer)."""
    markers, hold_batch = opts.markers, opts.hold_batch
    batch_of_file = {int(p.name.split("-")[1].split(".")[0]): i  # in_order(): file i, batch i
                     for i, p in enumerate(sorted(Path(opts.input).iterdir()))}

    def pass_or_hold(value: str) -> str:
        batch_id = batch_of_file[int(value[1:value.index("-")])]
        _ran(markers, batch_id)  # per row: the UDF does not see where a task begins
        if int(value[value.index("-") + 1:-1]) == HELD_AFTER and _holds(markers, batch_id,
                                                                        hold_batch):
            _hold(markers)
        return value

    spark.dataSource.register(ExactlyOnceKafkaDataSource)
    held = out.repartition(2).select(udf(pass_or_hold, StringType())(col("value")).alias("value"),
                                     "key")
    _finish(_write_to_kafka(held, opts))
    return []


def _source(spark: SparkSession, opts: argparse.Namespace) -> list[dict[str, int]]:
    """Kafka -> Spark -> Kafka: the source's reading task holds at one record (a UDF in the
    same task, before the writer), once per query."""
    markers, hold_batch = opts.markers, opts.hold_batch

    def pass_or_hold(value: bytes, partition: int, offset: int) -> bytes:
        if (partition, offset) == (0, HOLD_OFFSET):
            _ran(markers, hold_batch)
            if not any(Path(markers).glob("held-*")):
                _hold(markers)
        return value

    spark.dataSource.register(ExactlyOnceKafkaDataSource)
    frame = (spark.readStream.format("eosclient-kafka").option("bootstrap.servers",
                                                                opts.bootstrap)
             .option("subscribe", opts.source_topic)
             .option("maxOffsetsPerTrigger", str(MAX_OFFSETS)).load())
    held = frame.select(
        udf(pass_or_hold, BinaryType())("value", "partition", "offset").alias("value"), "key",
        expr(f"array(named_struct('key', '{SOURCE_HEADER}', 'value', cast(concat(topic, '/', "
             "partition, '/', offset) as binary))) as headers"))
    _finish(_write_to_kafka(held, opts))
    return []


def _write_to_kafka(frame: Any, opts: argparse.Namespace) -> Any:
    """Start ``frame`` into the topic through the ``eosclient-kafka`` data source writer."""
    return (frame.writeStream.format("eosclient-kafka").option("bootstrap.servers",
                                                               opts.bootstrap)
            .option("topic", opts.topic).option("sinkId", opts.sink_id)
            .option("timeoutSeconds", "30").option("checkpointLocation", opts.checkpoint)
            .trigger(availableNow=True).start())


def _finish(query: Any) -> None:
    if not query.awaitTermination(QUERY_SECONDS):
        query.stop()
        sys.exit("the query did not finish")
    if query.exception() is not None:
        sys.exit(f"the query failed: {query.exception()}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["atomic", "partitioned", "writer", "source"])
    parser.add_argument("--master", required=True)
    for name in ("--bootstrap", "--topic", "--sink-id", "--input", "--checkpoint", "--markers",
                 "--source-topic"):
        parser.add_argument(name)
    parser.add_argument("--hold-batch", type=int, default=-1)
    opts = parser.parse_args()
    spark = build_cluster_session(opts.master, f"eosclient-cluster-{opts.mode}")
    Path(opts.markers, f"driver-{spark.sparkContext.applicationId}").touch()
    try:
        print(json.dumps(stream(spark, opts)))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
