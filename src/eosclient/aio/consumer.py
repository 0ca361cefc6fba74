"""The asyncio read_committed consumer: the consumer session, driven by the event loop.

Shape: as :mod:`eosclient.aio.producer`. An :class:`AsyncReadCommittedConsumer` is a front over
a :class:`~eosclient._consumer.session.ConsumerSession`, the same core the sync
:class:`~eosclient.ReadCommittedConsumer` drives, whose I/O thread is never started: a
:class:`~eosclient._net.loop_driver.LoopDriver` runs the session's loop turns (fetcher, group
membership, heartbeats, offset jobs) from the event loop. Calls that never wait (``assign``,
``subscribe``, ``seek*``, ``assignment``, ``group_metadata``) are the session's own; calls that
wait await the session's steps (:func:`~eosclient._net.steps.adrive`): the very poll loop,
commit path, rebalance step and waits the sync front drives. Decoding and the read_committed
filter run in ``poll()``, on the loop's thread, as they run on the application's thread in the
sync one. What is this front's own: the records buffered for ``async for``, which ``commit()``
and ``position()`` do not count as handed out.

Rebalance callbacks may be plain functions or coroutine functions; they run inside
``poll()``/``commit()``, in the task that called it. A task cancelled while a callback runs
still finishes the rebalance step (revoked partitions are dropped and the member joins again;
assigned partitions stay assigned), so the group stays consistent.
"""

from __future__ import annotations

import collections
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Generic, Self, TypeVar, cast

from eosclient._args import timeout_of
from eosclient._consumer import args
from eosclient._consumer import commit as committing
from eosclient._consumer.lookups import Watermarks
from eosclient._consumer.offsets import OffsetJob
from eosclient._consumer.partitions import ConsumerRecord
from eosclient._consumer.session import ConsumerSession, TopicMetadata
from eosclient._core.decode import RecordColumns
from eosclient._core.records import KeyT, ValueT
from eosclient._core.types import TopicPartition
from eosclient._net.loop_driver import LoopDriver
from eosclient._net.steps import Steps, adrive
from eosclient._stats_reporter import LoopStatsReporter
from eosclient.config import ConsumerConfig, build
from eosclient.errors import IllegalStateError
from eosclient.group_metadata import ConsumerGroupMetadata
from eosclient.stats import ClientStats

__all__ = ["AsyncReadCommittedConsumer", "AsyncRebalanceCallback"]

_T = TypeVar("_T")

AsyncRebalanceCallback = Callable[[list[TopicPartition]], object]
"""``on_assign`` / ``on_revoke`` / ``on_lost``: a function or a coroutine function of the
partitions; a returned awaitable is awaited."""


