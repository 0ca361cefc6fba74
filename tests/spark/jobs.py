"""Spark helpers shared by the tests and the crash job: the session, the query, the inputs.

``local[2,4]``: two task threads, and a task may fail three times before its job does (in local
mode Spark retries a failed task only when the master says so). The Python workers must run
this interpreter, or they would not find eosclient.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from eosclient.spark import ExactlyOnceKafkaDataSource

MASTER = "local[2,4]"


def spark_env() -> dict[str, str]:
    """The environment a Spark driver and its Python workers need here."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1"}


def build_session(app: str) -> SparkSession:
    """A small local session: shuffles of 2 partitions, no UI, loopback only."""
    os.environ.update(spark_env())
    session = (SparkSession.builder.master(MASTER).appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session



def start_query(spark: SparkSession, input_dir: Path | str, checkpoint: Path | str,
                batch: Any) -> Any:
    """The query the tests run and restart: one text file per batch, value -> value + '!'."""
    lines = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(input_dir))
    out = lines.selectExpr("concat(value, '!') as value", "value as key")
    return (out.writeStream.foreachBatch(batch).option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def write_inputs(input_dir: Path, files: int, lines: int) -> list[str]:
    """``files`` text files of ``lines`` unique lines each; return the lines the sink should
    write (each + '!')."""
    input_dir.mkdir(parents=True, exist_ok=True)
    expected = []
    for f in range(files):
        rows = [f"f{f}-{i}" for i in range(lines)]
        (input_dir / f"part-{f:03d}.txt").write_text("\n".join(rows) + "\n")
        expected += [r + "!" for r in rows]
    return expected



def start_writer_query(spark: SparkSession, input_dir: Path | str, checkpoint: Path | str, *,
                       servers: str, topic: str, sink_id: str, tasks: int = 1,
                       options: dict[str, str] | None = None,
                       partitions: int | None = None) -> Any:
    """The same query, written by the ``eosclient-kafka`` data source's streaming writer, in
    ``tasks`` tasks per batch (round robin: a replay may put other rows in a task, which this
    writer allows); with ``partitions``, task ``i`` writes to partition ``min(i, partitions - 1)``
    only."""
    spark.dataSource.register(ExactlyOnceKafkaDataSource)
    lines = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(input_dir))
    out = lines.selectExpr("concat(value, '!') as value", "value as key")
    if tasks > 1:
        out = out.repartition(tasks)
    if partitions is not None:
        last = partitions - 1
        out = out.selectExpr("value", "key", f"least(spark_partition_id(), {last}) as partition")
    return (out.writeStream.format("eosclient-kafka").option("bootstrap.servers", servers)
            .option("topic", topic).option("sinkId", sink_id).option("timeoutSeconds", "30")
            .options(**(options or {})).option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())
