"""Kafka -> Spark -> Kafka from a Spark Connect client (``SparkSession.builder.remote``, a local
Connect server that pyspark starts): the ``eosclient-kafka`` writer and source, and
``ExactlyOnceKafkaSink`` through ``foreachBatch`` in ``datasource`` and in ``atomic`` mode (the
sink is pickled to the server, whose Python process calls it with a Connect DataFrame). Prints
one line per path: ``<path> <records read back>``. Run by ``test_connect.py`` in a process of
its own (a Connect session cannot share a process with the tests' classic session)."""

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
    opts = parser.parse_args()
    os.environ.update(spark_env())
    servers, work = opts.bootstrap, Path(opts.work)
    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    try:
        spark.dataSource.register(ExactlyOnceKafkaDataSource)
        lines = (spark.readStream.format("text").option("maxFilesPerTrigger", 1)
                 .load(opts.input).selectExpr("value"))
        source = (spark.readStream.format("eosclient-kafka").option("bootstrap.servers", servers)
                  .option("subscribe", "connect-written").load()
                  .selectExpr("upper(cast(value as string)) as value"))
        sinks = {"foreachBatch": ExactlyOnceKafkaSink(
                     bootstrap_servers=servers, topic="connect-foreach",
                     sink_id="connect-foreach", mode="datasource"),
                 "atomic": ExactlyOnceKafkaSink(
                     bootstrap_servers=servers, topic="connect-atomic",
                     sink_id="connect-atomic", mode="atomic")}
        for path, df, topic in (("writer", lines, "connect-written"),
                                ("source", source, "connect-copied"),
                                ("foreachBatch", lines, "connect-foreach"),
                                ("atomic", lines, "connect-atomic")):
            writer = df.writeStream
            if path in sinks:
                writer = writer.foreachBatch(sinks[path])
            else:
                writer = (writer.format("eosclient-kafka").option("bootstrap.servers", servers)
                          .option("topic", topic).option("sinkId", f"connect-{path}"))
            query = (writer.option("checkpointLocation", str(work / path))
                     .trigger(availableNow=True).start())
            query.awaitTermination(120)
            print(path, len(read_topic(servers, topic)), flush=True)
    finally:
        spark.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
