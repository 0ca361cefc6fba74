"""The producer on a three-broker cluster (librdkafka's mock): leaders and coordinators that
move, brokers that go down and come back while requests are in flight.

The mock moves leaders and coordinators for real and bounces brokers (set down: it resets every
connection and refuses new ones; up: it accepts them again), so these are the wire-level cases
of a cluster's ordinary day. What the log holds afterwards is read with a raw Fetch and decided
by the control markers, as in test_producer_faults.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_producer_faults import decided, read_log

from eosclient import AllBrokersDownError, TransactionalProducer
from eosclient.errors import ApiKey
from eosclient.testing.mock import MockCluster

pytestmark = pytest.mark.mock

TIMEOUT = 15.0
TOPIC = "t"


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    """Three brokers; TOPIC has 3 partitions led by brokers 1, 2, 3; the transaction
    coordinator of "txn" is broker 1."""
    with MockCluster(3) as mock:
        mock.create_topic(TOPIC, 3, replication_factor=3)
        for partition in range(3):
            mock.set_partition_leader(TOPIC, partition, partition + 1)
        mock.set_coordinator("transaction", "txn", 1)
        yield mock


@pytest.fixture
def make_producer() -> Iterator[Callable[..., TransactionalProducer]]:
    made: list[TransactionalProducer] = []

    def make(servers: str, **config: Any) -> TransactionalProducer:
        made.append(TransactionalProducer(servers, transactional_id="txn", config=config))
        return made[-1]

    yield make
    for producer in made:
        producer.close(5)


def address(cluster: MockCluster, broker_id: int) -> tuple[str, int]:
    host, port = cluster.bootstrap_servers.split(",")[broker_id - 1].rsplit(":", 1)
    return host, int(port)


def test_a_leader_reset_with_a_produce_in_flight_is_reconnected_when_it_is_back(
        cluster: MockCluster, make_producer: Callable[..., TransactionalProducer]) -> None:
    # The mock's Metadata leaves a down broker out of its broker list while still naming it
    # leader; the client forgot the address, never reconnected, and commit_transaction() and
    # abort_transaction() timed out for good (a new producer was the only way out).
    producer = make_producer(cluster.bootstrap_servers)
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    cluster.push_broker_request_errors(2, ApiKey.PRODUCE, [(0, 1_000)])  # held in flight
    future = producer.send(TOPIC, b"kept", partition=1)
    time.sleep(0.3)
    cluster.set_broker_down(2)  # resets the connection, the Produce unanswered
    time.sleep(1.5)
    cluster.set_broker_up(2)
    started = time.monotonic()
    producer.commit_transaction(TIMEOUT)
    assert time.monotonic() - started < 10
    assert future.exception(0) is None
    assert decided(read_log(address(cluster, 2), TOPIC, 1)) == ([b"kept"], [])


def test_an_end_txn_in_flight_when_its_coordinator_goes_down_is_resumed_at_the_new_one(
        cluster: MockCluster, make_producer: Callable[..., TransactionalProducer]) -> None:
    producer = make_producer(cluster.bootstrap_servers)
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.send(TOPIC, b"kept", partition=2).result(TIMEOUT)
    cluster.push_broker_request_errors(1, ApiKey.END_TXN, [(0, 2_000)])  # held in flight
    ending = threading.Thread(target=producer.commit_transaction, args=(TIMEOUT,))
    ending.start()
    time.sleep(0.5)
    cluster.set_coordinator("transaction", "txn", 2)
    cluster.set_broker_down(1)  # the EndTxn's outcome is unknown: resumed, not restarted
    ending.join(TIMEOUT + 5)
    cluster.set_broker_up(1)
    assert not ending.is_alive()
    with producer.transaction():  # the producer goes on, on the same identity
        producer.send(TOPIC, b"next", partition=2)
    assert decided(read_log(address(cluster, 3), TOPIC, 2)) == ([b"kept", b"next"], [])


def test_leaders_and_the_coordinator_that_move_mid_transaction_are_followed(
        cluster: MockCluster, make_producer: Callable[..., TransactionalProducer]) -> None:
    producer = make_producer(cluster.bootstrap_servers, **{"linger.ms": 0})
    producer.init_transactions(TIMEOUT)
    sent = []
    for round_ in range(6):
        producer.begin_transaction()
        for partition in range(3):
            value = b"%d-%d" % (round_, partition)
            producer.send(TOPIC, value, partition=partition)
            sent.append((partition, value))
        # Every partition's leader moves one broker on, and so does the coordinator.
        for partition in range(3):
            cluster.set_partition_leader(TOPIC, partition, (partition + round_ + 1) % 3 + 1)
        cluster.set_coordinator("transaction", "txn", round_ % 3 + 1)
        started = time.monotonic()
        producer.commit_transaction(TIMEOUT)
        assert time.monotonic() - started < 10
    for partition in range(3):
        leader = (partition + 6) % 3 + 1  # the mock answers Fetch at the leader only
        committed, aborted = decided(read_log(address(cluster, leader), TOPIC, partition))
        assert committed == [v for p, v in sent if p == partition] and aborted == []


def test_bootstrap_with_some_listed_brokers_down(
        cluster: MockCluster, make_producer: Callable[..., TransactionalProducer]) -> None:
    cluster.set_broker_down(1)
    cluster.set_broker_down(2)
    producer = make_producer(cluster.bootstrap_servers)
    cluster.set_coordinator("transaction", "txn", 3)
    for partition in range(3):
        cluster.set_partition_leader(TOPIC, partition, 3)
    producer.init_transactions(TIMEOUT)
    with producer.transaction():
        producer.send(TOPIC, b"kept", partition=0)
    assert decided(read_log(address(cluster, 3), TOPIC, 0)) == ([b"kept"], [])


@pytest.mark.parametrize("down_for", [pytest.param(3.0, id="3s"),
                                      pytest.param(10.0, id="10s", marks=pytest.mark.long)])
def test_every_broker_down_for_a_while_then_back_mid_transaction(
        down_for: float, cluster: MockCluster,
        make_producer: Callable[..., TransactionalProducer]) -> None:
    heard: list[Exception] = []
    producer = make_producer(cluster.bootstrap_servers, error_cb=heard.append)
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.send(TOPIC, b"before", partition=0).result(TIMEOUT)
    for broker in (1, 2, 3):
        cluster.set_broker_down(broker)
    futures = [producer.send(TOPIC, b"during-%d" % p, partition=p) for p in range(3)]
    time.sleep(down_for)
    for broker in (1, 2, 3):
        cluster.set_broker_up(broker)
    started = time.monotonic()
    producer.commit_transaction(TIMEOUT + down_for)
    assert time.monotonic() - started < 10
    assert all(f.exception(0) is None for f in futures)
    assert any(isinstance(e, AllBrokersDownError) for e in heard)  # told, not raised
    committed = [v for p in range(3)
                 for v in decided(read_log(address(cluster, p + 1), TOPIC, p))[0]]
    assert sorted(committed) == [b"before", b"during-0", b"during-1", b"during-2"]


def test_batches_for_a_leader_that_stays_down_follow_the_new_leader(
        cluster: MockCluster, make_producer: Callable[..., TransactionalProducer]) -> None:
    # A failed connection to a leader must refresh the metadata: its batches then go to the
    # new leader, with the sequence numbers they had, without the old one ever coming back.
    producer = make_producer(cluster.bootstrap_servers, **{"linger.ms": 0})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.send(TOPIC, b"first", partition=1).result(TIMEOUT)
    cluster.push_broker_request_errors(2, ApiKey.PRODUCE, [(0, 1_000)])  # held in flight
    held = producer.send(TOPIC, b"second", partition=1)
    time.sleep(0.3)
    cluster.set_broker_down(2)
    cluster.set_partition_leader(TOPIC, 1, 3)
    started = time.monotonic()
    producer.commit_transaction(TIMEOUT)
    assert time.monotonic() - started < 10
    assert held.exception(0) is None
    assert decided(read_log(address(cluster, 3), TOPIC, 1)) == ([b"first", b"second"], [])
