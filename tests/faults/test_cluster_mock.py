"""The producer on a three-broker cluster (librdkafka's mock): leaders and coordinators that
move, brokers that go down and come back while requests are in flight.

The mock moves leaders and coordinators for real and bounces brokers (set down: it resets every
connection and refuses new ones; up: it accepts them again), so these are the wire-level cases
of a cluster's ordinary day. What the log holds afterwards is read with a raw Fetch and decided
by the control markers, as in test_producer_faults.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_producer_faults import decided, read_log

from eosclient import TransactionalProducer
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
