"""The asyncio transactional producer: the producer session, driven by the event loop.

Shape: an :class:`AsyncTransactionalProducer` holds a
:class:`~eosclient._producer.session.ProducerSession` (the very one the sync
:class:`~eosclient.TransactionalProducer` holds) whose I/O thread is never started; a
:class:`~eosclient._net.loop_driver.LoopDriver` runs its turns (the transaction core, the
accumulator, Produce requests) from the event loop instead. Calls that never wait
(``begin_transaction``, ``send_offsets_to_transaction``, the enqueue of ``send``) are the
session's, unchanged; calls that wait (``init_transactions``, ``commit_transaction``,
``abort_transaction``, ``flush``, ``prepare_transaction``, ``close``, ``partitions_for``, and
``send`` while a topic's metadata or ``buffer.memory`` is awaited) are the session's steps, the
same the sync front drives, carried out with :func:`~eosclient._net.steps.adrive`: each wait an
``await`` between turns instead of a wait on a condition variable. So the settings, errors and
state rules are the sync producer's, not a copy of them.

Every method must be called from the event loop the producer was created in; the producer is
created inside a running loop (``async with AsyncTransactionalProducer(...)`` or ``await
producer.start()``).

Cancellation: a cancelled ``init_transactions()``, ``commit_transaction()`` or
``abort_transaction()`` is a timeout that came early: the work goes on, and the same call made
again resumes it (or returns at once if it finished meanwhile). A cancelled ``send()`` is
cancelled while it waits for metadata or buffer space, before anything is queued: the record is
queued whole or not at all. Cancelling an await of a record's delivery cancels only that await.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import AsyncIterator, Generator, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from eosclient._args import timeout_of
from eosclient._core.delivery import BatchOutcome
from eosclient._core.encoder import Header
from eosclient._core.partitioner import Partitioner
from eosclient._core.prepared import PreparedTransaction
from eosclient._core.records import Serializer
from eosclient._core.types import TopicPartition
from eosclient._net.loop_driver import LoopDriver
from eosclient._net.steps import Steps, adrive
from eosclient._producer import args
from eosclient._producer.results import RecordFuture, RecordMetadata
from eosclient._producer.sender import WouldWait
from eosclient._producer.session import ProducerSession, TxnCall
from eosclient._stats_reporter import LoopStatsReporter
from eosclient.config import ProducerConfig, build
from eosclient.errors import AbortableError, EosError, IllegalStateError
from eosclient.group_metadata import ConsumerGroupMetadata
from eosclient.stats import ClientStats

__all__ = ["AsyncTransactionalProducer", "Delivery"]

log = logging.getLogger("eosclient.producer")

_T = TypeVar("_T")


class Delivery(Generic[_T]):
    """Where a queued record (or ``send_batch``'s records) was written, once awaited.

    ``await delivery`` returns the :class:`~eosclient.RecordMetadata` (a list of them for
    ``send_batch``) or raises why the record was lost (its transaction aborted, say).
    Cancelling that await cancels only the await: the record stays in its transaction.
    ``done()`` says whether it is settled, without waiting.
    """

    __slots__ = ("_future",)

    def __init__(self, future: Future[_T]) -> None:
        self._future = future

    def done(self) -> bool:
        """Whether the outcome is known (``await`` then returns at once)."""
        return self._future.done()

    def result(self) -> _T:
        """The outcome of a settled delivery.

        Raises:
            IllegalStateError: not settled yet (await it instead).
            EosError: why the record was lost.
        """
        if not self.done():
            raise IllegalStateError("the delivery is not settled yet; await it")
        return self._settled().result(0)

    def __await__(self) -> Generator[Any, None, _T]:
        return self._wait().__await__()

    def _settled(self) -> Future[_T]:
        """The future that settles with the outcome."""
        return self._future

    async def _wait(self) -> _T:
        future = self._settled()
        if not future.done():
            settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            # Called by the driver's turn, on the loop's thread: no call_soon_threadsafe needed.
            future.add_done_callback(lambda _: _settle(settled))
            await settled
        return future.result(0)


class _RecordDelivery(Delivery[RecordMetadata]):
    """``send()``'s :class:`Delivery`, made by the session's ``send()`` in place of the sync
    front's :class:`~eosclient._producer.results.RecordFuture`: one object a record, not a
    future and a Delivery around it (60-100 ns a record). It holds the record's place in its
    batch; a RecordFuture is made only when the delivery is awaited or read."""

    __slots__ = ("_delta", "_outcome", "_stamp")

    def __init__(self, outcome: BatchOutcome, offset_delta: int, timestamp_ms: int) -> None:
        self._outcome = outcome
        self._delta = offset_delta
        self._stamp = timestamp_ms

    def _settled(self) -> Future[RecordMetadata]:
        return RecordFuture(self._outcome, self._delta, self._stamp)

    def done(self) -> bool:
        """Whether the outcome is known (``await`` then returns at once)."""
        return self._outcome.published


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():  # (its await was cancelled)
        future.set_result(None)


class AsyncTransactionalProducer:
    """The asyncio twin of :class:`~eosclient.TransactionalProducer`: the same settings,
    errors and state rules; every wait is an ``await``.

    Create it inside a running event loop, then ``await start()`` (or use ``async with``,
    which starts and closes it). The arguments are :class:`~eosclient.TransactionalProducer`'s.

    Raises:
        ConfigError: as the sync producer's constructor; nothing was started.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        transactional_id: str | None = None,
        transaction_timeout_ms: int | None = None,
        client_id: str | None = None,
        linger_ms: float | None = None,
        batch_size: int | None = None,
        compression_type: str | None = None,
        request_timeout_ms: int | None = None,
        delivery_timeout_ms: int | None = None,
        max_block_ms: int | None = None,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        partitioner: Partitioner | None = None,
        security_protocol: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sasl_mechanism: str | None = None,
        sasl_username: str | None = None,
        sasl_password: str | None = None,
        config: Mapping[str, object] | ProducerConfig | None = None,
    ) -> None:
        given = {k: v for k, v in locals().items() if k not in ("self", "config")}
        self.config = build(ProducerConfig, given, config)
        self._session = ProducerSession(self.config, record_handle=_RecordDelivery)
        self._driver: LoopDriver | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start driving the producer from the running loop (idempotent; never waits)."""
        if self._driver is None:
            self._driver = LoopDriver(self._session.sender)
            self._driver.start()
            cfg = self.config
            if cfg.stats_cb is not None:  # stopped by the session's shut_down()
                self._session.reporter = LoopStatsReporter(cfg.statistics_interval_ms / 1000,
                                                           self.stats, cfg.stats_cb)

    async def __aenter__(self) -> AsyncTransactionalProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:
        """As :meth:`TransactionalProducer.close`: finish or abort what is open (within
        ``timeout``, default ``max.block.ms``), fail what is left, close the connections.
        Idempotent; failures on the way are logged, not raised."""
        session = self._session
        if session.closed:
            return
        seconds = timeout_of(timeout, self.config.max_block_ms)
        deadline = time.monotonic() + seconds
        if self._driver is None:  # never started: nothing was sent
            session.close_unstarted()
            return
        state = session.start_closing()
        if state is None:
            return
        try:
            await self._finish(session.left_open(state), max(0.0, deadline - time.monotonic()))
        except EosError as exc:
            log.warning("close(): %s; failing what is left", exc)
        finally:
            session.shut_down()  # on the loop's thread: it only stops (no waiting)
            await self._driver.stopped_after(max(1.0, deadline - time.monotonic()))

    # -- transactions ---------------------------------------------------------------------------

    async def init_transactions(self, timeout: float | None = None) -> None:
        """As :meth:`TransactionalProducer.init_transactions`; cancelled, it resumes when
        called again."""
        await self._blocking("init", timeout)

    def begin_transaction(self, partitions: Iterable[TopicPartition] | None = None,
                          group_id: str | None = None) -> None:
        """As :meth:`TransactionalProducer.begin_transaction` (never waits)."""
        self._driving()
        self._session.begin(args.partitions_of(partitions), args.group_id_of(group_id))

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group_metadata_or_group_id: ConsumerGroupMetadata | str,
    ) -> None:
        """As :meth:`TransactionalProducer.send_offsets_to_transaction` (never waits; its
        errors surface at ``commit_transaction()``)."""
        self._driving()
        checked = args.offsets_of(offsets)
        self._session.send_offsets(checked, args.group_of(group_metadata_or_group_id))

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """As :meth:`TransactionalProducer.commit_transaction`. Cancelled (or timed out), the
        commit goes on; calling it again resumes the same commit."""
        await self._blocking("commit", timeout)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """As :meth:`TransactionalProducer.abort_transaction`; cancelled, it resumes when
        called again."""
        await self._blocking("abort", timeout)

    @contextlib.asynccontextmanager
    async def transaction(self, partitions: Iterable[TopicPartition] | None = None,
                          group_id: str | None = None, *, timeout: float | None = None,
                          ) -> AsyncIterator[AsyncTransactionalProducer]:
        """A transaction as an ``async with`` block: commits when it ends, aborts on any
        exception (the block's task cancelled included) and re-raises it. A commit that fails
        with an :class:`~eosclient.errors.AbortableError` is aborted too; a commit that is
        cancelled is left to resume (an unconfirmed commit may only be retried as a commit)."""
        self.begin_transaction(partitions=partitions, group_id=group_id)
        try:
            yield self
        except BaseException as exc:
            await self._abort_after(exc, timeout)
            raise
        try:
            await self.commit_transaction(timeout)
        except AbortableError as exc:
            await self._abort_after(exc, timeout)
            raise

    async def prepare_transaction(self, timeout: float | None = None) -> PreparedTransaction:
        """As :meth:`TransactionalProducer.prepare_transaction`: flush the open transaction
        and hand it over without ending it (:func:`~eosclient.end_prepared` ends it); then
        the producer is closed. Cancelled or timed out before the hand-over, the producer is
        still open with its transaction: call again, or close it (which aborts)."""
        driver = self._driving()
        seconds = timeout_of(timeout, self.config.max_block_ms)
        deadline = time.monotonic() + seconds
        prepared = await adrive(self._session.prepare(deadline, seconds), driver)
        await driver.stopped_after(max(1.0, deadline - time.monotonic()))
        return prepared

    # -- records --------------------------------------------------------------------------------

    async def send(self, topic: str, value: object, key: object = None, *,
                   partition: int | None = None,
                   headers: Sequence[tuple[str, Any]] | None = None,
                   timestamp_ms: int | None = None) -> Delivery[RecordMetadata]:
        """Queue one record, as :meth:`TransactionalProducer.send`; the returned
        :class:`Delivery` is awaited only if the caller wants the outcome.

        Waits only for the topic's metadata (its first record) or ``buffer.memory``, at most
        ``max.block.ms``; a send cancelled then queued nothing. A send that waited serializes
        its key and value again after the wait (serializers should not count calls).

        Raises:
            EosError: as :meth:`TransactionalProducer.send`; nothing was queued.
        """
        session, driver = self._session, self._driver
        if driver is None or not driver.here():
            driver = self._driving()  # raises: not started, or called from another thread
        opened = session.opened
        while True:
            try:
                delivery: Delivery[RecordMetadata] = session.send(
                    topic, value, key, partition=partition, headers=headers,
                    timestamp_ms=timestamp_ms)
                break
            except WouldWait:  # for the topic's metadata or buffer.memory: nothing queued
                if not await self._await_room(topic):
                    raise  # it would wait for something else: a bug, not a hang
        # Nothing is awaited after the record is queued: a cancellation never comes after it.
        if session.opened != opened:  # it opened a batch, and the one before it may be full:
            # a turn sends that now, as the sync producer's I/O thread would, while the caller
            # goes on queueing (at most a turn a millisecond); else a loop that never yields
            # sends everything at its commit. (With 16 KiB batches a turn per batch cost 1.2 us
            # a record; with batch.size's 1 MB, it is a turn per ~9,000 records of 100 bytes.)
            driver.pump()
        return delivery  # a _RecordDelivery (see __init__)

    async def send_and_wait(self, topic: str, value: object, key: object = None, *,
                            partition: int | None = None,
                            headers: Sequence[tuple[str, Any]] | None = None,
                            timestamp_ms: int | None = None) -> RecordMetadata:
        """:meth:`send`, then await its delivery (``linger.ms`` and the round trip)."""
        delivery = await self.send(topic, value, key, partition=partition, headers=headers,
                                   timestamp_ms=timestamp_ms)
        return await delivery

    async def send_batch(self, topic: str, values: Sequence[object],
                         keys: Sequence[object] | None = None,
                         partition: int | None = None, *,
                         headers: Sequence[Sequence[tuple[str, Any]] | None] | None = None,
                         ) -> Delivery[list[RecordMetadata]]:
        """Queue many records at once, as :meth:`TransactionalProducer.send_batch`; nothing
        was queued if it raises."""
        await self._await_room(args.topic_of(topic))
        delivery = Delivery(self._session.send_batch(topic, values, keys, partition, headers))
        self._driving().pump()  # the full batches go out now (no await: see send)
        return delivery

    async def partitions_for(self, topic: str) -> list[TopicPartition]:
        """As :meth:`TransactionalProducer.partitions_for`."""
        args.topic_of(topic)
        return await self._run(self._session.partitions(topic))

    async def flush(self, timeout: float | None = None) -> None:
        """As :meth:`TransactionalProducer.flush`: wait until every queued record is written
        or failed (returns early if the open transaction failed)."""
        driver = self._driving()
        seconds = timeout_of(timeout, self.config.max_block_ms)
        deadline = time.monotonic() + seconds
        await adrive(self._session.flush(deadline, seconds), driver)

    def stats(self) -> ClientStats:
        """As :meth:`TransactionalProducer.stats` (``stats_cb`` is called with it every
        ``statistics.interval.ms`` from the loop; a coroutine function's runs as a task)."""
        return self._session.stats()

    def __repr__(self) -> str:
        return f"<AsyncTransactionalProducer {self._session.describe()}>"

    # -- internals ------------------------------------------------------------------------------

    def _driving(self) -> LoopDriver:
        if self._driver is None:
            raise IllegalStateError("the producer is not started: `await producer.start()` "
                                    "or `async with producer` first")
        self._driver.check_thread("producer")
        return self._driver

    async def _run(self, steps: Steps[_T]) -> _T:
        """Carry ``steps`` out on the loop (refused, and never started, if not driving)."""
        try:
            driver = self._driving()
        except BaseException:
            steps.close()
            raise
        return await adrive(steps, driver)

    async def _blocking(self, call: TxnCall, timeout: float | None) -> None:
        """Make a transaction call and await it; a cancelled wait leaves the call to be
        resumed, as a timeout does (:meth:`TransactionCore.abandon`)."""
        driver, session = self._driving(), self._session
        seconds = timeout_of(timeout, self.config.max_block_ms)
        deadline = time.monotonic() + seconds
        completion = session.transaction_call(call, deadline)
        # Its first requests go out now, not after a trip through the loop; and a turn runs
        # again once the loop is reached even if pump() did not turn (one turned less than
        # a millisecond ago): else the batches a commit flushes waited for the timer that
        # turn set, linger.ms, about 5 ms a transaction.
        driver.pump()
        try:
            await adrive(session.completed(completion, deadline), driver)
        except BaseException:
            session.abandon(completion)
            raise

    async def _await_room(self, topic: str) -> bool:
        """Wait (before anything is queued) for what ``send`` would block on: the topic's
        metadata and free ``buffer.memory``. Either way the session's ``send`` then never
        waits. Returns whether there was anything to wait for."""
        driver = self._driving()
        if type(topic) is not str:
            args.topic_of(topic)  # raises
        return await adrive(self._session.room(topic), driver)

    async def _abort_after(self, exc: BaseException, timeout: float | None) -> None:
        if not self._session.worth_aborting(exc):
            return
        try:
            await self.abort_transaction(timeout)
        except EosError as abort_error:
            exc.add_note(f"abort_transaction() after the failure also failed: {abort_error!r}")

    async def _finish(self, left: str | None, seconds: float) -> None:
        """close()'s attempt to leave nothing open behind (``left``: what
        :meth:`ProducerSession.left_open` said)."""
        if left == "flush":
            await self.flush(seconds)
        elif left == "abort":
            log.info("close(): aborting the open transaction")
            await self.abort_transaction(seconds)
        elif left == "commit":
            await self.commit_transaction(seconds)


async def send_run(producer: AsyncTransactionalProducer, topic: str, values: Sequence[object],
                   keys: Sequence[object] | None, headers: list[list[Header]]) -> None:
    """The asyncio processor's copies: :meth:`AsyncTransactionalProducer.send_batch` for
    records whose headers it made (``eos.src``), so they are not checked again
    (:meth:`ProducerSession.send_run <eosclient._producer.session.ProducerSession.send_run>`)."""
    await producer._await_room(args.topic_of(topic))
    producer._session.send_run(topic, values, keys, headers)
    producer._driving().pump()  # the full batches go out now (no await: see send)


async def send_many(producer: AsyncTransactionalProducer, topic: str,
                    items: Iterable[tuple[object, object, int | None,
                                          Sequence[tuple[str, Any]]]]) -> None:
    """Queue ``(value, key, partition, headers)`` records as
    :meth:`AsyncTransactionalProducer.send` does, without a coroutine and a :class:`Delivery`
    each (the asyncio processor's writes: 15% of its throughput). Waits only as ``send`` does,
    before a record is queued. (A turn between records, so that full batches go out
    meanwhile, measured no faster: the batches go out at the task's next await.)"""
    producer._driving()
    send = producer._session.send
    for value, key, partition, headers in items:
        while True:
            try:
                send(topic, value, key, partition=partition, headers=headers)
                break
            except WouldWait:  # as in send(): nothing was queued
                if not await producer._await_room(topic):
                    raise
