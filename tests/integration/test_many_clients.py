"""Many clients in one process leave nothing behind: every thread and descriptor a client made
while it lived is gone once it is closed (benchmarks/footprint.py measures the cost of each)."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections.abc import Callable

from eosclient import ReadCommittedConsumer, TopicPartition, TransactionalProducer
from eosclient.aio import AsyncReadCommittedConsumer, AsyncTransactionalProducer
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.topics import create_topic

CLIENTS = 20
TIMEOUT = 30.0
SHARED = "eosclient-resolver-"  # the process's lookup pool: a few threads for every client


def own_threads() -> set[str]:
    return {f"{t.name}:{t.ident}" for t in threading.enumerate()
            if t is not threading.main_thread() and not t.name.startswith(SHARED)}


def fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def settled(before_threads: set[str], before_fds: set[str]) -> tuple[set[str], set[str]]:
    """What is left beyond ``before``, once what a close started has had a moment to end."""
    deadline = time.monotonic() + 5.0
    while True:
        gc.collect()
        threads, descriptors = own_threads() - before_threads, fds() - before_fds
        if not (threads or descriptors) or time.monotonic() > deadline:
            return threads, descriptors
        time.sleep(0.1)


def used_and_closed(broker: RunningBroker, topic: str, name: Callable[[str], str]) -> None:
    producers = [TransactionalProducer(broker.bootstrap_servers, transactional_id=name(f"p{n}"))
                 for n in range(CLIENTS)]
    consumers = [ReadCommittedConsumer(broker.bootstrap_servers,
                                       config={"auto.offset.reset": "earliest"})
                 for _ in range(CLIENTS)]
    for producer in producers:
        producer.init_transactions(TIMEOUT)
        with producer.transaction(timeout=TIMEOUT):
            producer.send(topic, b"x", partition=0)
    tp = TopicPartition(topic, 0)
    for consumer in consumers:
        consumer.assign([tp])
        deadline = time.monotonic() + TIMEOUT
        while not consumer.poll(0.5) and time.monotonic() < deadline:
            pass
    assert len(own_threads()) >= 2 * CLIENTS  # an I/O thread each, alive until close()
    for producer in producers:
        producer.close(TIMEOUT)
    for consumer in consumers:
        consumer.close(TIMEOUT)


def test_closed_clients_leave_no_thread_or_descriptor(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    create_topic(broker, topic_name, 1)
    before_threads, before_fds = own_threads(), fds()
    used_and_closed(broker, topic_name, unique_name)
    assert settled(before_threads, before_fds) == (set(), set())


def test_closed_asyncio_clients_leave_no_thread_or_descriptor(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    create_topic(broker, topic_name, 1)

    async def main() -> None:
        tp = TopicPartition(topic_name, 0)
        for n in range(CLIENTS // 4):
            async with AsyncTransactionalProducer(
                    broker.bootstrap_servers, transactional_id=unique_name(f"a{n}")) as producer:
                await producer.init_transactions(TIMEOUT)
                async with producer.transaction(timeout=TIMEOUT):
                    await producer.send(topic_name, b"x", partition=0)
            async with AsyncReadCommittedConsumer(
                    broker.bootstrap_servers, auto_offset_reset="earliest") as consumer:
                consumer.assign([tp])
                assert await consumer.getmany(timeout=TIMEOUT)

    before_threads, before_fds = own_threads(), fds()
    asyncio.run(main())
    assert settled(before_threads, before_fds) == (set(), set())
