"""AsyncReadCommittedConsumer against real brokers: noida-db and Tansu, on asyncio and uvloop.

Interop: confluent-kafka writes transactions that commit and abort, interleaved in the log by two
producers whose transactions overlap; the async consumer must read exactly the committed set, in
offset order, on both brokers (Tansu sends no aborted-transactions index: the markers decide).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import confluent_kafka as ck
import pytest

from eosclient import (
    ConsumerRecord,
    IllegalStateError,
    KafkaTimeoutError,
    TopicPartition,
    TransactionalProducer,
)
from eosclient.aio import AsyncReadCommittedConsumer, AsyncTransactionalProducer
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = pytest.mark.broker

TIMEOUT = 20.0
Run = Callable[[Coroutine[Any, Any, Any]], Any]


def write_interleaved(broker: RunningBroker, topic: str, txn_prefix: str) -> list[bytes]:
    """Two confluent-kafka producers, transactions overlapping in the log, commit and abort
    alternating; returns the committed values in log order."""
    producers = [ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0,
                              "transactional.id": f"{txn_prefix}-{n}"}) for n in range(2)]
    committed: list[bytes] = []
    for p in producers:
        p.init_transactions(15)
    for round_ in range(3):
        for p in producers:
            p.begin_transaction()
        written: list[list[bytes]] = [[], []]
        for i in range(6):  # a, b, a, b, ...: each batch flushed, so the log interleaves
            n = i % 2
            value = b"r%d-p%d-%d" % (round_, n, i)
            producers[n].produce(topic, value, partition=0)
            assert producers[n].flush(10) == 0
            written[n].append(value)
        commits = (round_ % 2 == 0, round_ % 2 == 1)  # one commits, the other aborts
        for n, p in enumerate(producers):
            (p.commit_transaction if commits[n] else p.abort_transaction)(15)
            if commits[n]:
                committed += written[n]
    return sorted(committed, key=_log_order)


def _log_order(value: bytes) -> tuple[int, int]:
    round_, _, i = value.decode().split("-")
    return int(round_[1:]), int(i)


def test_interop_reads_exactly_confluents_committed_records(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 1)
    expected = write_interleaved(broker, topic, unique_name("ck"))
    assert len(expected) == 9

    async def main() -> list[ConsumerRecord]:
        async with AsyncReadCommittedConsumer(broker.bootstrap_servers,
                                              auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            got: list[ConsumerRecord] = []
            async with asyncio.timeout(TIMEOUT):
                async for record in consumer:
                    got.append(record)
                    if len(got) == len(expected):
                        break
            assert await consumer.poll(0.5) == []  # nothing more: no aborted record follows
            assert await consumer.lag(TopicPartition(topic, 0), TIMEOUT) == 0
            return got

    got = run_async(main())
    assert [r.value for r in got] == expected
    assert [r.offset for r in got] == sorted(r.offset for r in got)


def test_async_producer_to_async_consumer_with_offsets_in_the_transaction(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    source = topics.create_topic(broker, unique_name("in"), 2)
    sink = topics.create_topic(broker, unique_name("out"), 1)
    group = unique_name("group")
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=unique_name("w")) as w:
        w.init_transactions(TIMEOUT)
        with w.transaction():
            for i in range(20):
                w.send(source, b"%d" % i, partition=i % 2)

    async def copy(txn_id: str, limit: int) -> int:
        """Copy up to ``limit`` records of ``source`` to ``sink`` in one transaction."""
        async with AsyncReadCommittedConsumer(
                broker.bootstrap_servers, group_id=group,
                auto_offset_reset="earliest") as consumer, AsyncTransactionalProducer(
                broker.bootstrap_servers, transactional_id=txn_id) as producer:
            tps = [TopicPartition(source, 0), TopicPartition(source, 1)]
            consumer.assign(tps)
            await producer.init_transactions(TIMEOUT)
            records = await consumer.poll(TIMEOUT, max_records=limit)
            positions = {tp: await consumer.position(tp, TIMEOUT) for tp in tps}
            async with producer.transaction(group_id=group, timeout=TIMEOUT):
                for record in records:
                    await producer.send(sink, record.value, partition=0)
                producer.send_offsets_to_transaction(positions, consumer.group_metadata())
            assert await consumer.committed(tps, TIMEOUT) == positions
            return len(records)

    txn_id = unique_name("copier")
    copied = 0
    while copied < 20:
        copied += run_async(copy(txn_id, 7))
    assert copied == 20

    async def read_all() -> list[bytes | None]:
        async with AsyncReadCommittedConsumer(broker.bootstrap_servers,
                                              auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(sink, 0)])
            got: list[bytes | None] = []
            while len(got) < 20:
                batch = await consumer.getmany(TIMEOUT)
                assert batch, "no records within the timeout"
                got += [r.value for rs in batch.values() for r in rs]
            return got

    assert sorted(run_async(read_all())) == sorted(b"%d" % i for i in range(20))


def test_commit_seek_and_ends_on_an_assigned_partition(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    topic, group = topics.create_topic(broker, unique_name("t"), 1), unique_name("group")
    tp = TopicPartition(topic, 0)
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=unique_name("w")) as w:
        w.init_transactions(TIMEOUT)
        with w.transaction():
            for i in range(10):
                w.send(topic, b"%d" % i, partition=0)

    async def main() -> None:
        async with AsyncReadCommittedConsumer(broker.bootstrap_servers, group_id=group,
                                              auto_offset_reset="earliest") as consumer:
            with pytest.raises(IllegalStateError):
                await consumer.position(tp)  # not assigned
            consumer.assign([tp])
            started = time.monotonic()
            assert await consumer.position(tp, TIMEOUT) == 0
            # the driver once left new connections to the 1-s liveness timer: 3 s for this
            assert time.monotonic() - started < 0.9
            assert await consumer.last_stable_offset(tp, TIMEOUT) == 11  # 10 records, 1 marker
            assert (await consumer.watermarks([tp], TIMEOUT))[tp][1:] == (11, 11)
            records = []
            async for record in consumer:  # the rest stays buffered: not past the position
                records.append(record)
                if len(records) == 4:
                    break
            assert await consumer.position(tp, TIMEOUT) == 4
            await consumer.commit(timeout=TIMEOUT)
            assert await consumer.committed([tp], TIMEOUT) == {tp: 4}
            consumer.seek(tp, 8)
            assert [r.value for r in await consumer.poll(TIMEOUT)] == [b"8", b"9"]
            consumer.seek_to_beginning()
            assert (await consumer.poll(TIMEOUT))[0].value == b"0"
        async with AsyncReadCommittedConsumer(broker.bootstrap_servers, group_id=group) as again:
            again.assign([tp])  # starts from the committed offset
            assert (await again.poll(TIMEOUT))[0].value == b"4"
            with pytest.raises(KafkaTimeoutError):
                await again.committed([tp], timeout=0)
            again.seek(tp, 6)
            # records(): one record a poll, ends after idle_timeout without one
            rest = [r.value async for r in again.records(idle_timeout=0.5, poll_timeout=0.2)]
            assert rest == [b"6", b"7", b"8", b"9"]
            assert await again.position(tp, TIMEOUT) == 11  # past the commit marker

    run_async(main())


def test_subscribe_runs_coroutine_callbacks_and_commits_in_the_group(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    topic, group = topics.create_topic(broker, unique_name("t"), 2), unique_name("group")
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=unique_name("w")) as w:
        w.init_transactions(TIMEOUT)
        with w.transaction():
            for i in range(10):
                w.send(topic, b"%d" % i, partition=i % 2)
    calls: list[tuple[str, list[TopicPartition]]] = []

    async def on_assign(partitions: list[TopicPartition]) -> None:
        await asyncio.sleep(0.01)  # a coroutine callback is awaited inside poll()
        calls.append(("assign", sorted(partitions)))

    def on_revoke(partitions: list[TopicPartition]) -> None:  # plain functions work too
        calls.append(("revoke", sorted(partitions)))

    async def main() -> None:
        consumer = AsyncReadCommittedConsumer(
            broker.bootstrap_servers, group_id=group, auto_offset_reset="earliest",
            # Tansu holds a JoinGroup for about half the session timeout (~23 s at 45 s)
            config={"heartbeat.interval.ms": 200, "session.timeout.ms": 6000})
        await consumer.start()
        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        with pytest.raises(IllegalStateError):
            consumer.assign([TopicPartition(topic, 0)])  # not once subscribed
        got: list[bytes | None] = []
        async with asyncio.timeout(60):
            while len(got) < 10:
                got += [r.value for r in await consumer.poll(1.0)]
        metadata = consumer.group_metadata()
        assert metadata.generation_id >= 0 and metadata.member_id  # Tansu counts from 0
        assert consumer.in_generation()
        await consumer.commit(timeout=TIMEOUT)
        parts = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        assert await consumer.committed(parts, TIMEOUT) == dict.fromkeys(parts, 6)
        await consumer.close()
        assert sorted(got) == sorted(b"%d" % i for i in range(10))

    asyncio.run(main())
    assert calls == [("assign", [TopicPartition(topic, 0), TopicPartition(topic, 1)]),
                     ("revoke", [TopicPartition(topic, 0), TopicPartition(topic, 1)])]


@pytest.mark.noida  # the group join takes ~0.4 s there (~23 s on Tansu at the default session)
def test_a_task_cancelled_in_on_assign_leaves_the_group_consistent(
        noida_broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    broker = noida_broker
    topic, group = topics.create_topic(broker, unique_name("t"), 1), unique_name("group")
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=unique_name("w")) as w:
        w.init_transactions(TIMEOUT)
        with w.transaction():
            w.send(topic, b"only", partition=0)

    async def main() -> None:
        entered = asyncio.Event()

        async def on_assign(partitions: list[TopicPartition]) -> None:
            entered.set()
            await asyncio.sleep(3600)  # cancelled here

        async with AsyncReadCommittedConsumer(broker.bootstrap_servers, group_id=group,
                                              auto_offset_reset="earliest") as consumer:
            consumer.subscribe([topic], on_assign=on_assign)
            task = asyncio.create_task(consumer.poll(TIMEOUT))
            await asyncio.wait_for(entered.wait(), TIMEOUT)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert consumer.assignment() == [TopicPartition(topic, 0)]  # the step finished
            got = await consumer.poll(TIMEOUT)
            assert [r.value for r in got] == [b"only"]
            assert consumer.in_generation()
            await consumer.commit(timeout=TIMEOUT)

    asyncio.run(main())


def test_group_calls_without_a_group_id_fail_as_in_the_sync_consumer(
        broker: RunningBroker, run_async: Run) -> None:
    async def main() -> None:
        consumer = AsyncReadCommittedConsumer(broker.bootstrap_servers)
        with pytest.raises(IllegalStateError, match="not started"):
            consumer.assign([TopicPartition("t", 0)])
        async with consumer:
            with pytest.raises(IllegalStateError, match="group_id"):
                await consumer.commit({TopicPartition("t", 0): 1})
            with pytest.raises(IllegalStateError, match="group_id"):
                consumer.subscribe(["t"])
        with pytest.raises(IllegalStateError, match="closed"):
            await consumer.poll(0)

    run_async(main())
