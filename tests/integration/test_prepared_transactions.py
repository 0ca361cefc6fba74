"""A transaction prepared by one process and ended by another, by its identity alone, on both
brokers: what the Spark data source writer's commit protocol stands on."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from eosclient import PreparedTransaction, TopicPartition, TransactionalProducer, end_prepared
from eosclient._producer.prepared import check_prepared
from eosclient.errors import FencedError, IllegalStateError
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import read_topic

pytestmark = pytest.mark.broker

# A child process writes one record, prepares its transaction and exits without ending it.
CHILD = r"""
import json, sys
from eosclient import TransactionalProducer, TopicPartition
servers, tid, topic, value = sys.argv[1:5]
producer = TransactionalProducer(servers, transactional_id=tid)
producer.init_transactions(10)
producer.begin_transaction([TopicPartition(topic, 0)])
producer.send(topic, value.encode(), partition=0)
p = producer.prepare_transaction(10)
print(json.dumps([p.transactional_id, p.producer_id, p.epoch]))
"""


def prepare_elsewhere(broker: RunningBroker, tid: str, topic: str,
                      value: str) -> PreparedTransaction:
    out = subprocess.run([sys.executable, "-c", CHILD, broker.bootstrap_servers, tid, topic,
                          value], capture_output=True, text=True, timeout=60, check=True)
    tid_, pid, epoch = json.loads(out.stdout.strip().splitlines()[-1])
    return PreparedTransaction(tid_, pid, epoch)


def values(broker: RunningBroker, topic: str) -> list[bytes | None]:
    return sorted((r.value for r in read_topic(broker.bootstrap_servers, topic)),
                  key=lambda v: v or b"")


def test_another_process_commits_or_aborts_a_prepared_transaction(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 1)
    kept = prepare_elsewhere(broker, unique_name("tx"), topic, "kept")
    dropped = prepare_elsewhere(broker, unique_name("tx"), topic, "dropped")
    assert values(broker, topic) == []  # open: held back below the LSO
    end_prepared(broker.bootstrap_servers, [kept], commit=True, timeout=10)
    end_prepared(broker.bootstrap_servers, [dropped], commit=False, timeout=10)
    assert values(broker, topic) == [b"kept"]
    # A repeat (an answer lost, a driver restarted) is answered as done, and changes nothing.
    end_prepared(broker.bootstrap_servers, [kept], commit=True, timeout=10)
    assert values(broker, topic) == [b"kept"]


def test_a_prepared_transaction_whose_id_was_initialised_again_is_fenced(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 1)
    tid = unique_name("tx")
    zombie = prepare_elsewhere(broker, tid, topic, "zombie")
    anchor = TopicPartition(topic, 0)
    check_prepared(broker.bootstrap_servers, [zombie], anchor, timeout=10)  # still live
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=tid) as successor:
        successor.init_transactions(10)  # aborts the zombie's transaction
    with pytest.raises(FencedError):
        check_prepared(broker.bootstrap_servers, [zombie], anchor, timeout=10)
    with pytest.raises(FencedError):
        end_prepared(broker.bootstrap_servers, [zombie], commit=True, timeout=10)
    assert values(broker, topic) == []


def test_prepare_needs_an_open_transaction(broker: RunningBroker,
                                           unique_name: Callable[[str], str]) -> None:
    with TransactionalProducer(broker.bootstrap_servers,
                               transactional_id=unique_name("tx")) as producer:
        producer.init_transactions(10)
        with pytest.raises(IllegalStateError, match="needs an open transaction"):
            producer.prepare_transaction(5)
