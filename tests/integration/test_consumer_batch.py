"""``poll_batch()`` against real brokers (noida-db and Tansu): the records ``poll()`` delivers, as
columns, with the same positions, also when the two are mixed; and a transaction's offsets
committed from the columns' ``next_offset``.

The log, written by confluent-kafka: per partition, committed and aborted transactions
interleaved with an open one that ends last (its records must wait), keys and headers on some
records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from interop import txn_producer

from eosclient import ReadCommittedConsumer, RecordColumns, TopicPartition
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = pytest.mark.broker

PARTITIONS = 2
TIMEOUT = 20.0
Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


def write(broker: RunningBroker, topic: str, name: Callable[[str], str]) -> int:
    """The log (module docstring); returns how many records a read_committed reader gets."""
    topics.create_topic(broker, topic, PARTITIONS)
    committed = 0
    with txn_producer(broker, name("a")) as a, txn_producer(broker, name("open")) as late:
        late.begin_transaction()
        for round_ in range(4):
            a.begin_transaction()
            for i in range(5):
                key = b"k%d" % i if i % 2 else None
                headers = [("h", b"v%d" % i)] if i == 3 else None
                a.produce(topic, b"r%d.%d" % (round_, i), key, partition=i % PARTITIONS,
                          headers=headers)
            if round_ == 1:
                late.produce(topic, b"late", partition=0)
                assert late.flush(10) == 0
            commit = round_ != 2
            (a.commit_transaction if commit else a.abort_transaction)(15)
            committed += 5 if commit else 0
        late.commit_transaction(15)
    return committed + 1


@contextmanager
def consumer(broker: RunningBroker, topic: str) -> Iterator[ReadCommittedConsumer]:
    c = ReadCommittedConsumer(broker.bootstrap_servers, config={
        "auto.offset.reset": "earliest", "fetch.max.wait.ms": 100})
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    try:
        yield c
    finally:
        c.close()


def rows_of(columns: RecordColumns) -> list[Row]:
    return list(zip([columns.partition] * len(columns), columns.offsets, columns.keys,
                    columns.values, columns.headers, columns.timestamps, strict=True))


def read(c: ReadCommittedConsumer, count: int, pattern: str, topic: str,
         ) -> tuple[list[Row], list[dict[int, int]]]:
    """Poll until ``count`` records came, ``pattern`` naming the call of each poll in turn
    (``r`` poll(), ``c`` poll_batch()), 3 records at most each; what came, and the positions
    after every poll that delivered something."""
    got: list[Row] = []
    positions: list[dict[int, int]] = []
    deadline, turn = time.monotonic() + TIMEOUT, 0
    while len(got) < count and time.monotonic() < deadline:
        if pattern[turn % len(pattern)] == "r":
            new = [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp_ms)
                   for r in c.poll(0.2, max_records=3)]
        else:
            batch = c.poll_batch(0.2, max_records=3)
            assert all(len(cols) and (tp.topic, tp.partition) == (cols.topic, cols.partition)
                       for tp, cols in batch.items())
            new = [row for cols in batch.values() for row in rows_of(cols)]
        assert len(new) <= 3
        if new:
            turn += 1
            got += new
            positions.append({p: c.position(TopicPartition(topic, p)) for p in range(PARTITIONS)})
    assert not c.poll_batch(0.3) and not c.poll(0.1)  # nothing more comes
    return sorted(got), positions


def test_poll_batch_delivers_what_poll_does_with_the_same_positions(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    expected = write(broker, topic_name, unique_name)
    runs = {}
    for pattern in ("r", "c", "rcc"):
        with consumer(broker, topic_name) as c:
            runs[pattern] = read(c, expected, pattern, topic_name)
    records, positions = runs["r"]
    assert len(records) == expected
    assert {v for _, _, _, v, _, _ in records} == {
        b"r%d.%d" % (r, i) for r in (0, 1, 3) for i in range(5)} | {b"late"}
    assert any(h for *_, h, _ in records) and any(k for _, _, k, *_ in records)
    assert runs["c"] == runs["rcc"] == runs["r"]  # records, and positions after every poll
    for p in range(PARTITIONS):  # the position never passes an undelivered record
        delivered = [o for part, o, *_ in records if part == p]
        assert positions[-1][p] > max(delivered)


def offsets_of(c: ReadCommittedConsumer, tp: TopicPartition, count: int) -> list[int]:
    got: list[int] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < count and time.monotonic() < deadline:
        got += [o for cols in c.poll_batch(0.2).values() for o in cols.offsets]
    return got


def test_a_group_resumes_at_the_next_offset_committed_after_a_poll_batch(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    write(broker, topic_name, unique_name)
    tp = TopicPartition(topic_name, 0)
    with consumer(broker, topic_name) as everything:
        everything.assign([tp])
        offsets = offsets_of(everything, tp, 10)  # 3 committed rounds of 3, and "late"
    assert len(offsets) == 10
    group = unique_name("group")
    settings = {"auto.offset.reset": "earliest", "fetch.max.wait.ms": 100}
    with ReadCommittedConsumer(broker.bootstrap_servers, group_id=group, config=settings) as c:
        c.assign([tp])
        batch: dict[TopicPartition, RecordColumns] = {}
        deadline = time.monotonic() + TIMEOUT
        while tp not in batch and time.monotonic() < deadline:
            batch = c.poll_batch(0.2, max_records=4)
        assert batch[tp].offsets == offsets[:4]
        assert c.position(tp) == batch[tp].next_offset
        c.commit({tp: batch[tp].next_offset})
    with ReadCommittedConsumer(broker.bootstrap_servers, group_id=group, config=settings) as c:
        c.assign([tp])
        assert offsets_of(c, tp, 6) == offsets[4:]
