"""transaction.timeout.ms on real brokers (issue 11, item 6): neither noida-db nor Tansu aborts a
timed-out transaction, so the client does, and a read_committed reader's LSO moves on.

The sans-IO rules (every state the timer fires in, the abort's bump, the application's later
abort) are in ``tests/unit/test_txn_timeout.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest

from eosclient import AbortableError, TransactionalProducer
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.reader import read_partition

pytestmark = pytest.mark.broker

TIMEOUT_MS = 2_000


def _committed_values(broker: RunningBroker, topic: str, wait: float) -> list[bytes | None]:
    """Read the partition read_committed until something committed shows, or ``wait`` passes."""
    deadline = time.monotonic() + wait
    while True:
        values = [r.value for r in read_partition(broker.bootstrap_servers, topic, 0)]
        if values or time.monotonic() > deadline:
            return values
        time.sleep(0.2)


def test_transaction_left_open_past_its_timeout_is_aborted_and_the_lso_moves_on(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str],
        caplog: pytest.LogCaptureFixture) -> None:
    # A producer whose application hung mid-transaction held the LSO back for ever: a reader
    # never saw the records committed after it, on either broker.
    topics.create_topic(broker, topic_name)
    caplog.set_level(logging.WARNING, logger="eosclient.producer")
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=unique_name("hung"),
                               transaction_timeout_ms=TIMEOUT_MS) as hung, \
            TransactionalProducer(broker.bootstrap_servers,
                                  transactional_id=unique_name("live")) as live:
        hung.init_transactions()
        live.init_transactions()
        hung.begin_transaction()
        hung.send(topic_name, b"abandoned", partition=0).result(10)  # written, transaction open
        started = time.monotonic()
        with live.transaction():
            live.send(topic_name, b"committed", partition=0)
        # The hung application makes no call at all; only its producer's I/O thread is alive.
        assert _committed_values(broker, topic_name, wait=15.0) == [b"committed"]
        waited = time.monotonic() - started
        assert waited >= TIMEOUT_MS / 1000 - 0.5  # not before the timeout...
        assert waited < TIMEOUT_MS / 1000 + 8.0  # ...and not much after it
        assert any("transaction.timeout.ms (2000 ms)" in r.getMessage()
                   and r.levelno == logging.WARNING for r in caplog.records)

        # The application wakes up: its next call says why the transaction is gone.
        with pytest.raises(AbortableError, match=r"transaction\.timeout\.ms"):
            hung.commit_transaction(10)
        hung.abort_transaction(10)
        with hung.transaction():
            hung.send(topic_name, b"redone", partition=0)
    values = [r.value for r in read_partition(broker.bootstrap_servers, topic_name, 0)]
    assert values == [b"committed", b"redone"]
