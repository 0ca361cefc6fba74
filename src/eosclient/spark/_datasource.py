"""``eosclient-kafka``: one Spark data source for both ends of Kafka -> Spark -> Kafka.

Reading is :class:`~eosclient.spark.ReadCommittedKafkaSource`'s (read_committed, offsets in
Spark's checkpoint); writing is :mod:`eosclient.spark._writer`'s (executors write, the driver
commits each batch in one decision).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter

from eosclient.spark._source import ReadCommittedKafkaSource
from eosclient.spark._writer import BatchWriter, StreamWriter, WriterPlan

__all__ = ["ExactlyOnceKafkaDataSource"]


class ExactlyOnceKafkaDataSource(ReadCommittedKafkaSource):
    """The ``eosclient-kafka`` data source: read committed, write exactly once.

    Register it once per session::

        spark.dataSource.register(ExactlyOnceKafkaDataSource)
        (df.writeStream.format("eosclient-kafka").option("bootstrap.servers", "host:9092")
           .option("topic", "out").option("sinkId", "orders-out")
           .option("checkpointLocation", "/checkpoints/orders").start())

    The writers' options are in :mod:`eosclient.spark._writer`, the reader's in
    :mod:`eosclient.spark._source`.
    """

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(WriterPlan.make(self.options, schema))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(WriterPlan.make(self.options, schema))
