"""The async clients under faults: cancellation at every await point of a commit, cut
connections, through the proxy in front of noida-db and Tansu.

The await points of ``commit_transaction()`` are the answers it waits for: the Produce of the
transaction's records, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn. Each is
held back by the proxy (the rule must have fired, or the test fails) while the commit's task is
cancelled; the same call made again must resume that commit, and the log and the group's offset
must show one committed transaction, whether the call is made again while the answer is still
held or after the work finished on its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from eosclient import (
    IllegalStateError,
    KafkaTimeoutError,
    ReadCommittedConsumer,
    TopicPartition,
    TransactionalProducer,
)
from eosclient.aio import AsyncReadCommittedConsumer, AsyncTransactionalProducer
from eosclient.errors import ApiKey
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.proxy import Cut, Delay, KafkaProxy, Rule
from eosclient.testing.reader import read_partition, read_raw_batches

pytestmark = [pytest.mark.broker, pytest.mark.proxy]

TIMEOUT = 15.0
HOLD = 1.0  # seconds the proxy holds the answer the commit waits for
Run = Callable[[Coroutine[Any, Any, Any]], Any]

AWAIT_POINTS = [ApiKey.PRODUCE, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
                ApiKey.TXN_OFFSET_COMMIT, ApiKey.END_TXN]


def outcome(broker: RunningBroker, topic: str) -> tuple[list[bytes], list[str]]:
    """Partition 0's committed values and its control markers, from the log."""
    values = [r.value or b"" for r in read_partition(broker.bootstrap_servers, topic, 0,
                                                     timeout=TIMEOUT)]
    marks = [b.control_type.name.lower() for b in read_raw_batches(
        broker.bootstrap_servers, topic, 0, timeout=TIMEOUT) if b.control_type is not None]
    return values, marks


def committed_offset(broker: RunningBroker, group: str, tp: TopicPartition) -> int | None:
    with ReadCommittedConsumer(broker.bootstrap_servers, group_id=group) as consumer:
        return consumer.committed([tp], TIMEOUT)[tp]


