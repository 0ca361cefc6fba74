"""Create topics on a test broker, for tests and examples that need a known partition count.

Brokers create topics on first use with their own default partition count (Tansu: 4; noida-db
only on Metadata), so a test that cares about partitions creates its topics first.
"""

from __future__ import annotations

from kafka.protocol.admin import CreateTopicsRequest

from eosclient._net.blocking import BlockingConnection
from eosclient.errors import ApiKey, error_for
from eosclient.testing.brokers import RunningBroker

__all__ = ["create_topic"]


def create_topic(broker: RunningBroker, name: str, partitions: int = 1, *,
                 timeout: float = 10.0) -> str:
    """Create ``name`` with ``partitions`` partitions (replication factor 1); return ``name``.

    Raises:
        EosError: the broker refused (e.g. TOPIC_ALREADY_EXISTS), classified as usual.
        KafkaTimeoutError: no answer within ``timeout``.
    """
    request = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1, assignments=[],
            configs=[])],
        timeout_ms=int(timeout * 1000), validate_only=False)
    with BlockingConnection(broker.host, broker.port, timeout=timeout) as conn:
        [created] = conn.request(request, timeout=timeout).topics
    if created.error_code:
        raise error_for(ApiKey.CREATE_TOPICS, created.error_code, f"creating topic {name!r}")
    return name
