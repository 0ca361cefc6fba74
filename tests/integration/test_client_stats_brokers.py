"""stats() and stats_cb on real brokers: the counters follow what the clients did."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from eosclient import ClientStats, ReadCommittedConsumer, TopicPartition, TransactionalProducer
from eosclient.aio import AsyncReadCommittedConsumer, AsyncTransactionalProducer
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = pytest.mark.broker

TIMEOUT = 20.0


def test_producer_and_consumer_stats_count_what_was_done(broker: RunningBroker,
                                                         topic_name: str) -> None:
    topics.create_topic(broker, topic_name)
    tp = TopicPartition(topic_name, 0)
    reports: list[ClientStats] = []
    reported = threading.Event()

    def on_stats(stats: ClientStats) -> None:
        reports.append(stats)
        reported.set()

    with TransactionalProducer(broker.bootstrap_servers, transactional_id=f"{topic_name}-p",
                               config={"statistics.interval.ms": 50,
                                       "stats_cb": on_stats}) as producer:
        producer.init_transactions(TIMEOUT)
        with producer.transaction(partitions=[tp]):
            producer.send_batch(topic_name, [b"a", b"b", b"c"], partition=0)
        producer.begin_transaction(partitions=[tp])
        producer.send(topic_name, b"aborted", partition=0)
        producer.flush(TIMEOUT)
        producer.abort_transaction(TIMEOUT)
        stats = producer.stats()
        assert reported.wait(5.0) and reports[-1].client == "producer"
    assert stats.client == "producer" and stats.client_id == "eosclient"
    assert (stats.records, stats.transactions_committed, stats.transactions_aborted) == (4, 1, 1)
    assert stats.batches == 2 and stats.epoch_bumps == 0
    for api in ("InitProducerId", "AddPartitionsToTxn", "Produce", "EndTxn"):
        assert stats.requests[api].count >= 1, api
    assert stats.requests["EndTxn"].count == 2
    assert 0 < stats.requests["Produce"].max_seconds < TIMEOUT
    count = len(reports)
    time.sleep(0.2)
    assert len(reports) == count  # closing stopped the reports

    with ReadCommittedConsumer(broker.bootstrap_servers,
                               config={"auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([tp])
        got = 0
        deadline = time.monotonic() + TIMEOUT
        while got < 3 and time.monotonic() < deadline:
            got += len(consumer.poll(0.2))
        stats = consumer.stats()
    assert stats.client == "consumer" and stats.records == 3 and stats.batches >= 1
    assert stats.requests["Fetch"].count >= 1 and stats.rebalances == 0


@pytest.mark.noida
def test_a_failing_stats_cb_is_logged_and_called_again(noida_broker: RunningBroker,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    calls: list[ClientStats] = []

    def broken(stats: ClientStats) -> None:
        calls.append(stats)
        raise RuntimeError("exporter down")

    with ReadCommittedConsumer(noida_broker.bootstrap_servers,
                               config={"statistics.interval.ms": 50, "stats_cb": broken}):
        deadline = time.monotonic() + 5.0
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(calls) >= 2
    assert "stats_cb raised" in caplog.text and "exporter down" in caplog.text


@pytest.mark.noida
def test_the_asyncio_clients_call_stats_cb_from_the_loop(
        noida_broker: RunningBroker, topic_name: str, caplog: pytest.LogCaptureFixture) -> None:
    # The asyncio front once left stats_cb uncalled (the sync front's reporter is a thread).
    topics.create_topic(noida_broker, topic_name)
    tp = TopicPartition(topic_name, 0)
    plain: list[tuple[ClientStats, threading.Thread]] = []
    awaited: list[ClientStats] = []

    async def export(stats: ClientStats) -> None:  # a coroutine: run as a task
        await asyncio.sleep(0)
        awaited.append(stats)
        raise RuntimeError("exporter down")

    async def main() -> None:
        async with AsyncTransactionalProducer(
                noida_broker.bootstrap_servers, transactional_id=f"{topic_name}-p",
                config={"statistics.interval.ms": 50,
                        "stats_cb": lambda s: plain.append((s, threading.current_thread()))},
        ) as producer:
            await producer.init_transactions(TIMEOUT)
            async with producer.transaction(partitions=[tp]):
                await producer.send(topic_name, b"a", partition=0)
            while len(plain) < 2:
                await asyncio.sleep(0.05)
        count = len(plain)
        async with AsyncReadCommittedConsumer(
                noida_broker.bootstrap_servers,
                config={"statistics.interval.ms": 50, "stats_cb": export}):
            while len(awaited) < 2:
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        assert len(plain) == count  # closing stopped the reports

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert {thread for _, thread in plain} == {threading.main_thread()}  # the loop's thread
    assert plain[-1][0].client == "producer" and awaited[-1].client == "consumer"
    assert "stats_cb raised" in caplog.text and "exporter down" in caplog.text


@pytest.mark.noida
def test_the_network_logger_tells_connects_and_disconnects(
        noida_broker: RunningBroker, topic_name: str,
        caplog: pytest.LogCaptureFixture) -> None:
    unique = topic_name
    caplog.set_level(logging.DEBUG, logger="eosclient.net")
    with ReadCommittedConsumer(noida_broker.bootstrap_servers) as consumer:
        consumer.assign([TopicPartition(topics.create_topic(noida_broker, unique), 0)])
        deadline = time.monotonic() + TIMEOUT
        while "connected (plaintext)" not in caplog.text and time.monotonic() < deadline:
            consumer.poll(0.1)
    net = [r for r in caplog.records if r.name == "eosclient.net"]
    assert any("connected (plaintext)" in r.getMessage() and r.levelno == logging.DEBUG
               for r in net)
    assert any("disconnected (the client was closed" in r.getMessage()
               and r.levelno == logging.DEBUG for r in net)  # asked for: DEBUG; a cut: INFO


def test_the_package_logger_has_a_null_handler() -> None:
    # Without it, a WARNING went to logging's last-resort stderr handler in applications that
    # configure no logging.
    assert any(isinstance(h, logging.NullHandler)
               for h in logging.getLogger("eosclient").handlers)
