"""A Spark Structured Streaming job that writes each micro-batch to Kafka exactly once.

Spark's rate source makes "orders"; a transformation turns them into Kafka rows (key, value,
headers); ``ExactlyOnceKafkaSink`` writes each micro-batch in one transaction that also records
the batch id, so a batch Spark replays after a crash is not written twice. Runs on a broker of
its own (noida-db, from the ``broker`` extra) and a local Spark (the ``spark`` extra, Java 17):

    python examples/spark_orders.py --batches 3

Against a running broker (``eosclient broker``, or a real cluster), name it and the topic:

    python examples/spark_orders.py --bootstrap 127.0.0.1:9092 --topic orders --batches 10

Run it twice with the same ``--checkpoint`` to see a restart pick up where it left off.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from eosclient.spark import ExactlyOnceKafkaSink
from eosclient.testing.brokers import start_broker
from eosclient.testing.checker import read_topic
from eosclient.testing.topics import create_topic


def orders(spark: SparkSession, rows_per_second: int) -> DataFrame:
    """Orders as Kafka rows: key = the customer, value = JSON, a header naming the source."""
    rate = spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
    order = rate.select(F.col("value").alias("order_id"),
                        (F.col("value") % 7).cast("string").alias("customer"),
                        (F.col("value") * 3 % 100 + 0.99).alias("amount"))
    return order.select(
        F.col("customer").alias("key"),
        F.to_json(F.struct("order_id", "customer", "amount")).alias("value"),
        F.array(F.struct(F.lit("source").alias("key"),
                         F.lit(b"spark-example").alias("value"))).alias("headers"))


def run(spark: SparkSession, bootstrap: str, topic: str, *, checkpoint: str,
        batches: int, rows_per_second: int) -> ExactlyOnceKafkaSink:
    """Run the query until ``batches`` micro-batches have been written."""
    sink = ExactlyOnceKafkaSink(bootstrap_servers=bootstrap, topic=topic,
                                sink_id="spark-orders-example")
    query = (orders(spark, rows_per_second).writeStream.foreachBatch(sink)
             .option("checkpointLocation", checkpoint).trigger(processingTime="1 second")
             .start())
    deadline = time.monotonic() + 30 + 5 * batches
    try:
        while len(sink.outcomes) < batches and time.monotonic() < deadline:
            if query.exception() is not None:
                raise RuntimeError(f"the query failed: {query.exception()}")
            time.sleep(0.2)
    finally:
        query.stop()
        sink.close()
    return sink


def job(spark: SparkSession, bootstrap: str, args: argparse.Namespace) -> None:
    """Run the query, say what each batch did, and read the topic back read_committed."""
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or str(Path(tmp) / "checkpoint")
        sink = run(spark, bootstrap, args.topic, checkpoint=checkpoint, batches=args.batches,
                   rows_per_second=args.rows_per_second)
    for outcome in sink.outcomes:
        print(f"batch {outcome.batch_id}: {outcome.records} records "
              f"({'skipped: committed before' if outcome.skipped else 'committed'})")
    values = [r.value for r in read_topic(bootstrap, args.topic)]
    print(f"read_committed sees {len(values)} orders, {len(set(values))} distinct")
    if not args.checkpoint:  # a fresh query on a fresh topic: every order once
        assert len(values) == len(set(values)) == sum(o.records for o in sink.outcomes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", help="a running broker (default: start one)")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--batches", type=int, default=3, help="stop after this many")
    parser.add_argument("--rows-per-second", type=int, default=200)
    parser.add_argument("--checkpoint", help="the query's checkpoint (default: a temporary one)")
    args = parser.parse_args()
    # Spark's Python workers must import eosclient: run them with this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("eosclient-spark-orders")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if args.bootstrap:
            job(spark, args.bootstrap, args)
        else:
            with start_broker("noida") as broker:
                create_topic(broker, args.topic, 3)
                job(spark, broker.bootstrap_servers, args)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