async def fired(rule: Rule, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not rule.fired:
        assert time.monotonic() < deadline, f"the proxy's rule never fired: {rule}"
        await asyncio.sleep(0.01)


async def cancel_while_held(task: asyncio.Task[Any], rule: Rule, settle: float) -> None:
    """Once ``rule`` holds an answer and ``settle`` seconds later ``task`` still waits on it,
    cancel the task, which must end cancelled."""
    await fired(rule)
    await asyncio.sleep(settle)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def seen(proxy: KafkaProxy, api: ApiKey) -> int:
    return sum(1 for s in proxy.seen if s.api_key == api)


@pytest.mark.parametrize("resume", ["while held", "after it finished"])
@pytest.mark.parametrize("point", AWAIT_POINTS, ids=lambda a: a.name)
def test_a_cancelled_commit_resumes_when_called_again(
        broker: RunningBroker, unique_name: Callable[[str], str], point: ApiKey,
        resume: str) -> None:
    topic, group = topics.create_topic(broker, unique_name("t"), 1), unique_name("group")
    source = TopicPartition(topics.create_topic(broker, unique_name("in"), 1), 0)

    async def main(proxy: KafkaProxy) -> None:
        async with AsyncTransactionalProducer(
                proxy.bootstrap_servers, transactional_id=unique_name("txn"),
                config={"linger.ms": 50}) as p:
            await p.init_transactions(TIMEOUT)
            await p.partitions_for(topic)  # the topic's metadata is in before the rule
            rule = proxy.add_rule(Rule(api_key=point, action=Delay(HOLD, "response")))
            p.begin_transaction(group_id=group)
            await p.send(topic, b"once", partition=0)
            p.send_offsets_to_transaction({source: 5}, group)
            commit = asyncio.create_task(p.commit_transaction(TIMEOUT))
            await cancel_while_held(commit, rule, 0.05)  # the commit waits on the held answer
            with pytest.raises(IllegalStateError):
                p.begin_transaction()  # still committing: nothing new starts on this epoch
            if resume == "after it finished":
                await asyncio.sleep(HOLD + 0.5)
            started = time.monotonic()
            await p.commit_transaction(TIMEOUT)
            if resume == "after it finished":
                assert time.monotonic() - started < HOLD / 2  # its success, kept for this call
            assert seen(proxy, ApiKey.END_TXN) == 1  # resumed, not a second EndTxn
            async with p.transaction(timeout=TIMEOUT):  # and the producer goes on
                await p.send(topic, b"next", partition=0)

    with KafkaProxy(broker.host, broker.port) as proxy:
        asyncio.run(main(proxy))
    assert outcome(broker, topic) == ([b"once", b"next"], ["commit", "commit"])
    assert committed_offset(broker, group, source) == 5


def test_a_cancelled_abort_resumes_when_called_again(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 1)

    async def main(proxy: KafkaProxy) -> None:
        async with AsyncTransactionalProducer(
                proxy.bootstrap_servers, transactional_id=unique_name("txn")) as p:
            await p.init_transactions(TIMEOUT)
            p.begin_transaction()
            await p.send_and_wait(topic, b"aborted", partition=0)
            rule = proxy.add_rule(Rule(api_key=ApiKey.END_TXN, action=Delay(HOLD, "response")))
            abort = asyncio.create_task(p.abort_transaction(TIMEOUT))
            await fired(rule)
            abort.cancel()
            with pytest.raises(asyncio.CancelledError):
                await abort
            with pytest.raises(IllegalStateError):
                await p.commit_transaction(TIMEOUT)  # an abort under way is not a commit
            await p.abort_transaction(TIMEOUT)
            async with p.transaction(timeout=TIMEOUT):
                await p.send(topic, b"kept", partition=0)

    with KafkaProxy(broker.host, broker.port) as proxy:
        asyncio.run(main(proxy))
    assert outcome(broker, topic) == ([b"kept"], ["abort", "commit"])


def test_a_cancelled_send_queues_nothing(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 1)

    async def main(proxy: KafkaProxy) -> None:
        async with AsyncTransactionalProducer(
                proxy.bootstrap_servers, transactional_id=unique_name("txn")) as p:
            await p.init_transactions(TIMEOUT)
            rule = proxy.add_rule(Rule(api_key=ApiKey.METADATA, action=Delay(HOLD, "response")))
            p.begin_transaction()
            for send in (p.send(topic, b"cancelled", partition=0),
                         p.send_batch(topic, [b"cancelled-1", b"cancelled-2"], partition=0)):
                task = asyncio.create_task(send)  # waits for the topic's metadata
                await fired(rule)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            await p.send(topic, b"sent", partition=0)
            await p.commit_transaction(TIMEOUT)

    with KafkaProxy(broker.host, broker.port) as proxy:
        asyncio.run(main(proxy))
    assert outcome(broker, topic) == ([b"sent"], ["commit"])


def test_a_send_awaits_buffer_memory_and_a_cancelled_wait_queues_nothing(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    """buffer.memory = one batch: a send() awaits the first batch's answer (it does not raise,
    as a blocking call on the loop's thread would, and does not block the loop); cancelled
    while it waits, its record is not queued; past max.block.ms it raises."""
    topic = topics.create_topic(broker, unique_name("t"), 1)

    async def main(proxy: KafkaProxy) -> None:
        async with AsyncTransactionalProducer(
                proxy.bootstrap_servers, transactional_id=unique_name("txn"),
                config={"batch.size": 1000, "buffer.memory": 1000, "linger.ms": 0,
                        "max.block.ms": 1000}) as p:
            await p.init_transactions(TIMEOUT)
            p.begin_transaction()
            rule = proxy.add_rule(Rule(api_key=ApiKey.PRODUCE, action=Delay(3.0, "response")))
            first = await p.send(topic, b"first", partition=0)
            task = asyncio.create_task(p.send(topic, b"cancelled", partition=0))
            await cancel_while_held(task, rule, 0.1)  # the loop runs on while the send waits
            with pytest.raises(KafkaTimeoutError, match=r"buffer\.memory"):
                await p.send(topic, b"refused", partition=0)  # the answer held 3 s
            await first
            proxy.add_rule(Rule(api_key=ApiKey.PRODUCE, action=Delay(0.3, "response")))
            await p.send(topic, b"second", partition=0)
            await (await p.send(topic, b"third", partition=0))  # awaited "second"'s answer
            await p.commit_transaction(TIMEOUT)

    with KafkaProxy(broker.host, broker.port) as proxy:
        asyncio.run(main(proxy))
    assert outcome(broker, topic) == ([b"first", b"second", b"third"], ["commit"])


@pytest.mark.parametrize("api", [ApiKey.PRODUCE, ApiKey.END_TXN], ids=lambda a: a.name)
def test_a_cut_after_the_broker_acted_commits_once(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run,
        api: ApiKey) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 1)
    sent = [b"r-%02d" % i for i in range(20)]

    async def main(proxy: KafkaProxy) -> None:
        async with AsyncTransactionalProducer(
                proxy.bootstrap_servers, transactional_id=unique_name("txn"),
                config={"request.timeout.ms": 2000}) as p:
            await p.init_transactions(TIMEOUT)
            rule = proxy.add_rule(Rule(api_key=api, action=Cut("after")))
            async with p.transaction(timeout=TIMEOUT):
                for value in sent:
                    await p.send(topic, value, partition=0)
            assert rule.fired == 1

    with KafkaProxy(broker.host, broker.port) as proxy:
        run_async(main(proxy))
    assert outcome(broker, topic) == (sent, ["commit"])



def test_the_async_consumer_reads_exactly_the_committed_set_through_cut_fetches(
        broker: RunningBroker, unique_name: Callable[[str], str], run_async: Run) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 1)
    tp = TopicPartition(topic, 0)
    committed: list[bytes] = []
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=unique_name("w")) as w:
        w.init_transactions(TIMEOUT)
        for n in range(6):
            values = [b"t%d-%d" % (n, i) for i in range(50)]
            w.begin_transaction()
            w.send_batch(topic, values, partition=0)
            w.flush(TIMEOUT)
            if n % 2 == 0:
                w.commit_transaction(TIMEOUT)
                committed += values
            else:
                w.abort_transaction(TIMEOUT)

    async def main(proxy: KafkaProxy) -> list[bytes | None]:
        cuts = [proxy.add_rule(Rule(api_key=ApiKey.FETCH, nth=n, action=Cut(when)))
                for n, when in ((1, "after"), (2, "before"))]
        async with AsyncReadCommittedConsumer(
                proxy.bootstrap_servers, auto_offset_reset="earliest",
                config={"max.partition.fetch.bytes": 2048}) as consumer:  # several Fetches
            consumer.assign([tp])
            got: list[bytes | None] = []
            async with asyncio.timeout(TIMEOUT):
                while len(got) < len(committed):
                    got += [r.value for r in await consumer.poll(1.0)]
            assert await consumer.poll(0.5) == []
        assert [c.fired for c in cuts] == [1, 1]
        return got

    with KafkaProxy(broker.host, broker.port) as proxy:
        assert run_async(main(proxy)) == committed
