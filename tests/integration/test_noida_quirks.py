"""What noida-db 0.2.3 gets wrong about partitions registered in a transaction and left empty.

Kafka lets a transaction register a partition (AddPartitionsToTxn) and write nothing to it; the
EndTxn then writes the marker there anyway. Pre-registering every output partition (KIP-609
style, ExactlyOnceProcessor's ``preregister_partitions=True``) relies on it. noida-db refuses such
an EndTxn with INVALID_TXN_STATE (48) once the partition holds records of this transactional.id
from a transaction that was aborted, so the producer goes FATAL; that is why the processor
registers partitions as it writes by default. These tests measure the quirk: if a noida-db
release fixes it, they fail, and the docs and the processor's default can say so.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from eosclient import TopicPartition, TransactionalProducer
from eosclient.errors import FatalError
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = [pytest.mark.broker]

TIMEOUT = 15.0


def partitions(topic: str, *numbers: int) -> list[TopicPartition]:
    return [TopicPartition(topic, n) for n in numbers]


def test_a_takeover_then_an_empty_partition_that_a_fenced_transaction_wrote_is_refused(
        noida_broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    topic = topics.create_topic(noida_broker, unique_name("out"), 3)
    txn_id = unique_name("t")
    with TransactionalProducer(noida_broker.bootstrap_servers, transactional_id=txn_id) as old:
        old.init_transactions(TIMEOUT)
        old.begin_transaction(partitions(topic, 0, 1, 2))
        old.send(topic, b"left open", partition=1)
        old.flush(TIMEOUT)  # then it "crashes": the next instance fences it, the broker aborts
        with TransactionalProducer(noida_broker.bootstrap_servers,
                                   transactional_id=txn_id) as new:
            new.init_transactions(TIMEOUT)
            new.begin_transaction(partitions(topic, 1, 2))  # 1 stays empty
            new.send(topic, b"committed?", partition=2)
            with pytest.raises(FatalError, match="INVALID_TXN_STATE"):
                new.commit_transaction(TIMEOUT)


def test_an_empty_partition_after_an_abort_there_is_refused(
        noida_broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    topic = topics.create_topic(noida_broker, unique_name("out"), 3)
    with TransactionalProducer(noida_broker.bootstrap_servers,
                               transactional_id=unique_name("t")) as producer:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction(partitions(topic, 0, 1, 2))
        producer.send(topic, b"aborted", partition=1)
        producer.flush(TIMEOUT)
        producer.abort_transaction(TIMEOUT)
        producer.begin_transaction(partitions(topic, 0, 1, 2))  # 1 stays empty
        producer.send(topic, b"committed?", partition=0)
        with pytest.raises(FatalError, match="INVALID_TXN_STATE"):
            producer.commit_transaction(TIMEOUT)


def test_without_that_history_an_empty_registered_partition_commits(
        noida_broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    topic = topics.create_topic(noida_broker, unique_name("out"), 3)
    with TransactionalProducer(noida_broker.bootstrap_servers,
                               transactional_id=unique_name("t")) as producer:
        producer.init_transactions(TIMEOUT)
        for value in (b"one", b"two"):
            producer.begin_transaction(partitions(topic, 0, 1, 2))  # 1 and 2 stay empty
            producer.send(topic, value, partition=0)
            producer.commit_transaction(TIMEOUT)
