"""AsyncTransactionalProducer against real brokers: noida-db and Tansu, on asyncio and uvloop.

The scenarios of test_producer.py that the async front changes (every wait is an await); what
was written is read back with eosclient's sync reader (its read_committed filter, right on both
brokers) and checked against the raw log's COMMIT/ABORT markers, never with the async client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from eosclient import (
    ConfigError,
    ConsumerGroupMetadata,
    EosError,
    FencedError,
    IllegalStateError,
    InvalidGroupIdError,
    PreparedTransaction,
    RecordMetadata,
    RecordTypeError,
    TopicPartition,
    TransactionalProducer,
    UnknownPartitionError,
    end_prepared,
)
from eosclient.aio import AsyncTransactionalProducer
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.reader import read_partition, read_raw_batches

pytestmark = pytest.mark.broker

TIMEOUT = 15.0
Run = Callable[[Coroutine[Any, Any, Any]], Any]


def committed_values(broker: RunningBroker, topic: str, partitions: int) -> list[bytes]:
    """What a read_committed reader gets, all partitions, sorted."""
    return sorted(r.value or b"" for p in range(partitions)
                  for r in read_partition(broker.bootstrap_servers, topic, p, timeout=TIMEOUT))


def markers(broker: RunningBroker, topic: str, partition: int) -> list[str]:
    """The partition's control markers in log order ("commit"/"abort")."""
    found = []
    for batch in read_raw_batches(broker.bootstrap_servers, topic, partition, timeout=TIMEOUT):
        if batch.control_type is not None:
            found.append(batch.control_type.name.lower())
    return found


def producer(broker: RunningBroker, txn_id: str | None, **config: Any,
             ) -> AsyncTransactionalProducer:
    return AsyncTransactionalProducer(broker.bootstrap_servers, transactional_id=txn_id,
                                      config=config)


def test_commit_abort_commit_reads_back_exactly_the_committed_records(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 2)
    written: dict[str, list[bytes]] = {}

    async def main() -> list[RecordMetadata]:
        async with producer(broker, unique_name("txn")) as p:
            await p.init_transactions(TIMEOUT)
            delivered = []
            for name, commit in (("first", True), ("second", False), ("third", True)):
                written[name] = [b"%s-%d" % (name.encode(), i) for i in range(50)]
                p.begin_transaction()
                deliveries = [await p.send(topic, v, key=v) for v in written[name]]
                await p.flush(TIMEOUT)
                delivered += [await d for d in deliveries]
                await (p.commit_transaction if commit else p.abort_transaction)(TIMEOUT)
            return delivered

    delivered = run_async(main())
    assert len(delivered) == 150 and all(m.offset >= 0 for m in delivered)
    assert committed_values(broker, topic, 2) == sorted(written["first"] + written["third"])
    assert [markers(broker, topic, p) for p in range(2)] == [["commit", "abort", "commit"]] * 2


