"""Issue 11, item 5 against real brokers: inputs and callbacks that used to kill or hang the
producer's I/O thread, and close() when the broker is gone.

The unit tests (tests/unit/test_wire_limits.py, test_producer_futures.py, test_net_client.py)
cover each check alone; these show the producer staying usable (the transaction commits) and
close() ending its thread in bounded time.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

import pytest

from eosclient import (
    IllegalStateError,
    RecordMetadata,
    RecordTypeError,
    TopicPartition,
    TransactionalProducer,
)
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = pytest.mark.broker

TIMEOUT = 15.0


def test_a_timestamp_past_int64_is_refused_and_the_transaction_commits(
        broker: RunningBroker, topic_name: str) -> None:
    # send(timestamp_ms=2**63) was accepted; encoding its batch killed the I/O thread, and the
    # commit raised FatalError.
    topics.create_topic(broker, topic_name, 1)
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=topic_name) as producer:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        first = producer.send(topic_name, b"a", timestamp_ms=1)
        with pytest.raises(RecordTypeError, match="timestamp_ms"):
            producer.send(topic_name, b"b", timestamp_ms=2**63)
        last = producer.send(topic_name, b"c", timestamp_ms=2**63 - 1)  # the top of the range
        producer.commit_transaction(TIMEOUT)
        assert last.result(0).offset == first.result(0).offset + 1


def test_result_inside_a_delivery_callback_raises_and_close_ends_the_thread(
        broker: RunningBroker, topic_name: str) -> None:
    # A callback waiting on a record sent from it waited for its own thread: the producer
    # hung, and its I/O thread was still alive after close().
    topics.create_topic(broker, topic_name, 1)
    producer = TransactionalProducer(broker.bootstrap_servers, transactional_id=topic_name)
    seen: list[Any] = []

    def callback(done: Future[RecordMetadata]) -> None:
        later = producer.send(topic_name, b"from the callback")
        try:
            seen.append(later.result(5))
        except Exception as exc:  # what the application's callback sees
            seen.append(exc)

    try:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction(partitions=[TopicPartition(topic_name, 0)])
        producer.send(topic_name, b"first").add_done_callback(callback)
        producer.flush(TIMEOUT)
        start = time.monotonic()
        while not seen and time.monotonic() - start < TIMEOUT:
            time.sleep(0.01)
        assert isinstance(seen[0], IllegalStateError), seen
        producer.commit_transaction(TIMEOUT)  # the record sent from the callback commits too
    finally:
        producer.close(TIMEOUT)
    assert not producer._sender._thread.is_alive()


@pytest.mark.parametrize("transactional", [True, False], ids=["transactional", "idempotent"])
def test_close_does_not_wait_long_once_the_broker_is_gone(
        fresh_broker: RunningBroker, topic_name: str, transactional: bool) -> None:
    # close() with no timeout waited max.block.ms (60 s by default) for an abort or a flush
    # that no broker could answer.
    topics.create_topic(fresh_broker, topic_name, 1)
    producer = TransactionalProducer(fresh_broker.bootstrap_servers, max_block_ms=30_000,
                                     transactional_id=topic_name if transactional else None)
    if transactional:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
    producer.send(topic_name, b"written").result(TIMEOUT)
    fresh_broker.kill()
    pending = producer.send(topic_name, b"never written")
    start = time.monotonic()
    producer.close()
    elapsed = time.monotonic() - start
    assert elapsed < 10, f"close() took {elapsed:.1f} s"
    assert not producer._sender._thread.is_alive()
    assert isinstance(pending.exception(0), Exception)  # failed, and says so