class AsyncReadCommittedConsumer(Generic[KeyT, ValueT]):
    """The asyncio twin of :class:`~eosclient.ReadCommittedConsumer`: the same settings,
    errors and delivery rules; every wait is an ``await``. Generic in its records' key and
    value types as the sync one is (inferred from the deserializers).

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
                 key_deserializer: Callable[[bytes], KeyT] | None = None,
                 value_deserializer: Callable[[bytes], ValueT] | None = None,
                 config: Mapping[str, object] | ConsumerConfig | None = None) -> None:
        given = {k: v for k, v in locals().items() if k not in ("self", "config")}
        self.config = build(ConsumerConfig, given, config)
        self._session = session = ConsumerSession(self.config)
        self._driver: LoopDriver | None = None
        # Records polled for `async for` and not yet handed out: commit() and position()
        # count from the first of them, so nothing unseen is committed. Changed in place: the
        # session drops those of revoked partitions after a revoking rebalance step
        # (after_revoke; cooperative, the kept partitions' stay).
        self._buffered: collections.deque[ConsumerRecord[KeyT, ValueT]] = collections.deque()
        session.after_revoke = lambda tps: self._drop_buffered(set(tps))

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start driving the consumer from the running loop (idempotent; never waits)."""
        if self._driver is None:
            session = self._session
            self._driver = driver = LoopDriver(session.loop)
            session.catch_up = driver.pump
            driver.start()
            cfg = self.config
            if cfg.stats_cb is not None:
                session.reporter = LoopStatsReporter(cfg.statistics_interval_ms / 1000,
                                                     self.stats, cfg.stats_cb)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self, timeout: float | None = None, *, leave_group: bool = False) -> None:
        """As :meth:`ReadCommittedConsumer.close`: ``on_revoke`` (awaited), leave the group
        (a static member too if ``leave_group``), close the connections. Idempotent; errors
        on the way are logged, not raised."""
        session = self._session
        if session.closed:
            return
        deadline = session.deadline(timeout)
        driver = self._driver
        if driver is None:  # never started: nothing to leave
            session.abandon()
            return
        if await adrive(session.close(deadline, leave_group), driver):
            await driver.stopped_after(max(0.1, deadline - time.monotonic()))
            session.finalizer.detach()

    # -- partitions (never wait) ----------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """As :meth:`ReadCommittedConsumer.assign`."""
        self._driving()
        tps = args.partitions_of(partitions)
        self._unbuffer(None)  # kept partitions deliver their buffered records again
        self._session.assign(tps)

    def subscribe(self, topics: Iterable[str], on_assign: AsyncRebalanceCallback | None = None,
                  on_revoke: AsyncRebalanceCallback | None = None,
                  on_lost: AsyncRebalanceCallback | None = None) -> None:
        """As :meth:`ReadCommittedConsumer.subscribe`; the callbacks may be coroutine
        functions, awaited inside :meth:`poll` (and :meth:`commit`)."""
        self._driving()
        pattern = topics if isinstance(topics, re.Pattern) else None
        names = [] if pattern is not None else args.topics_of(topics)
        self._session.subscribe(names, pattern, on_assign, on_revoke, on_lost)

    def assignment(self) -> list[TopicPartition]:
        """The partitions assigned now."""
        return self._session.assigned()

    def topic_metadata(self, topics: Iterable[str]) -> dict[str, TopicMetadata]:
        """As :meth:`ReadCommittedConsumer.topic_metadata` (asks no broker)."""
        if isinstance(topics, Iterable) and not isinstance(topics, str | bytes):
            topics = list(topics)
            if not topics:
                return {}
        return self._session.topic_metadata(args.topics_of(topics))

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """As :meth:`ReadCommittedConsumer.seek`."""
        tp = args.partition_of(partition)
        self._session.seek(tp, args.offset_of(offset, tp))
        self._drop_buffered({tp})

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """As :meth:`ReadCommittedConsumer.seek_to_beginning`."""
        tps = None if partitions is None else args.partitions_of(partitions)
        self._session.seek_to(tps, "earliest")
        self._drop_buffered(None if tps is None else set(tps))

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """As :meth:`ReadCommittedConsumer.seek_to_end`."""
        tps = None if partitions is None else args.partitions_of(partitions)
        self._session.seek_to(tps, "latest")
        self._drop_buffered(None if tps is None else set(tps))

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """As :meth:`ReadCommittedConsumer.pause` (records fetched for ``async for`` and not
        yet handed out are given back: they are delivered after :meth:`resume`)."""
        tps = args.partitions_of(partitions)
        self._unbuffer(set(tps))
        self._session.set_paused(tps, True)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """As :meth:`ReadCommittedConsumer.resume`."""
        self._session.set_paused(args.partitions_of(partitions), False)

    def paused(self) -> list[TopicPartition]:
        """As :meth:`ReadCommittedConsumer.paused`."""
        return self._session.paused()

    def stats(self) -> ClientStats:
        """As :meth:`ReadCommittedConsumer.stats` (``stats_cb`` is called with it every
        ``statistics.interval.ms`` from the loop; a coroutine function's runs as a task)."""
        return self._session.stats()

    def in_generation(self) -> bool:
        """As :meth:`ReadCommittedConsumer.in_generation`."""
        return self._session.in_generation()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """As :meth:`ReadCommittedConsumer.group_metadata`, for
        ``send_offsets_to_transaction``."""
        return self._session.group_metadata()

    # -- records --------------------------------------------------------------------------------

    async def poll(self, timeout: float = 1.0, max_records: int | None = None,
                   ) -> list[ConsumerRecord[KeyT, ValueT]]:
        """As :meth:`ReadCommittedConsumer.poll`: committed records in offset order per
        partition, as soon as there are some, or [] after ``timeout``. Runs (awaits) the
        rebalance callbacks. Cancelled, it took nothing: no record is lost."""
        driver = self._driving()
        records = await adrive(self._session.poll(
            timeout_of(timeout, 0), args.max_records_of(max_records, self.config.max_poll_records),
        ), driver)
        # Deserialized by the session (ConsumerSession.poll): what KeyT and ValueT are bound to.
        return cast("list[ConsumerRecord[KeyT, ValueT]]", records)

    async def poll_batch(self, timeout: float = 1.0, max_records: int | None = None,
                         ) -> dict[TopicPartition, RecordColumns]:
        """As :meth:`ReadCommittedConsumer.poll_batch`: :meth:`poll`'s records as columns."""
        driver = self._driving()
        return await adrive(self._session.poll_batch(
            timeout_of(timeout, 0), args.max_records_of(max_records, self.config.max_poll_records),
        ), driver)

    async def getmany(self, timeout: float = 1.0, max_records: int | None = None,
                      ) -> dict[TopicPartition, list[ConsumerRecord[KeyT, ValueT]]]:
        """:meth:`poll`, grouped by partition (aiokafka's shape). Without deserializers it
        is :meth:`poll_batch`'s columns made records, one partition at a time (no
        ``TopicPartition`` per record)."""
        cfg = self.config
        if cfg.key_deserializer is None and cfg.value_deserializer is None:
            batch = await self.poll_batch(timeout, max_records)
            # No deserializer: KeyT and ValueT are bytes (their defaults), as the columns hold.
            return cast("dict[TopicPartition, list[ConsumerRecord[KeyT, ValueT]]]",
                        {tp: columns.records() for tp, columns in batch.items()})
        out: dict[TopicPartition, list[ConsumerRecord[KeyT, ValueT]]] = {}
        for record in await self.poll(timeout, max_records):
            out.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        return out

    async def records(self, idle_timeout: float | None = None, poll_timeout: float = 1.0,
                      ) -> AsyncIterator[ConsumerRecord[KeyT, ValueT]]:
        """As :meth:`ReadCommittedConsumer.records`: ``async for record in
        consumer.records(idle_timeout=5)`` ends when the loop breaks, after ``idle_timeout``
        seconds without a record (None: never), or once the consumer is closed. One record per
        poll, so the position (and a :meth:`commit` inside the loop) never passes a record the
        loop has not seen. Raises AllBrokersDownError rather than end when no broker was ever
        reached."""
        idle = None if idle_timeout is None else timeout_of(idle_timeout, 0)
        wait = timeout_of(poll_timeout, 0)
        quiet_since = time.monotonic()
        session = self._session
        while not session.closed:
            got = await self.poll(wait if idle is None else min(wait, idle), max_records=1)
            if got:
                yield got[0]
                quiet_since = time.monotonic()
            elif idle is not None and time.monotonic() - quiet_since >= idle:
                session.check_idle_end(idle)
                return

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ConsumerRecord[KeyT, ValueT]:
        """The next committed record, waiting as long as it takes (``async for``)."""
        while not self._buffered:
            self._buffered.extend(await self.poll(1.0))
        return self._buffered.popleft()

    # -- positions and offsets ------------------------------------------------------------------

    async def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """As :meth:`ReadCommittedConsumer.position` (records fetched for ``async for`` and
        not yet handed out are not past it)."""
        tp = args.partition_of(partition)
        found = await self._run(self._session.position(tp, timeout))
        return self._unbuffered().get(tp, found)

    async def watermarks(self, partitions: Iterable[TopicPartition],
                         timeout: float | None = None) -> dict[TopicPartition, Watermarks]:
        """As :meth:`ReadCommittedConsumer.watermarks`."""
        return await self._run(self._session.ends(args.partitions_of(partitions), timeout))

    async def last_stable_offset(self, partition: TopicPartition,
                                 timeout: float | None = None) -> int:
        """As :meth:`ReadCommittedConsumer.last_stable_offset`."""
        tp = args.partition_of(partition)
        return (await self._run(self._session.ends([tp], timeout)))[tp].last_stable_offset

    async def high_watermark(self, partition: TopicPartition,
                             timeout: float | None = None) -> int:
        """As :meth:`ReadCommittedConsumer.high_watermark`."""
        tp = args.partition_of(partition)
        return (await self._run(self._session.ends([tp], timeout)))[tp].high_watermark

    async def lag(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """As :meth:`ReadCommittedConsumer.lag`."""
        tp = args.partition_of(partition)
        ends = (await self._run(self._session.ends([tp], timeout)))[tp]
        end = ends.last_stable_offset if self.config.read_committed else ends.high_watermark
        return max(0, end - await self.position(partition, timeout))

    async def committed(self, partitions: Iterable[TopicPartition],
                        timeout: float | None = None) -> dict[TopicPartition, int | None]:
        """As :meth:`ReadCommittedConsumer.committed` (``require_stable``)."""
        return await self._run(self._session.committed(args.partitions_of(partitions),
                                                       timeout))

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None,
                     timeout: float | None = None) -> None:
        """As :meth:`ReadCommittedConsumer.commit` (default: the positions, not counting
        records fetched for ``async for`` and not yet handed out); a rebalance under way is
        finished here, its callbacks awaited."""
        checked = None if offsets is None else args.offsets_of(offsets)
        await self._run(committing.commit(self._session, checked, timeout,
                                       unseen=self._unbuffered()))

    def start_commit(self, offsets: Mapping[TopicPartition, int]) -> OffsetJob | None:
        """As :meth:`ReadCommittedConsumer.start_commit` (for the exactly-once processor):
        the commit goes out at the next await that drives the loop."""
        self._driving()
        return committing.commit_start(self._session, offsets)

    async def finish_commit(self, job: OffsetJob, timeout: float | None = None) -> None:
        """As :meth:`ReadCommittedConsumer.finish_commit`, awaited."""
        await self._run(committing.commit_finish(self._session, job, timeout))

    def __repr__(self) -> str:
        return (f"<AsyncReadCommittedConsumer group_id={self.config.group_id!r} "
                f"{self._session.state_name}>")

    # -- internals ------------------------------------------------------------------------------

    def _driving(self) -> LoopDriver:
        if self._driver is None:
            raise IllegalStateError("the consumer is not started: `await consumer.start()` "
                                    "or `async with consumer` first")
        self._driver.check_thread("consumer")
        return self._driver

    async def _run(self, steps: Steps[_T]) -> _T:
        """Await an operation's steps on this loop."""
        return await adrive(steps, self._driving())

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
                self._session.seek(tp, offset)
        self._drop_buffered(tps)

    def _drop_buffered(self, tps: set[TopicPartition] | None) -> None:
        kept = [] if tps is None else [r for r in self._buffered
                                       if TopicPartition(r.topic, r.partition) not in tps]
        self._buffered.clear()
        self._buffered.extend(kept)
