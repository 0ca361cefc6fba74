"""The asyncio exactly-once processor: the sync processor's decisions, awaited.

:class:`AsyncExactlyOnceProcessor` runs :class:`~eosclient._processor.core.ProcessorCore`, the
steps :class:`~eosclient.ExactlyOnceProcessor` runs too (consume, transform, produce, offsets in
the transaction, rebalance handling, the fence probe, the hand-over; the rules and why:
:mod:`eosclient.processor`), over :class:`~eosclient.aio.AsyncReadCommittedConsumer` and
:class:`~eosclient.aio.AsyncTransactionalProducer`: :func:`adrive` carries each step out on
those clients and awaits what it returns. Only the I/O is this module's; no decision is.

Cancellation: a cancelled ``run()`` is a failure like any other: the open transaction is
aborted (nothing of it commits; its input records are processed again by the next run, from
the committed offsets), the consumer leaves the group and both clients close, awaited and
bounded by their timeouts, before the :class:`asyncio.CancelledError` reaches the caller. A
transaction whose commit was in flight is the exception: its EndTxn may have landed, and a
commit once asked for can only be finished, so it is finished (and counted) first.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from eosclient._net.steps import adrive as adrive_steps
from eosclient._processor.core import CopyRun, Item, Output, ProcessorCore, ProcessorSettings
from eosclient._processor.stats import ProcessorStats
from eosclient._processor.steps import Ports, Steps, bound
from eosclient.aio.consumer import AsyncReadCommittedConsumer
from eosclient.aio.producer import AsyncTransactionalProducer, send_many, send_run
from eosclient.config import ConsumerConfig, ProducerConfig
from eosclient.consumer import ConsumerRecord

__all__ = ["AsyncBatchTransform", "AsyncExactlyOnceProcessor", "AsyncTransform", "adrive"]

_T = TypeVar("_T")
_STOP_LOOK = 0.05  # seconds between looks at stop() during a backoff

AsyncTransform = Callable[[ConsumerRecord[Any, Any]],
                          Iterable[Output] | Awaitable[Iterable[Output]]]
"""``fn(record)``: a function or a coroutine function returning the outputs. The record
carries what ``consumer_config``'s deserializers make (bytes without one): the type checker
cannot see them, so ``fn`` may take a ``ConsumerRecord[str, Any]`` as well as a bare one."""
AsyncBatchTransform = Callable[[list[ConsumerRecord[Any, Any]]],
                               Iterable[Output] | Awaitable[Iterable[Output]]]
"""``batch_fn(records)``: a function or a coroutine function returning the outputs."""


async def adrive(steps: Steps[_T], ports: Ports) -> _T:
    """Carry ``steps`` out on async ports (:func:`eosclient._processor.steps.drive`, awaited):
    a result that is awaitable is awaited; an exception (a cancellation included) is thrown
    into the steps, which decide what follows (abort, close) and re-raise it."""
    return await adrive_steps(steps, bind=bound(ports))


class AsyncExactlyOnceProcessor:
    """The asyncio twin of :class:`~eosclient.ExactlyOnceProcessor`: the same arguments,
    settings, errors and semantics; ``run()`` is awaited, and ``fn``/``batch_fn`` may be
    coroutine functions (awaited one record, or one poll, at a time).

    Create it anywhere; ``await run(...)`` inside a running event loop creates the clients
    there. The arguments are :class:`~eosclient.ExactlyOnceProcessor`'s.

    Raises:
        ValueError: both ``fn`` and ``batch_fn``, no input topic, or a bad limit.
    """

    def __init__(self, *, bootstrap_servers: str, input_topics: Sequence[str],
                 output_topic: str, group_id: str, transactional_id: str,
                 fn: AsyncTransform | None = None, batch_fn: AsyncBatchTransform | None = None,
                 max_records_per_transaction: int = 500, commit_interval_ms: int = 100,
                 preregister_partitions: bool = False,
                 max_consecutive_aborts: int | None = 10,
                 config: Mapping[str, object] | None = None,
                 producer_config: Mapping[str, object] | None = None,
                 consumer_config: Mapping[str, object] | None = None) -> None:
        settings = ProcessorSettings.of(
            bootstrap_servers=bootstrap_servers, input_topics=input_topics,
            output_topic=output_topic, group_id=group_id, transactional_id=transactional_id,
            fn=fn, batch_fn=batch_fn, max_records_per_transaction=max_records_per_transaction,
            commit_interval_ms=commit_interval_ms, preregister_partitions=preregister_partitions,
            max_consecutive_aborts=max_consecutive_aborts, config=config,
            producer_config=producer_config, consumer_config=consumer_config)
        self.bootstrap_servers = settings.bootstrap_servers
        self.input_topics = settings.input_topics
        self.output_topic = settings.output_topic
        self.group_id = settings.group_id
        self.transactional_id = settings.transactional_id
        self._core = ProcessorCore(settings)

    @property
    def stats(self) -> ProcessorStats:
        """Progress so far (committed records, transactions, records/s); any thread."""
        return self._core.counter.snapshot()

    def stop(self) -> None:
        """Ask ``run()`` to commit what it has and return; safe from any thread or a signal
        handler (cancelling ``run()`` aborts instead)."""
        self._core.stop_event.set()

    async def run(self, max_records: int | None = None, timeout: float | None = None,
                  idle_timeout: float | None = None) -> ProcessorStats:
        """As :meth:`ExactlyOnceProcessor.run`: process until ``stop()``, ``max_records``
        input records, ``timeout`` seconds, or ``idle_timeout`` seconds without a record;
        commit, close the clients, return the stats.

        Raises:
            asyncio.CancelledError: the task was cancelled; the open transaction was aborted
                and the clients closed first.
            KafkaTimeoutError, FencedError, FatalError, AbortableError, Exception: as
                :meth:`ExactlyOnceProcessor.run`; clients closed.
        """
        return await adrive(self._core.run(max_records, timeout, idle_timeout),
                            _Ports(self._core))


class _Ports:
    """The asyncio front's ``front`` port (:mod:`eosclient._processor.core` lists the ports):
    the async clients on the running loop; rebalance callbacks are coroutines that drive the
    core's steps inside ``poll_batch``."""

    def __init__(self, core: ProcessorCore) -> None:
        self._core = core
        self.producer: AsyncTransactionalProducer | None = None
        self.consumer: AsyncReadCommittedConsumer | None = None

    def __getitem__(self, port: str) -> object:
        return self if port == "front" else getattr(self, port)

    async def open_producer(self) -> ProducerConfig:
        settings = self._core.settings
        self.producer = AsyncTransactionalProducer(settings.bootstrap_servers,
                                                   transactional_id=settings.transactional_id,
                                                   config=settings.producer_config)
        await self.producer.start()
        return self.producer.config

    async def open_consumer(self) -> ConsumerConfig:
        settings, core = self._core.settings, self._core
        consumer = AsyncReadCommittedConsumer(settings.bootstrap_servers,
                                              group_id=settings.group_id,
                                              config=settings.consumer_config)
        self.consumer = consumer
        await consumer.start()

        async def on_assign(tps: list[Any]) -> None:
            await adrive(core.on_assign(tps), self)

        async def on_revoke(tps: list[Any]) -> None:
            await adrive(core.on_revoke(tps), self)

        async def on_lost(tps: list[Any]) -> None:
            await adrive(core.on_lost(tps), self)

        consumer.subscribe(settings.input_topics, on_assign=on_assign, on_revoke=on_revoke,
                           on_lost=on_lost)
        return consumer.config

    async def transform_each(self, records: list[ConsumerRecord],
                             ) -> list[tuple[ConsumerRecord, Any]]:
        fn = self._core.settings.fn
        assert fn is not None
        done = []
        for record in records:
            outputs = fn(record)
            if inspect.isawaitable(outputs):
                outputs = await outputs
            done.append((record, outputs))
        return done

    async def transform_batch(self, records: list[ConsumerRecord]) -> Any:
        batch_fn = self._core.settings.batch_fn
        assert batch_fn is not None
        outputs = batch_fn(records)
        return (await outputs) if inspect.isawaitable(outputs) else outputs

    async def send_all(self, topic: str, items: list[Item]) -> None:
        # A cancellation between two records leaves the first queued: the steps abort the
        # transaction then, so none of them commits.
        await send_many(self._need(self.producer), topic, items)

    async def send_copies(self, topic: str, runs: list[CopyRun]) -> None:
        producer = self._need(self.producer)
        for values, keys, headers in runs:
            await send_run(producer, topic, values, keys, headers)

    async def probe(self, topic: str, headers: list[tuple[str, bytes]]) -> None:
        producer = self._need(self.producer)
        await producer.send(topic, None, partition=0, headers=headers)
        await producer.flush()

    async def backoff(self, seconds: float) -> bool:
        stop = self._core.stop_event
        until = time.monotonic() + seconds
        while not stop.is_set() and (left := until - time.monotonic()) > 0:
            await asyncio.sleep(min(left, _STOP_LOOK))
        return stop.is_set()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def close_clients(self, replaced: bool) -> None:
        consumer, producer = self.consumer, self.producer
        try:
            if consumer is not None:
                await consumer.close(leave_group=replaced)
        finally:
            self.consumer = self.producer = None
            if producer is not None:
                await producer.close()

    @staticmethod
    def _need(client: AsyncTransactionalProducer | None) -> AsyncTransactionalProducer:
        if client is None:
            raise RuntimeError("the processor is not running")
        return client
