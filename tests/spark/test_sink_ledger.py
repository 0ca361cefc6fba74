"""The sink's transaction against a broker, without Spark: a batch counts as done only once
its ledger entry reads back, so a replay right after the commit is skipped.

Tansu applies a transaction's offsets only after every earlier open transaction on the same
partitions ends (``tests/integration/test_tansu_quirks.py``); on such a broker the commit must
wait for that, or a task retried at once would write its rows again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from eosclient import TopicPartition, TransactionalProducer
from eosclient.errors import KafkaTimeoutError
from eosclient.spark._rows import Chunk
from eosclient.spark._task import SinkSpec, open_producer, transaction
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = [pytest.mark.broker]

TIMEOUT = 15.0


def _spec(broker: RunningBroker, topic: str, sink_id: str, timeout: float = TIMEOUT) -> SinkSpec:
    tp = TopicPartition(topic, 0)
    return SinkSpec(broker.bootstrap_servers, sink_id, topic, tp, (tp,), {}, {}, timeout, 10)


def _run(spec: SinkSpec, topic: str, batch_id: int, *values: bytes) -> int | None:
    """One attempt of partition 0's task: its own producer and ledger, closed after."""
    producer, ledger = open_producer(spec, 0), spec.ledger(0)
    try:
        rows = [Chunk({(topic, 0): ([None] * len(values), list(values))}, [], len(values))]
        return transaction(spec, producer, ledger, batch_id=batch_id, rows=rows)
    finally:
        ledger.close()
        producer.close(TIMEOUT)


def test_a_retry_right_after_the_commit_is_skipped_while_another_transaction_is_open(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    topic = topics.create_topic(broker, unique_name("out"), 1)
    spec = _spec(broker, topic, unique_name("sink"))
    with TransactionalProducer(broker.bootstrap_servers,
                               transactional_id=unique_name("other")) as other:
        other.init_transactions(TIMEOUT)
        other.begin_transaction()
        other.send(topic, b"other", partition=0)
        other.flush(TIMEOUT)  # open, and earlier on the partition than the sink's transaction
        results: list[int | None] = []
        first = threading.Thread(target=lambda: results.append(_run(spec, topic, 0, b"a", b"b")))
        first.start()
        first.join(1.0 if broker.kind == "tansu" else TIMEOUT)
        if broker.kind == "tansu":  # the offsets wait for the other transaction
            assert first.is_alive() and results == []
        other.commit_transaction(TIMEOUT)
        first.join(TIMEOUT)
    assert results == [2]
    assert _run(spec, topic, 0, b"a", b"b") is None  # the retry: skipped


def test_a_ledger_that_never_shows_the_commit_fails_loudly(
        tansu_broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    topic = topics.create_topic(tansu_broker, unique_name("out"), 1)
    spec = _spec(tansu_broker, topic, unique_name("sink"), timeout=1.0)
    with TransactionalProducer(tansu_broker.bootstrap_servers,
                               transactional_id=unique_name("other")) as other:
        other.init_transactions(TIMEOUT)
        other.begin_transaction()
        other.send(topic, b"other", partition=0)
        other.flush(TIMEOUT)
        with pytest.raises(KafkaTimeoutError, match="batch 0 committed, but the ledger"):
            _run(spec, topic, 0, b"a")
        other.abort_transaction(TIMEOUT)
