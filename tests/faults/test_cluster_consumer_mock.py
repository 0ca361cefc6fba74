"""ReadCommittedConsumer on a three-broker cluster (librdkafka's mock): transactional topics,
read with ``check.crcs``.

The mock writes its transaction markers (control batches) with a CRC of 0, so a consumer that
checks CRCs cannot read past the first marker of a transactional topic there; librdkafka's own
consumer reads it because its ``check.crcs`` defaults to off. Nor is the mock a semantic broker:
its Fetch answers give the high watermark as the last stable offset even while a transaction is
open, and an empty aborted-transactions index even after an abort (probed: see docs/testing.md).
So what the consumer delivers here is decided by the markers alone, and these tests check that
it is still exactly the committed records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from eosclient import (
    ConsumerRecord,
    CorruptRecordError,
    ReadCommittedConsumer,
    TopicPartition,
    TransactionalProducer,
)
from eosclient.testing.mock import MockCluster
from eosclient.testing.reader import read_raw_batches

pytestmark = pytest.mark.mock

TIMEOUT = 15.0
TOPIC = "t"
PARTITIONS = [TopicPartition(TOPIC, p) for p in range(3)]


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    """Three brokers; TOPIC has 3 partitions led by brokers 1, 2, 3; the transaction
    coordinator of "txn" is broker 3, the leader of none of the partitions read first."""
    with MockCluster(3) as mock:
        mock.create_topic(TOPIC, 3, replication_factor=3)
        for tp in PARTITIONS:
            mock.set_partition_leader(TOPIC, tp.partition, tp.partition + 1)
        mock.set_coordinator("transaction", "txn", 3)
        yield mock


@pytest.fixture
def producer(cluster: MockCluster) -> Iterator[TransactionalProducer]:
    made = TransactionalProducer(cluster.bootstrap_servers, transactional_id="txn")
    made.init_transactions(TIMEOUT)
    yield made
    made.close(5)


@pytest.fixture
def make_consumer(cluster: MockCluster) -> Iterator[Callable[..., ReadCommittedConsumer]]:
    made: list[ReadCommittedConsumer] = []

    def make(**config: Any) -> ReadCommittedConsumer:
        consumer = ReadCommittedConsumer(cluster.bootstrap_servers, auto_offset_reset="earliest",
                                         config=config)
        consumer.assign(PARTITIONS)
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close()


def transaction(producer: TransactionalProducer, name: str, *, commit: bool) -> list[bytes]:
    """Two records per partition; sent before the end (flushed), so an aborted transaction's
    records are in the log too. Returns the values."""
    producer.begin_transaction()
    values = []
    for tp in PARTITIONS:
        for i in range(2):
            values.append(f"{name}{tp.partition}.{i}".encode())
            producer.send(TOPIC, values[-1], partition=tp.partition)
    producer.flush(TIMEOUT)
    if commit:
        producer.commit_transaction(TIMEOUT)
    else:
        producer.abort_transaction(TIMEOUT)
    return values


def log_ends(cluster: MockCluster) -> dict[TopicPartition, int]:
    """Each partition's end: after its last batch, markers included."""
    return {tp: read_raw_batches(cluster.bootstrap_servers, TOPIC, tp.partition,
                                 check_crcs=False)[-1].last_offset + 1 for tp in PARTITIONS}


def read_to(consumer: ReadCommittedConsumer, ends: dict[TopicPartition, int],
            ) -> list[ConsumerRecord]:
    """Poll until every partition's position reaches its end (or TIMEOUT passes)."""
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + TIMEOUT
    while any(consumer.position(tp, TIMEOUT) < end for tp, end in ends.items()):
        assert time.monotonic() < deadline, f"positions stuck below {ends}"
        records += consumer.poll(0.2)
    return records


