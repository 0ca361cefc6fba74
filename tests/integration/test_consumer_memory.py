"""What a consumer of 1,000 partitions holds while its application does not poll: bounded by
``queued.max.messages.kbytes`` over every partition, not 1,000 times the per-partition prefetch
(``max.partition.fetch.bytes``), as before the bound."""

from __future__ import annotations

import time

import confluent_kafka as ck

from eosclient import ReadCommittedConsumer, TopicPartition
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.topics import create_topic

PARTITIONS = 1000
RECORDS = 20  # per partition, of 1,000 bytes: 20 MB in all
CAP_KIB = 512
PER_PARTITION = 65_536
TIMEOUT = 30.0


def test_a_consumer_of_1000_partitions_holds_what_the_bound_allows(
        broker: RunningBroker, topic_name: str) -> None:
    create_topic(broker, topic_name, PARTITIONS)
    writer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20})
    for _ in range(RECORDS):
        for partition in range(PARTITIONS):
            writer.produce(topic_name, b"x" * 1000, partition=partition)
        writer.poll(0)
    assert writer.flush(60) == 0
    del writer  # gone before the broker stops (librdkafka would log its lost connection)
    config = {"auto.offset.reset": "earliest", "queued.max.messages.kbytes": CAP_KIB,
              "max.partition.fetch.bytes": PER_PARTITION}
    with ReadCommittedConsumer(broker.bootstrap_servers, config=config) as consumer:
        consumer.assign([TopicPartition(topic_name, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + TIMEOUT
        while not consumer.poll(1.0, max_records=1):
            assert time.monotonic() < deadline, "no record came"
        time.sleep(2.0)  # the application does not poll: only the bound stops the fetching
        stats = consumer.stats()
        if broker.kind == "noida":
            # noida-db ignores every Fetch byte limit (docs/testing.md): its first answer
            # carries all 20 MB whatever was asked; the bound then stops every later Fetch.
            assert stats.requests["Fetch"].count <= 2
        else:
            # the room left is what the next Fetch asks for; the first batch of a partition
            # comes whole (KIP-74), so one partition's worth may go past it
            assert stats.queued_bytes <= CAP_KIB * 1024 + PER_PARTITION
        held = stats.queued_bytes
        records = 1
        while records < PARTITIONS * RECORDS:  # and everything is read once polled
            records += sum(len(c) for c in consumer.poll_batch(1.0).values())
            assert time.monotonic() < deadline + 60, f"read {records}"
    assert held > 0
