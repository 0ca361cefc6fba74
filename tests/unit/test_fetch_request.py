"""The Fetch request writer (:mod:`eosclient._protocol.fetch_request`) writes, byte for byte,
what kafka-python's generated encoder writes, at every version the consumer sends."""

from __future__ import annotations

from typing import Any

import pytest

from eosclient._core.types import TopicPartition
from eosclient._protocol.apis import APIS
from eosclient._protocol.fetch_request import MAX_VERSION, MIN_VERSION, FetchRequest
from eosclient.errors import ApiKey

PARTITIONS = [(TopicPartition("orders", 3), 12_345_678_901, 1_048_576),
              (TopicPartition("orders", 0), 0, 100),
              (TopicPartition("é-topic", 7), 5, 1)]
EPOCHS = {TopicPartition("orders", 3): 4, TopicPartition("é-topic", 7): 2**31 - 1}


def kafka_python(version: int, client_id: str | None) -> Any:
    cls = APIS[ApiKey.FETCH].request
    topics: dict[str, list[Any]] = {}
    for tp, offset, limit in PARTITIONS:
        topics.setdefault(tp.topic, []).append(cls.FetchTopic.FetchPartition(
            partition=tp.partition, current_leader_epoch=EPOCHS.get(tp, -1),
            fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=limit))
    request = cls(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52_428_800,
                  isolation_level=1, session_id=0, session_epoch=-1,
                  topics=[cls.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
                  forgotten_topics_data=[], rack_id="")
    request.API_VERSION = version
    request.with_header(correlation_id=2**31 - 2, client_id=client_id)
    return request


@pytest.mark.parametrize("client_id", ["eosclient-consumer-1", None])
@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_the_bytes_are_kafka_pythons(version: int, client_id: str | None) -> None:
    ours = FetchRequest(PARTITIONS, isolation=1, max_wait_ms=500, min_bytes=1,
                        max_bytes=52_428_800, epochs=EPOCHS)
    ours.API_VERSION = version
    ours.with_header(correlation_id=2**31 - 2, client_id=client_id)
    theirs = kafka_python(version, client_id)
    assert ours.encode(header=True, framed=True) == theirs.encode(header=True, framed=True)
    assert ours.encode() == theirs.encode()
    decoded = APIS[ApiKey.FETCH].request.decode(ours.encode(), version=version)
    assert [(p.partition, p.fetch_offset) for t in decoded.topics for p in t.partitions] == [
        (3, 12_345_678_901), (0, 0), (7, 5)]


def test_it_reads_like_kafka_pythons_and_refuses_versions_it_does_not_write() -> None:
    ours = FetchRequest(PARTITIONS, isolation=0, max_wait_ms=1, min_bytes=0, max_bytes=9)
    assert ours.API_KEY == ApiKey.FETCH and ours.expect_response()
    assert [(t.topic, [(p.partition, p.current_leader_epoch, p.partition_max_bytes)
                       for p in t.partitions]) for t in ours.topics] == [
        ("orders", [(3, -1, 1_048_576), (0, -1, 100)]), ("é-topic", [(7, -1, 1)])]
    assert "3 partitions" in repr(ours)
    for version in (MIN_VERSION - 1, MAX_VERSION + 1):
        with pytest.raises(ValueError, match="not written here"):
            ours.encode(version=version)
