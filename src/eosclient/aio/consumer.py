"""The asyncio read_committed consumer: the sync consumer's core, driven by the event loop.

Shape: as :mod:`eosclient.aio.producer`. An :class:`AsyncReadCommittedConsumer` holds a
:class:`~eosclient.ReadCommittedConsumer` whose I/O thread is never started; a
:class:`~eosclient._net.loop_driver.LoopDriver` runs that consumer's loop turns (fetcher, group
membership, heartbeats, offset jobs) from the event loop. Calls that never wait (``assign``,
``subscribe``, ``seek*``, ``assignment``, ``group_metadata``) are the sync consumer's own; calls
that wait await the same jobs and queries, and take the same decisions (the sync consumer's
``_commit_now``, ``_moved_on``, ``_rebalanced`` ...). Decoding and the read_committed filter run
in ``poll()``, on the loop's thread, as they run on the application's thread in the sync one.

Rebalance callbacks may be plain functions or coroutine functions; they run inside
``poll()``/``commit()``, in the task that called it. A task cancelled while a callback runs
still finishes the rebalance step (revoked partitions are dropped and the member joins again;
assigned partitions stay assigned), so the group stays consistent.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from eosclient._args import timeout_of
from eosclient._consumer import args
from eosclient._consumer.offsets import OffsetJob
from eosclient._consumer.partitions import ConsumerRecord, Followup
from eosclient._core.records import Deserializer
from eosclient._core.types import TopicPartition
from eosclient._net.loop_driver import LoopDriver
from eosclient._stats_reporter import LoopStatsReporter
from eosclient.config import ConsumerConfig
from eosclient.consumer import (
    ReadCommittedConsumer,
    RecordColumns,
    TopicMetadata,
    _Mode,
    _Out,
    _still_rebalancing,
)
from eosclient.errors import (
    AbortableError,
    EosError,
    IllegalStateError,
    KafkaTimeoutError,
    ResponseTooLargeError,
    RetriableError,
)
from eosclient.group import GroupCoordinator, step_callback
from eosclient.group_metadata import ConsumerGroupMetadata
from eosclient.stats import ClientStats

__all__ = ["AsyncReadCommittedConsumer", "AsyncRebalanceCallback"]

log = logging.getLogger("eosclient.consumer")

AsyncRebalanceCallback = Callable[[list[TopicPartition]], object]
"""``on_assign`` / ``on_revoke`` / ``on_lost``: a function or a coroutine function of the
partitions; a returned awaitable is awaited."""

_LEAVE_WAIT = 5.0  # seconds close() waits for LeaveGroup at most


class AsyncReadCommittedConsumer:
    """The asyncio twin of :class:`~eosclient.ReadCommittedConsumer`: the same settings,
    errors and delivery rules; every wait is an ``await``.

    Create it inside a running event loop, then ``await start()`` (or ``async with``). The
    arguments are :class:`~eosclient.ReadCommittedConsumer`'s.

    Raises:
        ConfigError: as the sync consumer's constructor; nothing was started.
    """

    def __init__(self, bootstrap_servers: str | Sequence[str] | None = None, *,
                 group_id: str | None = None, group_instance_id: str | None = None,
                 isolation_level: str | None = None,
                 auto_offset_reset: str | None = None, client_id: str | None = None,
                 security_protocol: str | None = None,
                 ssl_context: ssl.SSLContext | None = None,
                 sasl_mechanism: str | None = None, sasl_username: str | None = None,
                 sasl_password: str | None = None,
                 key_deserializer: Deserializer | None = None,
                 value_deserializer: Deserializer | None = None,
                 config: Mapping[str, object] | ConsumerConfig | None = None) -> None:
        given = {k: v for k, v in locals().items() if k not in ("self", "config")}
        self.config = args.config_of(given, config)
        self._sync = ReadCommittedConsumer._unstarted(self.config)
        self._driver: LoopDriver | None = None
        self._on_assign: AsyncRebalanceCallback | None = None
        self._on_revoke: AsyncRebalanceCallback | None = None
        self._on_lost: AsyncRebalanceCallback | None = None
        # Records polled for `async for` and not yet handed out: commit() and position()
        # count from the first of them, so nothing unseen is committed.
        self._buffered: collections.deque[ConsumerRecord] = collections.deque()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start driving the consumer from the running loop (idempotent; never waits)."""
        if self._driver is None:
            self._driver = LoopDriver(self._sync._loop)
            self._driver.start()
            cfg = self.config
            if cfg.stats_cb is not None:
                self._sync._reporter = LoopStatsReporter(cfg.statistics_interval_ms / 1000,
                                                         self.stats, cfg.stats_cb)

    async def __aenter__(self) -> AsyncReadCommittedConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self, timeout: float | None = None, *, leave_group: bool = False) -> None:
        """As :meth:`ReadCommittedConsumer.close`: ``on_revoke`` (awaited), leave the group
        (a static member too if ``leave_group``), close the connections. Idempotent; errors
        on the way are logged, not raised."""
        sync = self._sync
        if sync._closed:
            return
        deadline = sync._deadline(timeout)
        loop = sync._loop
        if self._driver is None:  # never started: nothing to leave
            sync._closed = True
            loop.stop()
            sync._finalizer.detach()
            loop.client.close()
            return
        if sync._reporter is not None:
            sync._reporter.stop()
        owned = list(sync._assignment.states) if sync._mode is _Mode.SUBSCRIBE else []
        if owned and self._on_revoke is not None:
            try:
                await _call(self._on_revoke, owned)
            except Exception:  # closing always closes
                log.exception("on_revoke raised while closing")
        sync._closed = True
        group = sync._group
        if group is not None and loop.crashed is None:
            group.membership.leave(time.monotonic(), static_too=leave_group)
            with contextlib.suppress(KafkaTimeoutError, ResponseTooLargeError):
                await self._wait_until(lambda: group.left, min(deadline, time.monotonic()
                                                                + _LEAVE_WAIT),
                                       "LeaveGroup", loop.check_alive)
        loop.stop()
        await self._driver.stopped_after(max(0.1, deadline - time.monotonic()))
        sync._finalizer.detach()

    # -- partitions (never wait) ----------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """As :meth:`ReadCommittedConsumer.assign`."""
        self._driving()
        tps = args.partitions_of(partitions)
        self._unbuffer(None)  # kept partitions deliver their buffered records again
        self._sync.assign(tps)

    def subscribe(self, topics: Iterable[str], on_assign: AsyncRebalanceCallback | None = None,
                  on_revoke: AsyncRebalanceCallback | None = None,
                  on_lost: AsyncRebalanceCallback | None = None) -> None:
        """As :meth:`ReadCommittedConsumer.subscribe`; the callbacks may be coroutine
        functions, awaited inside :meth:`poll` (and :meth:`commit`)."""
        self._driving()
        self._sync.subscribe(topics)
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost

    def assignment(self) -> list[TopicPartition]:
        """The partitions assigned now."""
        return self._sync.assignment()

    def topic_metadata(self, topics: Iterable[str]) -> dict[str, TopicMetadata]:
        """As :meth:`ReadCommittedConsumer.topic_metadata` (asks no broker)."""
        return self._sync.topic_metadata(topics)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """As :meth:`ReadCommittedConsumer.seek`."""
        self._sync.seek(partition, offset)
        self._drop_buffered({args.partition_of(partition)})

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """As :meth:`ReadCommittedConsumer.seek_to_beginning`."""
        tps = None if partitions is None else args.partitions_of(partitions)
        self._sync.seek_to_beginning(tps)
        self._drop_buffered(None if tps is None else set(tps))

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """As :meth:`ReadCommittedConsumer.seek_to_end`."""
        tps = None if partitions is None else args.partitions_of(partitions)
        self._sync.seek_to_end(tps)
        self._drop_buffered(None if tps is None else set(tps))

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """As :meth:`ReadCommittedConsumer.pause` (records fetched for ``async for`` and not
        yet handed out are given back: they are delivered after :meth:`resume`)."""
        tps = args.partitions_of(partitions)
        self._unbuffer(set(tps))
        self._sync.pause(tps)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """As :meth:`ReadCommittedConsumer.resume`."""
        self._sync.resume(partitions)

    def paused(self) -> list[TopicPartition]:
        """As :meth:`ReadCommittedConsumer.paused`."""
        return self._sync.paused()

    def stats(self) -> ClientStats:
        """As :meth:`ReadCommittedConsumer.stats` (``stats_cb`` is called with it every
        ``statistics.interval.ms`` from the loop; a coroutine function's runs as a task)."""
        return self._sync.stats()

    def in_generation(self) -> bool:
        """As :meth:`ReadCommittedConsumer.in_generation`."""
        return self._sync.in_generation()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """As :meth:`ReadCommittedConsumer.group_metadata`, for
        ``send_offsets_to_transaction``."""
        return self._sync.group_metadata()

    # -- records --------------------------------------------------------------------------------

    async def poll(self, timeout: float = 1.0,
                   max_records: int | None = None) -> list[ConsumerRecord]:
        """As :meth:`ReadCommittedConsumer.poll`: committed records in offset order per
        partition, as soon as there are some, or [] after ``timeout``. Runs (awaits) the
        rebalance callbacks. Cancelled, it took nothing: no record is lost."""
        return await self._poll(timeout, max_records, self._sync._assignment.drain, [])

    async def poll_batch(self, timeout: float = 1.0, max_records: int | None = None,
                         ) -> dict[TopicPartition, RecordColumns]:
        """As :meth:`ReadCommittedConsumer.poll_batch`: :meth:`poll`'s records as columns."""
        return await self._poll(timeout, max_records, self._sync._assignment.drain_columns, {})

    async def _poll(self, timeout: float, max_records: int | None,
                    drain: Callable[[int], tuple[_Out, list[Followup]]], empty: _Out) -> _Out:
        driver, sync = self._driving(), self._sync
        seconds = timeout_of(timeout, 0)
        limit = args.max_records_of(max_records, self.config.max_poll_records)
        sync._check_polling()
        deadline = time.monotonic() + seconds
        while True:
            await self._rebalance()
            driver.pump()  # what the I/O thread did meanwhile in the sync consumer
            fed = sync._take_in()
            records, followups = drain(limit)
            records, done = sync._deserialize(records)
            error = sync._settle_poll(records, followups, fed, done)
            if records:
                return records
            if error is not None:
                raise error.with_traceback(None)
            if sync._rebalance_due():
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return empty
            await driver.changed(remaining)

    async def getmany(self, timeout: float = 1.0, max_records: int | None = None,
                      ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """:meth:`poll`, grouped by partition (aiokafka's shape). Without deserializers it
        is :meth:`poll_batch`'s columns made records, one partition at a time (no
        ``TopicPartition`` per record)."""
        cfg = self.config
        if cfg.key_deserializer is None and cfg.value_deserializer is None:
            batch = await self.poll_batch(timeout, max_records)
            return {tp: columns.records() for tp, columns in batch.items()}
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in await self.poll(timeout, max_records):
            out.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        return out

    async def records(self, idle_timeout: float | None = None, poll_timeout: float = 1.0,
                      ) -> AsyncIterator[ConsumerRecord]:
        """As :meth:`ReadCommittedConsumer.records`: ``async for record in
        consumer.records(idle_timeout=5)`` ends when the loop breaks, after ``idle_timeout``
        seconds without a record (None: never), or once the consumer is closed. One record per
        poll, so the position (and a :meth:`commit` inside the loop) never passes a record the
        loop has not seen. Raises AllBrokersDownError rather than end when no broker was ever
        reached."""
        idle = None if idle_timeout is None else timeout_of(idle_timeout, 0)
        wait = timeout_of(poll_timeout, 0)
        quiet_since = time.monotonic()
        while not self._sync._closed:
            got = await self.poll(wait if idle is None else min(wait, idle), max_records=1)
            if got:
                yield got[0]
                quiet_since = time.monotonic()
            elif idle is not None and time.monotonic() - quiet_since >= idle:
                self._sync._check_idle_end(idle)
                return

    def __aiter__(self) -> AsyncReadCommittedConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next committed record, waiting as long as it takes (``async for``)."""
        while not self._buffered:
            self._buffered.extend(await self.poll(1.0))
        return self._buffered.popleft()

    # -- positions and offsets ------------------------------------------------------------------

    async def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """As :meth:`ReadCommittedConsumer.position` (records fetched for ``async for`` and
        not yet handed out are not past it)."""
        sync = self._sync
        tp = args.partition_of(partition)
        deadline = sync._deadline(timeout)
        state = sync._state(tp)
        await self._wait_until(lambda: state.position is not None or state.error is not None,
                               deadline, f"position({tp})", sync._check_waiting)
        found = state.position
        if found is None:
            raise (state.error or IllegalStateError(f"{tp} lost")).with_traceback(None)
        return self._unbuffered().get(tp, found)

    async def last_stable_offset(self, partition: TopicPartition,
                                 timeout: float | None = None) -> int:
        """As :meth:`ReadCommittedConsumer.last_stable_offset`."""
        return (await self._ends(partition, timeout))[0]

    async def high_watermark(self, partition: TopicPartition,
                             timeout: float | None = None) -> int:
        """As :meth:`ReadCommittedConsumer.high_watermark`."""
        return (await self._ends(partition, timeout))[1]

    async def lag(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """As :meth:`ReadCommittedConsumer.lag`."""
        stable, high = await self._ends(partition, timeout)
        end = stable if self.config.read_committed else high
        return max(0, end - await self.position(partition, timeout))

    async def committed(self, partitions: Iterable[TopicPartition],
                        timeout: float | None = None) -> dict[TopicPartition, int | None]:
        """As :meth:`ReadCommittedConsumer.committed` (``require_stable``)."""
        sync = self._sync
        tps = args.partitions_of(partitions)
        group = sync._need_group("committed()")
        deadline = sync._deadline(timeout)
        sync._check_open()
        result = await self._job(group, group.committed(tps), deadline, "committed()")
        return {tp: result.get(tp) for tp in tps}

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None,
                     timeout: float | None = None) -> None:
        """As :meth:`ReadCommittedConsumer.commit` (default: the positions, not counting
        records fetched for ``async for`` and not yet handed out); a rebalance under way is
        finished here, its callbacks awaited."""
        sync = self._sync
        checked = None if offsets is None else args.offsets_of(offsets)
        group = sync._need_group("commit()")
        deadline = sync._deadline(timeout)
        sync._check_open()
        if checked is None:
            checked = {**sync._positions(), **self._unbuffered()}
        if not checked:
            return
        if sync._commit_now(group, checked):
            try:
                await self._job(group, group.commit(checked), deadline, "commit()")
                return
            except (AbortableError, RetriableError) as exc:
                if not sync._moved_on(group, exc):
                    raise
        await self._finish_rebalance(group, deadline)
        sync._check_open()
        kept = sync._still_owned(checked)
        if kept:
            await self._job(group, group.commit(kept), deadline, "commit()")
            sync._skip_committed(kept)
        sync._raise_lost(checked, kept)

    def _commit_start(self, offsets: Mapping[TopicPartition, int]) -> OffsetJob | None:
        """As :meth:`ReadCommittedConsumer._commit_start`: the commit goes out at the next
        await that drives the loop."""
        self._driving()
        return self._sync._commit_start(offsets)

    async def _commit_finish(self, job: OffsetJob, timeout: float | None = None) -> None:
        """As :meth:`ReadCommittedConsumer._commit_finish`, awaited."""
        sync = self._sync
        group = sync._need_group("commit()")
        deadline = sync._deadline(timeout)
        sync._check_open()
        await self._job(group, job, deadline, "commit()")

    def __repr__(self) -> str:
        return "<Async" + repr(self._sync)[1:]

    # -- internals ------------------------------------------------------------------------------

    def _driving(self) -> LoopDriver:
        if self._driver is None:
            raise IllegalStateError("the consumer is not started: `await consumer.start()` "
                                    "or `async with consumer` first")
        self._driver.check_thread("consumer")
        return self._driver

    def _unbuffered(self) -> dict[TopicPartition, int]:
        """Per partition, the offset of the first record fetched but not yet handed out."""
        first: dict[TopicPartition, int] = {}
        for record in self._buffered:
            first.setdefault(TopicPartition(record.topic, record.partition), record.offset)
        return first

    def _unbuffer(self, tps: set[TopicPartition] | None) -> None:
        """Give back the records fetched for ``async for`` and not handed out (all if None):
        each partition's position goes back to the first of them."""
        for tp, offset in self._unbuffered().items():
            if tps is None or tp in tps:
                self._sync.seek(tp, offset)
        self._drop_buffered(tps)

    def _drop_buffered(self, tps: set[TopicPartition] | None) -> None:
        self._buffered = collections.deque(
            r for r in self._buffered
            if tps is not None and TopicPartition(r.topic, r.partition) not in tps)

    async def _rebalance(self) -> None:
        """One rebalance step, its callback awaited; the step is finished even if the task is
        cancelled meanwhile (the group stays consistent)."""
        sync = self._sync
        group = sync._group
        if group is None:
            return
        step = group.start_step(sync._loop, sync._assignment)
        if step is None:
            return
        completed = False
        try:
            callback = step_callback(step, self._on_assign, self._on_revoke, self._on_lost)
            if callback is not None:
                await _call(callback, step.partitions)
            completed = True
        finally:
            group.finish_step(sync._loop, sync._assignment, step, completed=completed)
            if step.revoking:
                self._buffered.clear()

    async def _finish_rebalance(self, group: GroupCoordinator, deadline: float) -> None:
        driver, sync = self._driving(), self._sync
        while True:
            await self._rebalance()
            if sync._rebalanced(group):
                return
            if sync._rebalance_due():
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _still_rebalancing(group)
            await driver.changed(remaining)

    async def _job(self, group: GroupCoordinator, job: Any, deadline: float,
                   what: str) -> dict[TopicPartition, int | None]:
        """Await an offset job, as :meth:`GroupCoordinator.wait_for` waits for one."""
        try:
            await self._wait_until(lambda: job.done, deadline, what, self._sync._check_open,
                                   lambda: job.last_error)
        finally:
            group.forget(job)
        if job.error is not None:
            raise job.error
        result: dict[TopicPartition, int | None] = job.result
        return result

    async def _ends(self, partition: TopicPartition, timeout: float | None) -> tuple[int, int]:
        """(last stable offset, high watermark), as :meth:`Fetcher.ends` asks for them."""
        sync = self._sync
        tp = args.partition_of(partition)
        deadline = sync._deadline(timeout)
        sync._check_open()
        fetcher = sync._fetcher
        sync._metadata.want((tp.topic,))
        query = fetcher.query([tp], want_end=True)
        try:
            await self._wait_until(lambda: query.done, deadline, f"the end offsets of {tp}",
                                   lambda: fetcher.check_ends(tp, sync._check_open))
        finally:
            fetcher.queries.remove(query)
        if query.error is not None:
            raise query.error
        ends = query.results[tp]
        return ends.last_stable_offset, ends.high_watermark

    async def _wait_until(self, ready: Callable[[], bool], deadline: float, what: str,
                          check: Callable[[], None],
                          cause: Callable[[], EosError | None] | None = None) -> None:
        """:meth:`IoLoop.wait_until`, awaited: the same checks, wake-up and timeout error."""
        driver, loop = self._driving(), self._sync._loop
        woken = False
        while not ready():
            check()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"{what} did not finish in time; the consumer is "
                                        "unchanged") from ((cause() if cause else None)
                                                           or loop.client.connect_failure)
            if not woken:
                loop.wake()
                woken = True
            await driver.changed(remaining)


async def _call(callback: AsyncRebalanceCallback, partitions: list[TopicPartition]) -> None:
    result = callback(partitions)
    if inspect.isawaitable(result):
        await result
