"""Kafka -> Spark -> Kafka from a Spark Connect client (``SparkSession.builder.remote``): the
``eosclient-kafka`` writer, its streaming source and its batch read, and ``ExactlyOnceKafkaSink``
through ``foreachBatch`` in ``datasource``, ``atomic`` and ``partitioned`` mode (the sink is
pickled to the server, whose Python process calls it with a Connect DataFrame).

``--remote`` names the server: ``local[2]`` (the default) has pyspark start a local one in
this process's care, ``sc://HOST:PORT`` is a server in a process of its own
(``eosclient.testing.spark_connect``). Topics are ``<prefix>-written``, ``-copied``,
``-foreach``, ``-atomic`` and ``-partitioned`` (three Spark partitions a batch: one transaction
each). Prints one line per path: ``<path> <records read back>``. Run by ``test_connect.py`` in
a process of its own (a Connect session cannot share a process with the tests' classic
session)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jobs import spark_env
from pyspark.sql import SparkSession

from eosclient.spark import ExactlyOnceKafkaDataSource, ExactlyOnceKafkaSink
from eosclient.testing.checker import read_topic


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--input", "--work"):
        parser.add_argument(name, required=True)
    parser.add_argument("--remote", default="local[2]")
    parser.add_argument("--prefix", default="connect")
    opts = parser.parse_args()
    os.environ.update(spark_env())
    servers, work, prefix = opts.bootstrap, Path(opts.work), opts.prefix
    spark = SparkSession.builder.remote(opts.remote).getOrCreate()
    try:
        spark.dataSource.register(ExactlyOnceKafkaDataSource)
        lines = (spark.readStream.format("text").option("maxFilesPerTrigger", 1)
                 .load(opts.input).selectExpr("value"))
        source = (spark.readStream.format("eosclient-kafka").option("bootstrap.servers", servers)
                  .option("subscribe", f"{prefix}-written").load()
                  .selectExpr("upper(cast(value as string)) as value"))
        sinks = {"foreachBatch": ExactlyOnceKafkaSink(
                     bootstrap_servers=servers, topic=f"{prefix}-foreach",
                     sink_id=f"{prefix}-foreach", mode="datasource"),
                 "atomic": ExactlyOnceKafkaSink(
                     bootstrap_servers=servers, topic=f"{prefix}-atomic",
                     sink_id=f"{prefix}-atomic", mode="atomic"),
                 "partitioned": ExactlyOnceKafkaSink(
                     bootstrap_servers=servers, topic=f"{prefix}-partitioned",
                     sink_id=f"{prefix}-partitioned", mode="partitioned")}
        for path, df, topic in (("writer", lines, f"{prefix}-written"),
                                ("source", source, f"{prefix}-copied"),
                                ("foreachBatch", lines, f"{prefix}-foreach"),
                                ("atomic", lines, f"{prefix}-atomic"),
                                ("partitioned", lines.repartition(3),
                                 f"{prefix}-partitioned")):
            writer = df.writeStream
            if path in sinks:
                writer = writer.foreachBatch(sinks[path])
            else:
                writer = (writer.format("eosclient-kafka").option("bootstrap.servers", servers)
                          .option("topic", topic).option("sinkId", f"{prefix}-{path}"))
            query = (writer.option("checkpointLocation", str(work / path))
                     .trigger(availableNow=True).start())
            query.awaitTermination(120)
            print(path, len(read_topic(servers, topic)), flush=True)
        batch = (spark.read.format("eosclient-kafka").option("bootstrap.servers", servers)
                 .option("subscribe", f"{prefix}-written").load())
        print("batch", batch.count(), flush=True)
    finally:
        spark.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
