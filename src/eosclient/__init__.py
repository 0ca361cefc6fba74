"""eosclient: exactly-once Kafka for Python.

The public names live here and nowhere else; modules with a leading underscore are internal.
"""

from __future__ import annotations

import logging

import eosclient._kafka  # noqa: F401  (first: kafka-python without its import-time warnings)
from eosclient._core import _accel
from eosclient._core.types import TopicPartition
from eosclient._producer.results import RecordMetadata
from eosclient._version import __version__
from eosclient.admin import Admin
from eosclient.config import AdminConfig, ClientConfig, ConsumerConfig, ProducerConfig
from eosclient.consumer import (
    BinaryColumn,
    ConsumerRecord,
    ReadCommittedConsumer,
    RecordColumns,
    TopicMetadata,
    Watermarks,
)
from eosclient.errors import (
    AbortableError,
    AllBrokersDownError,
    AuthenticationError,
    CommitFailedError,
    ConfigError,
    CorruptRecordError,
    DeserializationError,
    EosError,
    EpochBumpRequiredError,
    FatalError,
    FencedError,
    IllegalStateError,
    InvalidGroupIdError,
    KafkaConnectionError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    ProtocolError,
    RecordTooLargeError,
    RecordTypeError,
    ResponseTooLargeError,
    RetriableError,
    SaslAuthenticationError,
    SslAuthenticationError,
    UnknownPartitionError,
    UnsupportedVersionError,
    UsageError,
)
from eosclient.group_metadata import ConsumerGroupMetadata
from eosclient.processor import ExactlyOnceProcessor, OutputRecord, ProcessorStats
from eosclient.producer import PreparedTransaction, TransactionalProducer, end_prepared
from eosclient.stats import ClientStats, RequestStats

accelerated: bool = all(_accel.compiled().values())
"""Whether the record codec (decode, encode, CRC framing, varints, murmur2) runs compiled: True
when the package was installed where a C compiler was present, and ``EOSCLIENT_PURE_PYTHON=1``
is not set. The pure-Python build does the same, slower."""

__all__ = [
    "AbortableError",
    "Admin",
    "AdminConfig",
    "AllBrokersDownError",
    "AuthenticationError",
    "BinaryColumn",
    "ClientConfig",
    "ClientStats",
    "CommitFailedError",
    "ConfigError",
    "ConsumerConfig",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "CorruptRecordError",
    "DeserializationError",
    "EosError",
    "EpochBumpRequiredError",
    "ExactlyOnceProcessor",
    "FatalError",
    "FencedError",
    "IllegalStateError",
    "InvalidGroupIdError",
    "KafkaConnectionError",
    "KafkaTimeoutError",
    "OffsetOutOfRangeError",
    "OutputRecord",
    "PreparedTransaction",
    "ProcessorStats",
    "ProducerConfig",
    "ProtocolError",
    "ReadCommittedConsumer",
    "RecordColumns",
    "RecordMetadata",
    "RecordTooLargeError",
    "RecordTypeError",
    "RequestStats",
    "ResponseTooLargeError",
    "RetriableError",
    "SaslAuthenticationError",
    "SslAuthenticationError",
    "TopicMetadata",
    "TopicPartition",
    "TransactionalProducer",
    "UnknownPartitionError",
    "UnsupportedVersionError",
    "UsageError",
    "Watermarks",
    "__version__",
    "accelerated",
    "end_prepared",
]

# A library logs, the application decides where to: without a handler of its own, eosclient's
# records go nowhere (not to logging's last-resort stderr handler).
logging.getLogger("eosclient").addHandler(logging.NullHandler())
