"""AsyncExactlyOnceProcessor's own cases, on asyncio and uvloop: coroutine transforms, and
cancellation. (Every scenario of the sync processor also runs on the asyncio one: see
test_processor.py's ``front`` fixture.) The checker judges: every count must be zero.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from eosclient import ConsumerRecord, OutputRecord, TransactionalProducer
from eosclient.aio import AsyncExactlyOnceProcessor
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import check

pytestmark = pytest.mark.broker

PARTITIONS = 3
Names = Callable[[str], str]
Run = Callable[[Coroutine[Any, Any, Any]], Any]


def fill(broker: RunningBroker, unique_name: Names, count: int) -> tuple[str, str]:
    """A new input topic holding ``count`` committed records, and a new empty output topic."""
    source = topics.create_topic(broker, unique_name("in"), PARTITIONS)
    sink = topics.create_topic(broker, unique_name("out"), PARTITIONS)
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=unique_name("fill"),
                               linger_ms=5) as producer:
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.send_batch(source, [str(i).encode() for i in range(count)])
        producer.commit_transaction(15)
    return source, sink


def make(broker: RunningBroker, source: str, sink: str, group: str, txn: str,
         **extra: Any) -> AsyncExactlyOnceProcessor:
    options: dict[str, Any] = {"max_records_per_transaction": 20, "commit_interval_ms": 50,
                               "consumer_config": {"fetch.max.wait.ms": 100}, **extra}
    return AsyncExactlyOnceProcessor(bootstrap_servers=broker.bootstrap_servers,
                                     input_topics=[source], output_topic=sink, group_id=group,
                                     transactional_id=txn, **options)


def test_coroutine_transforms_copy_exactly_once(noida_broker: RunningBroker,
                                                unique_name: Names, run_async: Run) -> None:
    source, sink = fill(noida_broker, unique_name, 120)

    async def upper(record: ConsumerRecord) -> list[tuple[object, object]]:
        await asyncio.sleep(0)  # a lookup in another service, say
        return [(record.key, (record.value or b"") + b"!")]

    async def pairs(records: list[ConsumerRecord]) -> list[OutputRecord]:
        await asyncio.sleep(0)
        return [OutputRecord(r.value, source=r) for r in records]

    async def main() -> tuple[Any, Any]:
        first = make(noida_broker, source, sink, unique_name("g"), unique_name("t"), fn=upper)
        second = make(noida_broker, source, unique_name("unused"), unique_name("g2"),
                      unique_name("t2"), batch_fn=pairs)
        return (await first.run(max_records=120, timeout=30),
                await second.run(max_records=120, timeout=30))

    topics.create_topic(noida_broker, unique_name("unused"), PARTITIONS)
    by_fn, by_batch_fn = run_async(main())
    assert (by_fn.records_in, by_fn.records_out) == (120, 120)
    assert (by_batch_fn.records_in, by_batch_fn.records_out) == (120, 120)
    report = check(noida_broker.bootstrap_servers, source, sink)
    assert report.ok, str(report)


@pytest.mark.parametrize("pause", [0.0, 0.3, 0.7])
def test_a_cancelled_run_aborts_and_the_next_run_resumes_exactly_once(
        noida_broker: RunningBroker, unique_name: Names, run_async: Run, pause: float) -> None:
    # Runs are cancelled at whatever await they are at (joining, polling, transforming,
    # committing), each after its first transaction began; the run after them finishes the
    # input. Nothing may be lost or written twice, and the group must hand the partitions on.
    source, sink = fill(noida_broker, unique_name, 300)
    group, txn = unique_name("g"), unique_name("t")

    async def main() -> list[Any]:
        cancelled = []
        for _ in range(3):
            started = asyncio.Event()

            async def slow(record: ConsumerRecord, started: asyncio.Event = started,
                           ) -> list[tuple[object, object]]:
                started.set()
                await asyncio.sleep(0.01)
                return [(record.key, record.value)]

            copier = make(noida_broker, source, sink, group, txn, fn=slow)
            task = asyncio.create_task(copier.run(timeout=60))
            await asyncio.wait_for(started.wait(), 30)
            await asyncio.sleep(pause)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 60)  # aborting and closing come first
            cancelled.append(copier.stats)
        last = make(noida_broker, source, sink, group, txn)
        return [*cancelled, await last.run(idle_timeout=3, timeout=60)]

    *cancelled, last = run_async(main())
    assert all(stats.transactions_aborted <= 1 for stats in cancelled)
    assert sum(stats.records_in for stats in [*cancelled, last]) == 300
    report = check(noida_broker.bootstrap_servers, source, sink)
    assert report.ok, str(report)