def test_committed_records_are_read_with_check_crcs_off_and_aborted_ones_are_not(
        cluster: MockCluster, producer: TransactionalProducer,
        make_consumer: Callable[..., ReadCommittedConsumer]) -> None:
    # The consumer checked every batch's CRC, so it failed at the mock's first marker and no
    # transactional topic could be read on the mock at all.
    committed = transaction(producer, "c", commit=True)
    aborted = transaction(producer, "a", commit=False)
    later = transaction(producer, "d", commit=True)
    in_log = [r.value for tp in PARTITIONS for b in read_raw_batches(
        cluster.bootstrap_servers, TOPIC, tp.partition, check_crcs=False)
        if not b.is_control for r in b.records()]
    assert sorted(in_log) == sorted(committed + aborted + later)  # the abort is in the log

    consumer = make_consumer(**{"check.crcs": False})
    records = read_to(consumer, log_ends(cluster))
    assert sorted(r.value for r in records) == sorted(committed + later)
    for tp in PARTITIONS:  # in offset order per partition, each once
        offsets = [r.offset for r in records if r.partition == tp.partition]
        assert offsets == sorted(set(offsets))


def test_check_crcs_on_fails_at_the_first_marker_naming_the_setting(
        cluster: MockCluster, producer: TransactionalProducer,
        make_consumer: Callable[..., ReadCommittedConsumer]) -> None:
    # The error said only "fails its CRC-32C check": nothing told the user of check.crcs.
    transaction(producer, "c", commit=True)
    consumer = make_consumer()
    assert consumer.config.check_crcs is True  # the default
    delivered: list[ConsumerRecord] = []
    deadline = time.monotonic() + TIMEOUT
    with pytest.raises(CorruptRecordError, match=r"CRC-32C.*check\.crcs=False") as raised:
        while time.monotonic() < deadline:
            delivered += consumer.poll(0.2)
    marker = read_raw_batches(cluster.bootstrap_servers, TOPIC, raised.value.partition,
                              check_crcs=False)[-1]
    assert marker.is_control and raised.value.offset == marker.base_offset
    assert delivered == []  # the records before it wait for that marker: none is delivered


def test_an_open_transaction_is_held_though_the_mock_gives_it_as_stable(
        cluster: MockCluster, producer: TransactionalProducer,
        make_consumer: Callable[..., ReadCommittedConsumer]) -> None:
    # The mock's last stable offset is its high watermark even while a transaction is open; a
    # consumer that trusted it (and found no abort in the empty index) would deliver records
    # of a transaction that may yet abort.
    committed = transaction(producer, "c", commit=True)
    ends = log_ends(cluster)
    producer.begin_transaction()
    for tp in PARTITIONS:
        producer.send(TOPIC, b"open", partition=tp.partition)
    producer.flush(TIMEOUT)
    consumer = make_consumer(**{"check.crcs": False})
    records = read_to(consumer, ends)
    records += consumer.poll(1.0)  # the open records are fetched (below the "LSO"), not given
    assert sorted(r.value for r in records) == sorted(committed)
    assert all(consumer.position(tp) == ends[tp] for tp in PARTITIONS)
    producer.commit_transaction(TIMEOUT)
    assert sorted(r.value for r in read_to(consumer, log_ends(cluster))) == [b"open"] * 3


def test_reading_from_leaders_that_move_and_brokers_that_bounce_gives_the_committed_records(
        cluster: MockCluster, producer: TransactionalProducer,
        make_consumer: Callable[..., ReadCommittedConsumer]) -> None:
    # Every partition's leader moves (a new leader epoch each time: the Fetch at the old one
    # is refused) and brokers go down and up between transactions, while the consumer reads.
    consumer = make_consumer(**{"check.crcs": False})
    committed: list[bytes] = []
    records: list[ConsumerRecord] = []
    for round_ in range(6):
        committed += transaction(producer, f"c{round_}-", commit=True)
        transaction(producer, f"a{round_}-", commit=False)
        records += consumer.poll(0.2)
        for tp in PARTITIONS:
            cluster.set_partition_leader(TOPIC, tp.partition, (tp.partition + round_) % 3 + 1)
        if round_ % 2:
            down = round_ % 3 + 1
            cluster.set_broker_down(down)
            records += consumer.poll(0.5)
            cluster.set_broker_up(down)
    records += read_to(consumer, log_ends(cluster))
    assert sorted(r.value for r in records) == sorted(committed)
    for tp in PARTITIONS:
        offsets = [r.offset for r in records if r.partition == tp.partition]
        assert offsets == sorted(set(offsets))

