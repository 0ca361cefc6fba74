"""Where the producer puts records, on noida-db and Tansu: send_batch's runs, keyless records
spread batch by batch (KIP-480), and KIP-609's declared partitions respected while spreading.

Read back with eosclient's test reader (read_committed, right on both brokers).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from eosclient import IllegalStateError, RecordMetadata, TopicPartition, TransactionalProducer
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.reader import read_partition

pytestmark = pytest.mark.broker

TIMEOUT = 15.0
PARTITIONS = 4


def create_topic(broker: RunningBroker, name: str, partitions: int = PARTITIONS) -> str:
    return topics.create_topic(broker, name, partitions)


def written(broker: RunningBroker, topic: str) -> dict[tuple[int, int], bytes | None]:
    """(partition, offset) -> value of every committed record."""
    return {(p, r.offset): r.value for p in range(PARTITIONS)
            for r in read_partition(broker.bootstrap_servers, topic, p)}


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


@pytest.fixture
def producer(broker: RunningBroker, unique_name: Callable[[str], str],
             request: pytest.FixtureRequest) -> Iterator[TransactionalProducer]:
    config: dict[str, Any] = getattr(request, "param", {})
    made = TransactionalProducer(broker.bootstrap_servers, transactional_id=unique_name("txn"),
                                 config=config)
    made.init_transactions(TIMEOUT)
    yield made
    made.close(5)


@pytest.mark.parametrize("producer", [{"batch.size": 4096}], indirect=True)
def test_send_batch_keyed_and_keyless(broker: RunningBroker, unique_name: Callable[[str], str],
                                      producer: TransactionalProducer) -> None:
    topic = create_topic(broker, unique_name("t"))
    keyless, keyed = values("keyless", 1500), values("keyed", 500)
    with producer.transaction():
        first = producer.send_batch(topic, keyless)
        second = producer.send_batch(topic, keyed, keys=keyed)
        third = producer.send_batch(topic, [], partition=0)
    runs: list[RecordMetadata] = first.result(TIMEOUT)
    assert sum(run.record_count for run in runs) == len(keyless)
    assert len({run.partition for run in runs}) == PARTITIONS  # keyless: batch by batch
    assert sum(run.record_count for run in second.result(TIMEOUT)) == len(keyed)
    assert third.result(TIMEOUT) == []
    assert sorted(v or b"" for v in written(broker, topic).values()) == sorted(keyless + keyed)


@pytest.mark.parametrize("producer", [{"batch.size": 4096}], indirect=True)
def test_send_batch_writes_each_records_headers(broker: RunningBroker,
                                                unique_name: Callable[[str], str],
                                                producer: TransactionalProducer) -> None:
    topic = create_topic(broker, unique_name("t"))
    keyless, keyed = values("keyless", 300), values("keyed", 300)
    with producer.transaction():
        producer.send_batch(topic, keyless, headers=[[("n", b"%d" % i)] for i in range(300)])
        producer.send_batch(topic, keyed, keys=keyed,
                            headers=[[("n", str(i)), ("k", None)] for i in range(300)])
    got = {r.value: r.headers for p in range(PARTITIONS)
           for r in read_partition(broker.bootstrap_servers, topic, p)}
    assert got == {**{v: (("n", b"%d" % i),) for i, v in enumerate(keyless)},
                   **{v: (("n", b"%d" % i), ("k", None)) for i, v in enumerate(keyed)}}


@pytest.mark.parametrize("producer", [{"batch.size": 1024}], indirect=True)
def test_keyless_sends_move_to_the_next_partition_when_a_batch_fills(
        broker: RunningBroker, unique_name: Callable[[str], str],
        producer: TransactionalProducer) -> None:
    # KIP-480 through send()'s cached sticky partition: a stale cache would keep every keyless
    # record on one partition; a cache never kept would still work, only slower.
    topic = create_topic(broker, unique_name("t"))
    with producer.transaction():
        futures = [producer.send(topic, b"v" * 100) for _ in range(120)]
    placed = [f.result(TIMEOUT) for f in futures]
    runs = [len(list(group)) for _, group in itertools.groupby(m.partition for m in placed)]
    assert len({m.partition for m in placed}) == PARTITIONS
    # 8 records of 109 bytes fill 1024 bytes; the 9th opens the partition's next batch there
    # (its partition was chosen before), and the one after goes to the next partition.
    assert max(runs) <= 9 and sum(runs) == 120


@pytest.mark.parametrize("producer", [{"batch.size": 2048}], indirect=True)
def test_keyless_send_batch_spreads_over_declared_partitions_only(
        broker: RunningBroker, unique_name: Callable[[str], str],
        producer: TransactionalProducer) -> None:
    # A bulk send_batch went to one partition, one batch per Produce request; spread, it must
    # still respect KIP-609 pre-registration (undeclared partitions fail locally), and its
    # runs must come in the order of the values (the handle listed them as answers came).
    topic = create_topic(broker, unique_name("t"))
    keyless = values("spread", 800)
    with producer.transaction(partitions=[TopicPartition(topic, 1), TopicPartition(topic, 3)]):
        runs: list[RecordMetadata] = producer.send_batch(topic, keyless).result(TIMEOUT)
    log = written(broker, topic)
    assert {run.partition for run in runs} == {p for p, _ in log} == {1, 3}
    assert [log[(run.partition, run.offset + i)] for run in runs
            for i in range(run.record_count)] == keyless


@pytest.mark.parametrize("producer", [{"batch.size": 1024}], indirect=True)
def test_keyless_send_stays_on_declared_partitions(
        broker: RunningBroker, unique_name: Callable[[str], str],
        producer: TransactionalProducer) -> None:
    # Keyless send() picked its sticky partition among all of the topic's, so with partitions
    # declared at begin it raised UnknownPartitionError whenever the pick was undeclared.
    topic = create_topic(broker, unique_name("t"))
    keyless = values("declared", 300)
    two = [TopicPartition(topic, 0), TopicPartition(topic, 3)]
    for declared in ([TopicPartition(topic, 2)], two):
        with producer.transaction(partitions=declared):
            for value in keyless:
                producer.send(topic, value)
    log = written(broker, topic)
    assert {p for p, _ in log} == {0, 2, 3}
    assert sorted(log.values()) == sorted(keyless * 2)


@pytest.mark.parametrize("producer", [{"batch.size": 1024}], indirect=True)
def test_records_of_one_partition_keep_their_order_however_they_are_sent(
        broker: RunningBroker, unique_name: Callable[[str], str],
        producer: TransactionalProducer) -> None:
    # send() adds a record to the batch its place's last record went to (a shortcut): a
    # shortcut kept past a batch that send_batch, a keyed or a keyless send closed would put
    # records behind later ones.
    topic = create_topic(broker, unique_name("t"))
    sent: list[bytes] = []
    with producer.transaction():
        for round_ in range(6):
            for i in range(7):
                value = b"p%d-%d-" % (round_, i) + b"x" * 40
                producer.send(topic, value, partition=1)
                sent.append(value)
            keyed = b"k%d" % round_
            producer.send(topic, keyed, key=keyed, partition=1, headers=[("h", b"v")])
            sent.append(keyed)
            batch = values(f"b{round_}", 11 + round_ * 13)
            producer.send_batch(topic, batch, partition=1)
            sent += batch
            producer.send(topic, None, partition=1)  # small: it would fit a closed batch
            sent.append(None)
            producer.send(topic, b"elsewhere" * 20)  # keyless: may close a batch of partition 1
    log = written(broker, topic)
    assert [log[key] for key in sorted(key for key in log if key[0] == 1)
            if log[key] != b"elsewhere" * 20] == sent


def test_send_after_commit_or_abort_never_joins_the_ended_transaction(
        broker: RunningBroker, unique_name: Callable[[str], str],
        producer: TransactionalProducer) -> None:
    # send()'s shortcut skips asking the transaction core: it must be forgotten when the
    # transaction ends, or a record would join a batch of a transaction already ended.
    topic = create_topic(broker, unique_name("t"))
    producer.begin_transaction()
    kept = [producer.send(topic, b"kept-%d" % i) for i in range(20)]
    producer.commit_transaction(TIMEOUT)
    with pytest.raises(IllegalStateError):
        producer.send(topic, b"after the commit")
    producer.begin_transaction()
    for i in range(20):
        producer.send(topic, b"aborted-%d" % i, partition=2)
    producer.abort_transaction(TIMEOUT)
    with pytest.raises(IllegalStateError):
        producer.send(topic, b"after the abort", partition=2)
    producer.begin_transaction()
    last = [producer.send(topic, b"last-%d" % i, partition=2) for i in range(20)]
    producer.commit_transaction(TIMEOUT)
    assert all(f.result(0).offset >= 0 for f in kept + last)
    assert sorted(written(broker, topic).values()) == sorted(
        [b"kept-%d" % i for i in range(20)] + [b"last-%d" % i for i in range(20)])


def test_a_thread_sending_while_another_commits_loses_nothing(
        broker: RunningBroker, unique_name: Callable[[str], str],
        producer: TransactionalProducer) -> None:
    # Every send() either raised (the commit had begun) or its record is in the committed
    # transaction; a stale shortcut let records into a batch the commit had already sent.
    topic = create_topic(broker, unique_name("t"))
    producer.begin_transaction()
    accepted: list[Any] = []
    refused: list[BaseException] = []
    started = threading.Event()

    def sender() -> None:
        try:
            while True:
                accepted.append(producer.send(topic, b"v-%d" % len(accepted)))
                started.set()
        except IllegalStateError as exc:
            refused.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=sender)
    thread.start()
    started.wait(TIMEOUT)
    time.sleep(0.05)
    producer.commit_transaction(TIMEOUT)
    thread.join(TIMEOUT)
    assert refused and not thread.is_alive()
    assert all(f.result(TIMEOUT).offset >= 0 for f in accepted)
    assert sorted(written(broker, topic).values()) == sorted(
        b"v-%d" % i for i in range(len(accepted)))
