"""Spark Structured Streaming to Kafka, each micro-batch exactly once.

:class:`ExactlyOnceKafkaDataSource` is the ``eosclient-kafka`` data source: its writers write
from the executors and commit each batch as one decision on the driver (``_writer``,
``_driver``); it reads as :class:`ReadCommittedKafkaSource` does, with read_committed, so
Kafka -> Spark -> Kafka is exactly-once without the JVM connector. :class:`ExactlyOnceKafkaSink`
is a ``foreachBatch`` function. :func:`eos_error_of` reads an eosclient error back from the
exception Spark wraps it in.

Needs pyspark (the ``spark`` extra; README: Install); ``import eosclient`` never imports it. See the
``_sink`` module for the theory of operation, and ``docs/spark.md``.
"""

from __future__ import annotations

from eosclient._extras import install_extra

try:
    import pyspark  # noqa: F401  (only to explain a missing dependency)
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(f"eosclient.spark needs pyspark: {install_extra('spark')}") from exc

from eosclient.spark._datasource import ExactlyOnceKafkaDataSource
from eosclient.spark._errors import eos_error_of
from eosclient.spark._sink import BatchOutcome, ExactlyOnceKafkaSink, Mode
from eosclient.spark._source import ReadCommittedKafkaSource

__all__ = ["BatchOutcome", "ExactlyOnceKafkaDataSource", "ExactlyOnceKafkaSink", "Mode",
           "ReadCommittedKafkaSource", "eos_error_of"]
