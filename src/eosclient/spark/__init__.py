"""Spark Structured Streaming to Kafka, each micro-batch exactly once.

:class:`ExactlyOnceKafkaSink` is a ``foreachBatch`` function;
:class:`ReadCommittedKafkaSource` is a streaming source (``format("eosclient-kafka")``) reading
topics with read_committed, so Kafka -> Spark -> Kafka is exactly-once without the JVM connector.

Needs pyspark (``pip install "eosclient[spark]"``); ``import eosclient`` never imports it. See the
``_sink`` module for the theory of operation, and ``docs/spark.md``.
"""

from __future__ import annotations

try:
    import pyspark  # noqa: F401  (only to explain a missing dependency)
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError('eosclient.spark needs pyspark: pip install "eosclient[spark]"') from exc

from eosclient.spark._datasource import ExactlyOnceKafkaDataSource
from eosclient.spark._errors import eos_error_of
from eosclient.spark._sink import BatchOutcome, ExactlyOnceKafkaSink, Mode
from eosclient.spark._source import ReadCommittedKafkaSource

__all__ = ["BatchOutcome", "ExactlyOnceKafkaDataSource", "ExactlyOnceKafkaSink", "Mode",
           "ReadCommittedKafkaSource", "eos_error_of"]
