"""What noida-db 0.2.3 gets wrong: partitions registered in a transaction and left empty, and a
static group's leader replaced within a generation (at the end).

Kafka lets a transaction register a partition (AddPartitionsToTxn) and write nothing to it; the
EndTxn then writes the marker there anyway. Pre-registering every output partition (KIP-609
style, ExactlyOnceProcessor's ``preregister_partitions=True``) relies on it. noida-db refuses such
an EndTxn with INVALID_TXN_STATE (48) once the partition holds records of this transactional.id
from a transaction that was aborted, so the producer goes FATAL; that is why the processor
registers partitions as it writes by default. These tests measure the quirk: if a noida-db
release fixes it, they fail, and the docs and the processor's default can say so.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from eosclient import ReadCommittedConsumer, TopicPartition, TransactionalProducer
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


def static_member(broker: RunningBroker, group: str, instance: str,
                  assignor: str) -> ReadCommittedConsumer:
    return ReadCommittedConsumer(broker.bootstrap_servers, group_id=group,
                                 group_instance_id=instance,
                                 config={"session.timeout.ms": 30000,
                                         "heartbeat.interval.ms": 300,
                                         "partition.assignment.strategy": assignor})


def settle(*members: ReadCommittedConsumer, partitions: int) -> None:
    """Poll every member until each has partitions and they add up to ``partitions``."""
    deadline = time.monotonic() + 20
    while not all(m.assignment() for m in members) or \
            sum(len(m.assignment()) for m in members) != partitions:
        assert time.monotonic() < deadline, [m.assignment() for m in members]
        for m in members:
            m.poll(0.1)


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_a_restarted_static_leader_keeps_the_generation_and_the_layout(
        noida_broker: RunningBroker, unique_name: Callable[[str], str], assignor: str) -> None:
    # noida-db names a static leader's replacement (same group.instance.id, new member id) leader
    # of the *same* generation, applies the assignment it sends, and never asks the other member
    # to rejoin (Kafka gives the replacement the old member's place). Ordering members by member
    # id, a replacement leader used to compute another layout, and the two live members then
    # owned the same partitions in one generation (duplicates). Ordered by group.instance.id,
    # as Kafka's assignors do, every replacement hands out the same layout. Five restarts: with
    # member ids drawn at random, the old order survived all five with odds of 1 in 32.
    topic = topics.create_topic(noida_broker, unique_name("in"), 4)
    group = unique_name("group")
    leader = static_member(noida_broker, group, "worker-a", assignor)
    other = static_member(noida_broker, group, "worker-b", assignor)
    try:
        leader.subscribe([topic])
        settle(leader, partitions=4)
        other.subscribe([topic])
        settle(leader, other, partitions=4)
        generation = other.group_metadata().generation_id
        layout = (sorted(leader.assignment()), sorted(other.assignment()))
        for _ in range(5):
            leader.close()  # static: no LeaveGroup, the place is kept
            leader = static_member(noida_broker, group, "worker-a", assignor)
            leader.subscribe([topic])
            settle(leader, partitions=len(layout[0]))
            for _ in range(5):
                other.poll(0.1)  # the other member would be told to rejoin here
            # the quirk: one generation throughout, and nobody asked to rejoin
            assert leader.group_metadata().generation_id == generation
            assert other.group_metadata().generation_id == generation
            # the client's part: the same layout, so no partition has two owners
            assert (sorted(leader.assignment()), sorted(other.assignment())) == layout
    finally:
        leader.close()
        other.close()
