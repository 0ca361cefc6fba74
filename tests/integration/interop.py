"""confluent-kafka as the interop peer of the integration tests: a transactional producer, a
read_committed reader, and the abort-then-commit log both brokers are compared on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import confluent_kafka as ck

from eosclient.testing.brokers import RunningBroker
from eosclient.testing.topics import create_topic

COMMITTED = [b"committed-0", b"committed-1", b"committed-2"]
ABORTED = [b"aborted-0", b"aborted-1", b"aborted-2"]
_READ_TIMEOUT = 20.0


@contextmanager
def txn_producer(broker: RunningBroker, txn_id: str, **extra: str) -> Iterator[ck.Producer]:
    """An initialised confluent-kafka transactional producer, flushed on the way out."""
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers,
                            "transactional.id": txn_id, "linger.ms": 0, **extra})
    producer.init_transactions(15)
    try:
        yield producer
    finally:
        producer.flush(5)


def confluent_read(broker: RunningBroker, topic: str, start: int) -> list[bytes | None]:
    """Everything confluent-kafka's read_committed consumer delivers from ``start`` of partition
    0 (assign(): Tansu's group join takes ~23 s)."""
    theirs = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": topic,
                          "isolation.level": "read_committed", "enable.auto.commit": False,
                          "enable.partition.eof": True})
    theirs.assign([ck.TopicPartition(topic, 0, start)])
    got: list[bytes | None] = []
    deadline = time.monotonic() + _READ_TIMEOUT
    try:
        while time.monotonic() < deadline:
            message = theirs.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == ck.KafkaError._PARTITION_EOF:
                return got
            assert error is None, error
            got.append(message.value())
        raise AssertionError(f"confluent-kafka did not reach the end of {topic}")
    finally:
        theirs.close()


def write_abort_then_commit(broker: RunningBroker, topic: str, txn_id: str) -> None:
    """Offsets 0-2 aborted, 3 its marker, 4-6 committed, 7 its marker."""
    create_topic(broker, topic, 1)
    with txn_producer(broker, txn_id, **{"linger.ms": "20"}) as p:
        for commit, tag in ((False, b"aborted"), (True, b"committed")):
            p.begin_transaction()
            for i in range(3):
                p.produce(topic, b"%s-%d" % (tag, i), partition=0)
            assert p.flush(10) == 0
            (p.commit_transaction if commit else p.abort_transaction)(15)
