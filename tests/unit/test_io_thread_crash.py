"""An exception escaping an I/O thread's step leaves its client in a clear error state.

Whatever the bug (here a RuntimeError injected into a step), every blocking call, the ones
waiting when it happens and every later one, raises FatalError at once with the bug as its
``__cause__``; records that were pending fail with it too; close() returns at once. No call
may hang until its timeout, or return as if nothing happened. No broker: the clients point at a
closed port, so nothing but the injected bug ever happens.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from eosclient import FatalError, ReadCommittedConsumer, TopicPartition, TransactionalProducer

TP = TopicPartition("t", 0)
QUICK = 3.0  # seconds: far below every timeout the calls below are given (30 s)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def boom(*args: Any) -> Any:
    raise RuntimeError("boom")


def assert_fatal_at_once(call: Callable[[], object]) -> None:
    start = time.monotonic()
    with pytest.raises(FatalError, match="crashed") as caught:
        call()
    assert time.monotonic() - start < QUICK
    assert isinstance(caught.value.__cause__, RuntimeError)


def crash_later(client: Any, thread: Any, delay: float = 0.2) -> None:
    """Make the I/O thread's next step raise, ``delay`` seconds from now, and wake it."""

    def inject() -> None:
        with thread.lock:
            client.maybe_update_metadata = boom
            thread.wake()
        thread.client.wakeup()

    threading.Timer(delay, inject).start()


@pytest.fixture
def producer() -> Iterator[TransactionalProducer]:
    made = TransactionalProducer(f"127.0.0.1:{closed_port()}", transactional_id="t",
                                 max_block_ms=30_000)
    yield made
    start = time.monotonic()
    made.close()
    assert time.monotonic() - start < QUICK
    assert not made._sender._thread.is_alive()


def test_a_producer_call_waiting_when_the_io_thread_crashes_raises_at_once(
        producer: TransactionalProducer) -> None:
    crash_later(producer._sender.client, producer._sender)
    assert_fatal_at_once(lambda: producer.init_transactions(30))


def test_every_later_producer_call_raises_fatal_error(producer: TransactionalProducer) -> None:
    crash_later(producer._sender.client, producer._sender, 0.0)
    while producer._sender.crashed is None:
        time.sleep(0.01)
    for call in (lambda: producer.init_transactions(30), producer.begin_transaction,
                 lambda: producer.send("t", b"v"), lambda: producer.send_batch("t", [b"v"]),
                 lambda: producer.flush(30), lambda: producer.commit_transaction(30),
                 lambda: producer.abort_transaction(30)):
        assert_fatal_at_once(call)


def test_records_pending_when_the_producer_crashes_fail_with_the_cause() -> None:
    # Their futures failed with a FatalError that did not chain the bug that caused it.
    producer = TransactionalProducer(f"127.0.0.1:{closed_port()}", max_block_ms=30_000)
    try:
        sender = producer._sender
        with sender.lock:  # a record queued as if its topic's metadata were known
            outcome, _ = sender.acc.append_record(TP, 1, None, b"v", (), time.monotonic(), 0)
        crash_later(sender.client, sender, 0.0)
        while sender.crashed is None:
            time.sleep(0.01)
        assert isinstance(outcome.error, FatalError)
        assert isinstance(outcome.error.__cause__, RuntimeError)
    finally:
        producer.close()


@pytest.fixture
def consumer() -> Iterator[ReadCommittedConsumer]:
    made = ReadCommittedConsumer(f"127.0.0.1:{closed_port()}",
                                 config={"default.api.timeout.ms": 30_000})
    made.assign([TP])
    yield made
    start = time.monotonic()
    made.close()
    assert time.monotonic() - start < QUICK


@pytest.mark.parametrize("call", ["poll", "position"])
def test_a_consumer_call_waiting_when_the_io_thread_crashes_raises_at_once(
        consumer: ReadCommittedConsumer, call: str) -> None:
    crash_later(consumer._session.loop.client, consumer._session.loop)
    wait = {"poll": lambda: consumer.poll(30), "position": lambda: consumer.position(TP, 30)}
    assert_fatal_at_once(wait[call])


def test_every_later_consumer_call_raises_fatal_error(consumer: ReadCommittedConsumer) -> None:
    crash_later(consumer._session.loop.client, consumer._session.loop, 0.0)
    while consumer._session.loop.crashed is None:
        time.sleep(0.01)
    for call in (lambda: consumer.poll(30), lambda: consumer.position(TP, 30),
                 lambda: consumer.seek(TP, 0), lambda: consumer.seek_to_end([TP]),
                 lambda: consumer.assign([TP])):
        assert_fatal_at_once(call)