def test_full_batches_go_out_while_a_send_loop_never_yields(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    # `await send()` does not suspend when there is room: a loop of them never lets the event
    # loop run, so a full batch goes out from send() itself, not only at the commit.
    topic = topics.create_topic(broker, unique_name("t"), 1)

    async def main() -> int:
        async with producer(broker, unique_name("txn"), **{"batch.size": 2_000,
                                                           "linger.ms": 60_000}) as p:
            await p.init_transactions(TIMEOUT)
            p.begin_transaction()
            sent, start = 0, time.monotonic()
            while time.monotonic() - start < 0.2:  # ~18 records a batch: hundreds of batches
                await p.send(topic, b"v" * 100, partition=0)
                sent += 1
            produced = p.stats().requests["Produce"].count
            await p.commit_transaction(TIMEOUT)
            assert len(committed_values(broker, topic, 1)) == sent
            return produced

    assert run_async(main()) > 0


def test_a_commit_sends_what_lingers_at_once(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    # commit_transaction() flushes: the batches it waits for go out at once, whatever
    # linger.ms says. On the event loop a commit begun within a millisecond of the last turn
    # (here the one that answered flush()) waited for the timer that turn had set: linger.ms,
    # 5 ms a transaction by default (the asyncio processor ran at half its speed), or the
    # sender's 1 s liveness bound.
    topic = topics.create_topic(broker, unique_name("t"), 1)

    async def main() -> list[float]:
        took = []
        async with producer(broker, unique_name("txn"), **{"linger.ms": 60_000}) as p:
            await p.init_transactions(TIMEOUT)
            for i in range(5):
                p.begin_transaction()
                await p.send(topic, b"%d" % i, partition=0)
                await p.flush(TIMEOUT)
                await p.send(topic, b"%d again" % i, partition=0)
                started = time.monotonic()
                await p.commit_transaction(TIMEOUT)
                took.append(time.monotonic() - started)
        return took

    took = run_async(main())
    assert max(took) < 0.5, took  # a few round trips on loopback, not a timer's wait
    assert len(committed_values(broker, topic, 1)) == 10


def test_a_records_delivery_settles_with_its_batch(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    # send()'s Delivery (made by the sync producer's send(), one object a record): unsettled
    # until its batch is answered, result() refuses until then, an await waits for it; a
    # record its transaction's abort drops is settled with the error.
    topic = topics.create_topic(broker, unique_name("t"), 1)

    async def main() -> None:
        async with producer(broker, unique_name("txn"), **{"linger.ms": 300}) as p:
            await p.init_transactions(TIMEOUT)
            p.begin_transaction()
            first, second = await p.send(topic, b"a"), await p.send(topic, b"b")
            assert not first.done()
            with pytest.raises(IllegalStateError, match="not settled"):
                first.result()
            written = await second  # the linger, then the answer
            assert first.done() and first.result().offset + 1 == written.offset
            await p.commit_transaction(TIMEOUT)
            p.begin_transaction()
            dropped = await p.send(topic, b"c")
            await p.abort_transaction(TIMEOUT)
            assert dropped.done()
            with pytest.raises(EosError):
                await dropped

    run_async(main())
    assert committed_values(broker, topic, 1) == [b"a", b"b"]


def test_transaction_block_commits_on_success_and_aborts_on_exception(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 1)

    async def main() -> None:
        async with producer(broker, unique_name("txn")) as p:
            await p.init_transactions(TIMEOUT)
            async with p.transaction([TopicPartition(topic, 0)], timeout=TIMEOUT):
                await p.send(topic, b"kept", partition=0)
            with pytest.raises(RuntimeError, match="boom"):
                async with p.transaction(timeout=TIMEOUT):
                    await p.send(topic, b"dropped", partition=0)
                    await p.flush(TIMEOUT)  # on the log: the abort must leave a marker
                    raise RuntimeError("boom")
            async with p.transaction(timeout=TIMEOUT):
                meta = await p.send_and_wait(topic, b"also kept", partition=0)
                assert meta.offset >= 0

    run_async(main())
    assert committed_values(broker, topic, 1) == [b"also kept", b"kept"]
    assert markers(broker, topic, 0) == ["commit", "abort", "commit"]


def test_a_send_while_the_commit_is_awaited_is_refused(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    # send()'s shortcut skips asking the transaction core; the async commit changes the core
    # without a turn of the I/O loop, so a shortcut kept then let another task's record into
    # the transaction being committed.
    topic = topics.create_topic(broker, unique_name("t"), 1)

    async def main() -> None:
        async with producer(broker, unique_name("txn")) as p:
            await p.init_transactions(TIMEOUT)
            p.begin_transaction()
            for i in range(50):
                await p.send(topic, b"in-%d" % i)
            commit = asyncio.ensure_future(p.commit_transaction(TIMEOUT))
            await asyncio.sleep(0)  # the commit has begun
            with pytest.raises(IllegalStateError):
                await p.send(topic, b"during the commit")
            await commit

    run_async(main())
    assert committed_values(broker, topic, 1) == sorted(b"in-%d" % i for i in range(50))


def test_offsets_move_with_the_transaction_that_commits_them(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    topic, group = topics.create_topic(broker, unique_name("t"), 1), unique_name("group")
    source = TopicPartition(topics.create_topic(broker, unique_name("in"), 1), 0)
    seen: list[int | None] = []

    async def main() -> None:
        async with producer(broker, unique_name("txn")) as p:
            await p.init_transactions(TIMEOUT)
            for offset, commit in ((10, True), (20, False), (30, True)):
                p.begin_transaction(group_id=group)
                await p.send(topic, b"%d" % offset, partition=0)
                p.send_offsets_to_transaction({source: offset}, ConsumerGroupMetadata(group))
                await (p.commit_transaction if commit else p.abort_transaction)(TIMEOUT)
                seen.append(await asyncio.to_thread(committed, broker, group, source))

    run_async(main())
    assert seen == [10, 10, 30]
    assert committed_values(broker, topic, 1) == [b"10", b"30"]


def committed(broker: RunningBroker, group: str, tp: TopicPartition) -> int | None:
    from eosclient import ReadCommittedConsumer  # noqa: PLC0415

    with ReadCommittedConsumer(broker.bootstrap_servers, group_id=group) as consumer:
        return consumer.committed([tp], TIMEOUT)[tp]


def test_second_instance_fences_the_first_which_never_commits(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    topic, txn_id = topics.create_topic(broker, unique_name("t"), 1), unique_name("txn")

    async def main() -> None:
        async with producer(broker, txn_id) as zombie:
            await zombie.init_transactions(TIMEOUT)
            zombie.begin_transaction()
            await zombie.send(topic, b"zombie", partition=0)
            await zombie.flush(TIMEOUT)
            # The sync producer fences the async one: the two fronts share one transactional.id.
            successor = TransactionalProducer(broker.bootstrap_servers, transactional_id=txn_id)
            try:
                await asyncio.to_thread(successor.init_transactions, TIMEOUT)
                with pytest.raises(FencedError):
                    await zombie.commit_transaction(TIMEOUT)
                with pytest.raises(FencedError):
                    zombie.begin_transaction()
                with successor.transaction():
                    successor.send(topic, b"successor", partition=0)
            finally:
                await asyncio.to_thread(successor.close, 5)

    run_async(main())
    assert committed_values(broker, topic, 1) == [b"successor"]


def test_usage_errors_are_the_sync_producers_and_queue_nothing(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 2)

    async def main() -> None:
        with pytest.raises(ConfigError):
            AsyncTransactionalProducer(broker.bootstrap_servers, config={"linger.mss": 1})
        p = producer(broker, unique_name("txn"))
        with pytest.raises(IllegalStateError, match="not started"):
            p.begin_transaction()
        async with p:
            assert await p.partitions_for(topic) == [TopicPartition(topic, 0),
                                                     TopicPartition(topic, 1)]
            with pytest.raises(IllegalStateError):
                await p.send(topic, b"x")  # not initialised
            await p.init_transactions(TIMEOUT)
            with pytest.raises(IllegalStateError, match="loop's thread"):
                await asyncio.to_thread(p.begin_transaction)  # another thread: refused
            p.begin_transaction(partitions=[TopicPartition(topic, 0)])
            with pytest.raises(UnknownPartitionError):
                await p.send(topic, b"undeclared", partition=1)
            with pytest.raises(UnknownPartitionError):
                await p.send(topic, b"no such partition", partition=7)
            with pytest.raises(RecordTypeError):
                await p.send(["not a topic"], b"x")  # type: ignore[arg-type]
            with pytest.raises(RecordTypeError):
                await p.send(topic, 123, partition=0)
            await p.send(topic, b"declared", partition=0)
            with pytest.raises(IllegalStateError, match="loop's thread"):  # the hot path too
                await asyncio.to_thread(asyncio.run, p.send(topic, b"x", partition=0))
            await p.commit_transaction(TIMEOUT)
        with pytest.raises(IllegalStateError, match="closed"):
            p.begin_transaction()

    run_async(main())
    assert committed_values(broker, topic, 2) == [b"declared"]


def test_idempotent_producer_sends_without_transactions(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 1)

    async def main() -> list[int]:
        async with producer(broker, None, **{"linger.ms": 5}) as p:
            batch = await p.send_batch(topic, [b"a", b"b", b"c"], partition=0)
            one = await p.send_and_wait(topic, b"d", partition=0)
            with pytest.raises(IllegalStateError):
                p.begin_transaction()
            return [m.offset for m in await batch] + [one.offset]

    assert run_async(main()) == [0, 3]
    assert committed_values(broker, topic, 1) == [b"a", b"b", b"c", b"d"]


def test_an_error_in_the_block_aborts_and_the_next_transaction_commits(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 1)

    async def main() -> None:
        async with producer(broker, unique_name("txn")) as p:
            await p.init_transactions(TIMEOUT)
            with pytest.raises(InvalidGroupIdError):
                async with p.transaction(group_id="g1", timeout=TIMEOUT):
                    await p.send(topic, b"lost", partition=0)
                    p.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, "g2")
            async with p.transaction(timeout=TIMEOUT):
                await p.send(topic, b"kept", partition=0)

    run_async(main())
    assert committed_values(broker, topic, 1) == [b"kept"]


def test_a_prepared_transaction_is_handed_over_and_ended_by_its_identity(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 1)

    async def main() -> PreparedTransaction:
        producer = AsyncTransactionalProducer(broker.bootstrap_servers,
                                              transactional_id=unique_name("tx"))
        await producer.start()
        await producer.init_transactions(TIMEOUT)
        with pytest.raises(IllegalStateError, match="needs an open transaction"):
            await producer.prepare_transaction(TIMEOUT)
        producer.begin_transaction([TopicPartition(topic, 0)])
        await producer.send(topic, b"prepared", partition=0)
        prepared = await producer.prepare_transaction(TIMEOUT)
        with pytest.raises(IllegalStateError):
            producer.begin_transaction()  # closed: the identity was given away
        await producer.close()  # (nothing to abort: a no-op)
        return prepared

    prepared = run_async(main())
    assert committed_values(broker, topic, 1) == []  # still open, below the LSO
    end_prepared(broker.bootstrap_servers, [prepared], commit=True, timeout=TIMEOUT)
    assert committed_values(broker, topic, 1) == [b"prepared"]
