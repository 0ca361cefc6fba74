"""What noida-db 0.2.3 gets wrong: partitions registered in a transaction and left empty, and a
static group's leader replaced within a generation (at the end).

Kafka lets a transaction register a partition (AddPartitionsToTxn) and write nothing to it; the
EndTxn then writes the marker there anyway. noida-db refuses such an EndTxn(commit) with
INVALID_TXN_STATE (48) once its producer id ever aborted records on that partition (by
EndTxn(abort), or by an InitProducerId that found the transaction open: a takeover), after
writing the COMMIT marker on some of the other partitions, or none: it walks the partitions in
no fixed order and stops at the empty one. The transaction is then half committed, or left open
with its records holding back the LSO. The first test measures that on the wire (eosclient no
longer sends such a transaction): if a noida-db release fixes it, it fails, and the docs can say
so. The others check that ``begin_transaction(partitions=...)`` pre-registers a declared
partition only where an empty one is safe, on both brokers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from eosclient import ReadCommittedConsumer, TopicPartition, TransactionalProducer
from eosclient._core import _txn_wire as wire
from eosclient._core.decode import ControlType
from eosclient._core.encoder import encode_batch
from eosclient._core.types import ProducerIdentity
from eosclient._net.blocking import BlockingConnection
from eosclient._protocol.apis import APIS
from eosclient.errors import ApiKey
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.reader import read_raw_batches

pytestmark = [pytest.mark.broker]

TIMEOUT = 15.0
INVALID_TXN_STATE = 48
_PRODUCE = APIS[ApiKey.PRODUCE].request


def partitions(topic: str, *numbers: int) -> list[TopicPartition]:
    return [TopicPartition(topic, n) for n in numbers]


def decided(broker: RunningBroker, topic: str,
            partition: int) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """(committed, aborted, still open) values of one partition, by its control markers."""
    pending: dict[int, list[bytes]] = {}
    committed: list[bytes] = []
    aborted: list[bytes] = []
    for batch in read_raw_batches(broker.bootstrap_servers, topic, partition):
        if batch.is_control:
            values = pending.pop(batch.producer_id, [])
            (committed if batch.control_type is ControlType.COMMIT else aborted).extend(values)
        else:
            values = [r.value or b"" for r in batch.records()]
            pending.setdefault(batch.producer_id, []).extend(values)
    return committed, aborted, [v for vs in pending.values() for v in vs]


def registrations(producer: TransactionalProducer) -> int:
    stats = producer.stats().requests.get("AddPartitionsToTxn")
    return 0 if stats is None else stats.count


class RawTransactions:
    """A transactional producer spoken by hand, for what eosclient no longer sends: partitions
    registered at begin and left empty. One broker (it is every coordinator and leader)."""

    def __init__(self, conn: BlockingConnection, txn_id: str, topic: str) -> None:
        self.conn, self.txn_id, self.topic = conn, txn_id, topic
        answer = conn.request(wire.init_producer_id(txn_id, 60_000))
        assert answer.error_code == 0, answer
        self.me = ProducerIdentity(answer.producer_id, answer.producer_epoch)
        self.sequences: dict[int, int] = {}

    def begin(self, *numbers: int) -> None:
        tps = partitions(self.topic, *numbers)
        codes = wire.partition_codes(self.conn.request(
            wire.add_partitions(self.txn_id, self.me, tps), version=3))
        assert set(codes.values()) == {0}, codes

    def send(self, partition: int, value: bytes) -> None:
        sequence = self.sequences.get(partition, 0)
        self.sequences[partition] = sequence + 1
        batch = encode_batch([(int(time.time() * 1000), None, value, ())],
                             producer_id=self.me.producer_id, producer_epoch=self.me.epoch,
                             base_sequence=sequence, transactional=True)
        request = _PRODUCE(transactional_id=self.txn_id, acks=-1, timeout_ms=10_000,
                           topic_data=[_PRODUCE.TopicProduceData(name=self.topic, partition_data=[
                               _PRODUCE.TopicProduceData.PartitionProduceData(
                                   index=partition, records=batch)])])
        answer = self.conn.request(request)
        [code] = [p.error_code for t in answer.responses for p in t.partition_responses]
        assert code == 0, answer

    def end(self, *, commit: bool) -> int:
        answer = self.conn.request(wire.end_txn(self.txn_id, self.me, committed=commit))
        return int(answer.error_code)


@pytest.fixture
def raw(broker: RunningBroker,
        unique_name: Callable[[str], str]) -> Iterator[Callable[[str], RawTransactions]]:
    with BlockingConnection(broker.host, broker.port) as conn:
        yield lambda topic: RawTransactions(conn, unique_name("t"), topic)


def test_on_the_wire_an_empty_registered_partition_once_aborted_fails_the_commit_on_noida(
        broker: RunningBroker, raw: Callable[[str], RawTransactions],
        unique_name: Callable[[str], str]) -> None:
    # The root cause of the half commit, with no client logic in between: noida-db answers 48
    # and the transaction is not atomic (p1's record committed or left open, never aborted);
    # Tansu, like Kafka, commits.
    topic = topics.create_topic(broker, unique_name("out"), 2)
    producer = raw(topic)
    producer.begin(0, 1)
    producer.send(0, b"aborted")
    assert producer.end(commit=False) == 0
    producer.begin(0, 1)  # 0 stays empty
    producer.send(1, b"committed?")
    code = producer.end(commit=True)
    committed, aborted, still_open = decided(broker, topic, 1)
    if broker.kind == "noida":
        assert code == INVALID_TXN_STATE
        assert aborted == [] and committed + still_open == [b"committed?"]
    else:
        assert code == 0
        assert (committed, aborted, still_open) == ([b"committed?"], [], [])


def test_a_declared_partition_left_empty_after_a_takeover_costs_nothing(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    # The report: the new instance's commit raised FatalError (INVALID_TXN_STATE) on noida-db,
    # with p1's record committed or left open, because p0 was registered at begin, got no record,
    # and the takeover had aborted the old instance's record there. After a takeover no declared
    # partition is registered before its first record.
    topic = topics.create_topic(broker, unique_name("out"), 2)
    txn_id = unique_name("t")
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=txn_id) as old:
        old.init_transactions(TIMEOUT)
        old.begin_transaction(partitions(topic, 0, 1))
        old.send(topic, b"left open", partition=0)
        old.flush(TIMEOUT)  # then it "crashes": the next instance fences it, the broker aborts
        with TransactionalProducer(broker.bootstrap_servers,
                                   transactional_id=txn_id) as new:
            new.init_transactions(TIMEOUT)
            new.begin_transaction(partitions(topic, 0, 1))  # 0 stays empty
            new.send(topic, b"committed", partition=1)
            new.commit_transaction(TIMEOUT)
            new.begin_transaction(partitions(topic, 0, 1))  # and then 1 stays empty
            new.send(topic, b"again", partition=0)
            new.commit_transaction(TIMEOUT)
    assert decided(broker, topic, 0) == ([b"again"], [b"left open"], [])
    assert decided(broker, topic, 1) == ([b"committed"], [], [])


def test_a_declared_partition_left_empty_after_an_abort_there_costs_nothing(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    # noida-db used to fail the second commit (a FatalError after committing partition 0): the
    # abort left records of this producer id on 1, and 1 was registered at begin and left empty.
    topic = topics.create_topic(broker, unique_name("out"), 3)
    with TransactionalProducer(broker.bootstrap_servers,
                               transactional_id=unique_name("t")) as producer:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction(partitions(topic, 0, 1, 2))
        producer.send(topic, b"aborted", partition=1)
        producer.flush(TIMEOUT)
        producer.abort_transaction(TIMEOUT)
        producer.begin_transaction(partitions(topic, 0, 1, 2))  # 1 and 2 stay empty
        producer.send(topic, b"committed", partition=0)
        producer.commit_transaction(TIMEOUT)
    assert decided(broker, topic, 0) == ([b"committed"], [], [])
    assert decided(broker, topic, 1) == ([], [b"aborted"], [])


def test_a_new_producer_id_pre_registers_and_an_empty_registered_partition_commits(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    # Where the client saw every transaction of its producer id (a new one, epoch 0), the
    # declared partitions it never aborted records on are registered at begin (the round trip
    # overlaps the application's work), and noida-db commits them empty.
    topic = topics.create_topic(broker, unique_name("out"), 3)
    with TransactionalProducer(broker.bootstrap_servers,
                               transactional_id=unique_name("t")) as producer:
        producer.init_transactions(TIMEOUT)
        for value in (b"one", b"two"):
            before = registrations(producer)
            producer.begin_transaction(partitions(topic, 0, 1, 2))  # 1 and 2 stay empty
            producer.send(topic, value, partition=0)
            producer.commit_transaction(TIMEOUT)
            assert registrations(producer) == before + 1  # all three at begin, in one request
        before = registrations(producer)
        producer.begin_transaction(partitions(topic, 1))
        producer.commit_transaction(TIMEOUT)
        assert registrations(producer) == before + 1  # registered, empty, committed
    assert decided(broker, topic, 0) == ([b"one", b"two"], [], [])


def test_after_a_takeover_nothing_is_registered_before_its_first_record(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    # An earlier holder of the producer id may have aborted records anywhere: the client cannot
    # know where, so a declared partition waits for its first record (as Java registers).
    topic = topics.create_topic(broker, unique_name("out"), 2)
    txn_id = unique_name("t")
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=txn_id) as first:
        first.init_transactions(TIMEOUT)
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=txn_id) as producer:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction(partitions(topic, 0, 1))
        producer.commit_transaction(TIMEOUT)  # nothing was registered: nothing to end
        assert registrations(producer) == 0
        producer.begin_transaction(partitions(topic, 0, 1))
        producer.send(topic, b"one", partition=1)
        producer.commit_transaction(TIMEOUT)
        assert registrations(producer) == 1
    assert decided(broker, topic, 1) == ([b"one"], [], [])


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
