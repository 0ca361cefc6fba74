"""Ask a broker how many partitions a topic has (one blocking Metadata round trip).

The producer and the consumer keep this inside their own metadata; the processor (to
pre-register every output partition, KIP-609 style) and the checker (to read every partition)
need it before either client has asked.
"""

from __future__ import annotations

import time

from kafka.protocol.metadata import MetadataRequest

from eosclient._net.blocking import BlockingConnection
from eosclient.errors import (
    ApiKey,
    KafkaConnectionError,
    KafkaTimeoutError,
    RetriableError,
    error_for,
)

__all__ = ["partition_count"]

_CREATING = 0.1  # seconds between asks while a broker creates a topic


def partition_count(bootstrap_servers: str, topic: str, timeout: float = 10.0, *,
                    auto_create: bool = False) -> int:
    """The number of partitions of ``topic``, asked of the first bootstrap server that answers.

    Args:
        auto_create: Ask the broker to create a missing topic, as a producer's Metadata
            request does (a writer's output topic); the answers that say it is being created
            (retriable errors) are asked again until ``timeout``.

    Raises:
        KafkaTimeoutError: no server answered within ``timeout``.
        EosError: the broker answered with an error for the topic (it does not exist, say).
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    for host, port in _addresses(bootstrap_servers):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            with BlockingConnection(host, port, timeout=left) as conn:
                while True:
                    try:
                        return _ask(conn, topic, deadline - time.monotonic(), auto_create)
                    except RetriableError:
                        if not auto_create or time.monotonic() + _CREATING > deadline:
                            raise
                        time.sleep(_CREATING)
        except (KafkaConnectionError, KafkaTimeoutError) as exc:  # try the next server
            last = exc
    raise KafkaTimeoutError(f"no bootstrap server told the partitions of {topic!r}: {last!r}")


def _ask(conn: BlockingConnection, topic: str, timeout: float, auto_create: bool) -> int:
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=auto_create)
    response = conn.request(request, timeout=timeout)
    for found in response.topics:
        if found.name == topic:
            if found.error_code:
                raise error_for(ApiKey.METADATA, found.error_code, f"topic {topic!r}")
            return len(found.partitions)
    raise error_for(ApiKey.METADATA, 3, f"topic {topic!r}")


def _addresses(bootstrap_servers: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap_servers.split(","):
        host, _, port = item.strip().rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return out
