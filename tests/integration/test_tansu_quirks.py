"""What Tansu 0.6 gets wrong about when a transaction's consumer offsets take effect.

On Apache Kafka, once EndTxn(commit) is answered the offsets the transaction committed through
TxnOffsetCommit are the group's (and an OffsetFetch with ``require_stable`` waits for the
markers). Tansu answers EndTxn at once but applies the offsets only when every open transaction
that wrote earlier to one of the same partitions has ended, and it ignores ``require_stable``: a
reader sees the old offset meanwhile, even after the committer's transactional.id was
re-initialised. The Spark sink reads its ledger back after each commit because of this
(``Ledger.confirm``). If a Tansu release fixes it, this test fails, and the docs can say so.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from eosclient import ReadCommittedConsumer, TopicPartition, TransactionalProducer
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = [pytest.mark.broker]

TIMEOUT = 15.0


def _hold_open(producer: TransactionalProducer, topic: str) -> None:
    """Begin a transaction and write one record to partition 0, left open."""
    producer.begin_transaction()
    producer.send(topic, b"open", partition=0)
    producer.flush(TIMEOUT)


def _commit_with_offsets(producer: TransactionalProducer, topic: str, value: bytes,
                         offsets: dict[TopicPartition, int], group: str) -> None:
    """One record to partition 0 and ``offsets`` for ``group``, in a committed transaction."""
    producer.begin_transaction()
    producer.send(topic, value, partition=0)
    producer.send_offsets_to_transaction(offsets, group)
    producer.commit_transaction(TIMEOUT)


def test_committed_offsets_wait_for_an_earlier_open_transaction(
        tansu_broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    servers = tansu_broker.bootstrap_servers
    topic = topics.create_topic(tansu_broker, unique_name("out"), 1)
    tp, group = TopicPartition(topic, 0), unique_name("g")
    with TransactionalProducer(servers, transactional_id=unique_name("a")) as first, \
            TransactionalProducer(servers, transactional_id=unique_name("b")) as second, \
            ReadCommittedConsumer(servers, group_id=group) as reader:
        first.init_transactions(TIMEOUT)
        second.init_transactions(TIMEOUT)
        _hold_open(first, topic)
        _commit_with_offsets(second, topic, b"committed", {tp: 7}, group)  # answered NONE
        assert reader.committed([tp], TIMEOUT) == {tp: None}  # Kafka: 7
        first.commit_transaction(TIMEOUT)
        assert reader.committed([tp], TIMEOUT) == {tp: 7}


def test_deferred_offsets_are_dropped_when_the_same_producer_aborts_its_next_transaction(
        tansu_broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    """Tansu keeps a transaction's offsets in the state of its producer *epoch*; the producer's
    next transaction reuses that state, and aborting it drops offsets still deferred there.
    ExactlyOnceProcessor commits them again plainly after each commit because of this
    (test_processor.py::test_offsets_tansu_deferred_survive_the_next_transactions_abort)."""
    servers = tansu_broker.bootstrap_servers
    topic = topics.create_topic(tansu_broker, unique_name("out"), 1)
    tp, group = TopicPartition(topic, 0), unique_name("g")
    with TransactionalProducer(servers, transactional_id=unique_name("a")) as first, \
            TransactionalProducer(servers, transactional_id=unique_name("b")) as second, \
            ReadCommittedConsumer(servers, group_id=group) as reader:
        first.init_transactions(TIMEOUT)
        second.init_transactions(TIMEOUT)
        _hold_open(first, topic)
        _commit_with_offsets(second, topic, b"committed", {tp: 7}, group)  # deferred: one is open
        second.begin_transaction()
        second.send(topic, b"aborted", partition=0)
        second.flush(TIMEOUT)
        second.abort_transaction(TIMEOUT)
        first.commit_transaction(TIMEOUT)
        assert reader.committed([tp], TIMEOUT) == {tp: None}  # Kafka: 7


def test_an_older_epochs_deferred_offsets_are_applied_after_a_newer_epochs(
        tansu_broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    """When a transaction ends and none overlapping it is open, Tansu settles the deferred
    transactions that overlap it, but of each transactional.id only the first overlapping
    epoch. A producer re-initialised (a restart, a recovery) while its committed offsets were
    deferred leaves them in the old epoch; settled later, they replace the newer ones, and the
    group goes back (a plain commit of the newer offsets, too). ExactlyOnceProcessor therefore
    never rewinds past what it committed itself, even after handing a partition over."""
    servers = tansu_broker.bootstrap_servers
    topic = topics.create_topic(tansu_broker, unique_name("out"), 1)
    tp, group, txn = TopicPartition(topic, 0), unique_name("g"), unique_name("b")
    with TransactionalProducer(servers, transactional_id=unique_name("a")) as first, \
            ReadCommittedConsumer(servers, group_id=group) as reader:
        first.init_transactions(TIMEOUT)
        _hold_open(first, topic)
        with TransactionalProducer(servers, transactional_id=txn) as old:
            old.init_transactions(TIMEOUT)
            _commit_with_offsets(old, topic, b"older", {tp: 5}, group)  # deferred: one is open
        with TransactionalProducer(servers, transactional_id=txn) as new:
            new.init_transactions(TIMEOUT)  # a new epoch; the old one's state stays
            _commit_with_offsets(new, topic, b"newer", {tp: 9}, group)  # deferred too
            reader.commit({tp: 9}, TIMEOUT)  # plainly: the group shows 9 now
            assert reader.committed([tp], TIMEOUT) == {tp: 9}
        first.commit_transaction(TIMEOUT)
        assert reader.committed([tp], TIMEOUT) == {tp: 5}  # Kafka: 9
