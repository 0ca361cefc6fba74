"""Kafka -> Spark -> Kafka exactly once, with the ``eosclient-kafka`` data source on both ends.

Reads the ``orders`` topic read_committed (aborted transactions are never read), upper-cases
each value on the executors, and writes the ``orders-upper`` topic from the executors, each
micro-batch committed by the driver as one decision: a batch Spark replays after a crash is
neither lost nor written twice, and no Spark Kafka connector jar is needed. Runs on a broker of
its own (noida-db, from the ``broker`` extra) and a local Spark (the ``spark`` extra, Java 17):

    python examples/spark_kafka_to_kafka.py

Against a running broker, name it (the topics must exist):

    python examples/spark_kafka_to_kafka.py --bootstrap 127.0.0.1:9092 --checkpoint /tmp/upper
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from eosclient import TransactionalProducer
from eosclient.spark import ExactlyOnceKafkaDataSource
from eosclient.testing.brokers import start_broker
from eosclient.testing.checker import read_topic
from eosclient.testing.topics import create_topic


def fill(bootstrap: str, topic: str, orders: int) -> None:
    """``orders`` committed orders, and as many in a transaction that is aborted."""
    with TransactionalProducer(bootstrap, transactional_id="example-orders") as producer:
        producer.init_transactions(30)
        for commit in (True, False):
            producer.begin_transaction()
            for i in range(orders):
                producer.send(topic, f"order-{i}-{'kept' if commit else 'aborted'}".encode(),
                              key=str(i % 7).encode())
            (producer.commit_transaction if commit else producer.abort_transaction)(30)


def pipeline(spark: SparkSession, bootstrap: str, checkpoint: str) -> None:
    """Copy ``orders`` to ``orders-upper``, upper-cased, until caught up (availableNow)."""
    spark.dataSource.register(ExactlyOnceKafkaDataSource)
    orders = (spark.readStream.format("eosclient-kafka").option("bootstrap.servers", bootstrap)
              .option("subscribe", "orders").option("maxOffsetsPerTrigger", "1000").load())
    query = (orders.selectExpr("key", "upper(cast(value as string)) as value")
             .writeStream.format("eosclient-kafka").option("bootstrap.servers", bootstrap)
             .option("topic", "orders-upper").option("sinkId", "example-orders-upper")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    if not query.awaitTermination(120):
        query.stop()
        raise RuntimeError("the query did not catch up in 120 s")
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", help="a running broker (default: start one)")
    parser.add_argument("--orders", type=int, default=1000)
    parser.add_argument("--checkpoint", help="the query's checkpoint (default: a temporary one)")
    args = parser.parse_args()
    # Spark's Python workers must import eosclient: run them with this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("eosclient-kafka-to-kafka")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = args.checkpoint or str(Path(tmp) / "checkpoint")
            if args.bootstrap:
                pipeline(spark, args.bootstrap, checkpoint)
                print(f"orders-upper has {len(read_topic(args.bootstrap, 'orders-upper'))} "
                      f"records")
                return
            with start_broker("noida") as broker:
                create_topic(broker, "orders", 3)
                create_topic(broker, "orders-upper", 3)
                fill(broker.bootstrap_servers, "orders", args.orders)
                pipeline(spark, broker.bootstrap_servers, checkpoint)
                values = [r.value for r in read_topic(broker.bootstrap_servers, "orders-upper")]
                print(f"read_committed sees {len(values)} upper-cased orders, "
                      f"{len(set(values))} distinct")
                assert sorted(values) == sorted(f"ORDER-{i}-KEPT".encode()
                                                for i in range(args.orders))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
