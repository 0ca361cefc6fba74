"""Connecting by a host name with several addresses, the first refusing, to a real broker.

A name that resolves to IPv6 and IPv4 ('localhost' on many machines: ::1, then 127.0.0.1) with
the broker listening on one of them only: a client that tries only the first address never
connects. The name is a test's own (``kafka.test``), answered by a patched ``getaddrinfo`` so
the order is known on every machine; the lookup still runs on the resolver thread.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any

import pytest

from eosclient import ReadCommittedConsumer, TopicPartition, TransactionalProducer
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = pytest.mark.broker

TIMEOUT = 20.0


def test_a_transaction_through_a_name_whose_first_address_refuses(
        broker: RunningBroker, unique_name: Callable[[str], str],
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    real = socket.getaddrinfo
    port = broker.port

    def two_addresses(host: str, *args: Any, **kwargs: Any) -> Any:
        if host != "kafka.test":
            return real(host, *args, **kwargs)
        return [(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("::1", port, 0, 0)),
                (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (broker.host, port))]

    monkeypatch.setattr(socket, "getaddrinfo", two_addresses)
    topic = topics.create_topic(broker, unique_name("t"), 1)
    bootstrap = f"kafka.test:{port}"
    caplog.set_level(logging.INFO, logger="eosclient.net")
    with TransactionalProducer(bootstrap, transactional_id=unique_name("txn")) as producer:
        producer.init_transactions(TIMEOUT)
        with producer.transaction():
            producer.send(topic, b"over the second address", partition=0)
    consumer = ReadCommittedConsumer(bootstrap, config={"auto.offset.reset": "earliest",
                                                        "fetch.max.wait.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, 0)])
        got: list[bytes | None] = []
        for _ in range(100):
            got += [r.value for r in consumer.poll(0.2)]
            if got:
                break
        assert got == [b"over the second address"]
    finally:
        consumer.close()
    assert f"[::1]:{port} failed" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
