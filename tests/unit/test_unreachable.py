"""A client pointed at nothing says so, fast; one told to wait waits for a late broker.

A mistyped address used to look like "no data": ``records(idle_timeout=10)`` ended normally,
``poll()`` returned ``[]``, ``init_transactions()`` raised only at its 60 s deadline, and the
CLI was silent for 30 s. No broker here: a port with nothing listening, a name that does not
resolve, and the scripted fake broker of test_net_client started late.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_net_client import FakeBroker, free_port, lookups, metadata_response

from eosclient import (
    Admin,
    AllBrokersDownError,
    EosError,
    ReadCommittedConsumer,
    TopicPartition,
    TransactionalProducer,
)
from eosclient.aio import AsyncReadCommittedConsumer, AsyncTransactionalProducer

BOUND = 5.0  # seconds: the most a client pointed at nothing may take to say so
TP = TopicPartition("t", 0)


@pytest.fixture
def nowhere() -> str:
    return f"127.0.0.1:{free_port()}"  # nothing listens there


@pytest.fixture
def closing() -> Iterator[Callable[[Any], Any]]:
    clients: list[Any] = []
    yield lambda client: clients.append(client) or client
    for client in clients:
        client.close(1)


def fails_fast(call: Callable[[], object], address: str, why: str) -> AllBrokersDownError:
    started = time.monotonic()
    with pytest.raises(AllBrokersDownError) as raised:
        call()
    assert time.monotonic() - started < BOUND
    assert address in str(raised.value) and why in str(raised.value)
    return raised.value


def test_every_client_raises_within_seconds_naming_the_address_and_the_cause(
        nowhere: str, closing: Callable[[Any], Any]) -> None:
    producer = closing(TransactionalProducer(nowhere, transactional_id="t"))
    fails_fast(lambda: producer.init_transactions(60), nowhere, "ECONNREFUSED")
    consumer = closing(ReadCommittedConsumer(nowhere))
    consumer.assign([TP])
    fails_fast(lambda: consumer.poll(30), nowhere, "ECONNREFUSED")
    admin = closing(Admin(nowhere))
    fails_fast(lambda: admin.list_topics(timeout=60), nowhere, "ECONNREFUSED")


def test_records_with_an_idle_timeout_raises_rather_than_end(
        nowhere: str, closing: Callable[[Any], Any]) -> None:
    consumer = closing(ReadCommittedConsumer(nowhere, group_id="g"))
    consumer.assign([TP])
    fails_fast(lambda: list(consumer.records(idle_timeout=10)), nowhere, "ECONNREFUSED")


def test_a_name_that_does_not_resolve_is_said(
        monkeypatch: pytest.MonkeyPatch, closing: Callable[[Any], Any]) -> None:
    lookups(monkeypatch, {})  # nothing resolves
    consumer = closing(ReadCommittedConsumer("no-such-broker.test:9092"))
    consumer.assign([TP])
    fails_fast(lambda: consumer.poll(30), "no-such-broker.test:9092", "cannot resolve")


def test_error_cb_hears_it_at_once_and_calls_wait_out_their_timeouts(
        nowhere: str, closing: Callable[[Any], Any]) -> None:
    heard: list[EosError] = []
    consumer = closing(ReadCommittedConsumer(nowhere, config={"error_cb": heard.append}))
    consumer.assign([TP])
    assert consumer.poll(2) == []  # told to wait: no raise
    assert heard and isinstance(heard[0], AllBrokersDownError) and nowhere in str(heard[0])
    assert len(heard) == 1  # once per outage, not once per retry
    # Quiet from a cluster never reached is still not the end of the data.
    fails_fast(lambda: list(consumer.records(idle_timeout=1)), nowhere, "ECONNREFUSED")


def test_a_broker_that_starts_late_is_waited_for_by_a_client_told_to_wait(
        closing: Callable[[Any], Any]) -> None:
    port = free_port()
    late: list[FakeBroker] = []
    starter = threading.Timer(2.5, lambda: late.append(FakeBroker(
        lambda key, request: metadata_response(port, {"t": 2}), port=port)))
    patient = closing(TransactionalProducer(f"127.0.0.1:{port}", config={
        "error_cb": lambda error: None}))
    hasty = closing(TransactionalProducer(f"127.0.0.1:{port}"))
    starter.start()
    try:
        with pytest.raises(AllBrokersDownError):  # not told to wait: it says so...
            hasty.partitions_for("t")
        assert patient.partitions_for("t") == [TopicPartition("t", 0), TopicPartition("t", 1)]
        assert len(hasty.partitions_for("t")) == 2  # ...and, called again, waits on
    finally:
        starter.join()
        for broker in late:
            broker.close()


def test_the_asyncio_fronts_raise_it_too(nowhere: str) -> None:
    async def main() -> None:
        async with AsyncReadCommittedConsumer(nowhere) as consumer:
            consumer.assign([TP])
            with pytest.raises(AllBrokersDownError):
                await consumer.poll(30)
        async with AsyncTransactionalProducer(nowhere, transactional_id="t") as producer:
            with pytest.raises(AllBrokersDownError):
                await producer.init_transactions(60)

    started = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - started < 2 * BOUND
