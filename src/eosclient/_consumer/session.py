"""The consumer session: one consumer's state and decisions, once, for the sync and asyncio fronts.

Theory of operation
-------------------
:class:`ConsumerSession` is everything a read_committed consumer is except the way it waits:
the I/O loop and its network client, the partitions
(:class:`~eosclient._consumer.partitions.Assignment`), the fetcher, the group coordinator, the
metadata, how partitions were given (:class:`Mode`), the rebalance callbacks, the closed state,
the stats reporter and the deserializers (the settings'). Two fronts drive it:

- :class:`~eosclient.ReadCommittedConsumer` starts the I/O thread (:meth:`start_thread`) and
  carries each operation that waits out with :func:`~eosclient._net.steps.drive`, holding the
  loop's lock;
- :class:`~eosclient.aio.AsyncReadCommittedConsumer` leaves the thread unstarted, has a
  :class:`~eosclient._net.loop_driver.LoopDriver` run the loop's turns from the event loop, and
  awaits each operation with :func:`~eosclient._net.steps.adrive`.

What a front may call comes in three kinds:

* calls that never wait (:meth:`assign`, :meth:`subscribe`, :meth:`seek`, :meth:`set_paused`,
  the snapshots): they take the loop's lock themselves;
* operations that wait, written once as steps (:mod:`eosclient._net.steps`): :meth:`poll` and
  :meth:`poll_batch`, :meth:`position`, :meth:`ends`, :meth:`committed`, :meth:`close`, and the
  commit path (:mod:`eosclient._consumer.commit`, functions of a session). They run under the
  lock (the sync front's ``drive`` holds it; the event loop's thread needs none) and call
  nothing that takes it. They give it up (:attr:`ConsumerSession.unlocked`) for what must not
  hold up the I/O thread or may call the consumer: decoding and filtering, the deserializers,
  the rebalance callbacks (a :class:`~eosclient._net.steps.Call`, awaited by the asyncio front
  if it returns an awaitable);
* what a front reads: :attr:`config`, :attr:`closed`, :attr:`loop`, :attr:`finalizer`.

A poll's steps, in order: run a due rebalance step (its callback a ``Call``; the step finishes
even if the callback raises or its task is cancelled), take in (raise what must be raised, hand
fetched answers to their partitions), drain (decode and filter, unlocked), deserialize
(unlocked), settle (act on what draining found, count, prefetch); then return the records, raise
the error found, rebalance again, or block until the loop's next turn.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Final, NamedTuple, TypeVar

from eosclient._consumer import args
from eosclient._consumer.deserialize import Deserialized, deserialize
from eosclient._consumer.fetcher import Fetcher
from eosclient._consumer.group import GroupCoordinator, RebalanceCallback, step_callback
from eosclient._consumer.lookups import Watermarks
from eosclient._consumer.loop import UNCHANGED, IoLoop
from eosclient._consumer.membership import State
from eosclient._consumer.partitions import (
    Assignment,
    ConsumerRecord,
    Followup,
    PartitionState,
    missing,
)
from eosclient._core.decode import RecordColumns
from eosclient._core.isolation import Isolation
from eosclient._core.types import TopicPartition
from eosclient._net.client import NetworkClient
from eosclient._net.steps import Block, Call, Steps, wait_until
from eosclient._stats_reporter import LoopStatsReporter, StatsReporter
from eosclient.config import ConsumerConfig
from eosclient.errors import ApiKey, EosError, IllegalStateError, error_for
from eosclient.group_metadata import ConsumerGroupMetadata
from eosclient.stats import ClientStats

__all__ = ["ConsumerSession", "Mode", "Out", "TopicMetadata"]

log = logging.getLogger("eosclient.consumer")

_LEAVE_WAIT: Final = 5.0  # seconds close() waits for LeaveGroup at most

Out = TypeVar("Out", list[ConsumerRecord], dict[TopicPartition, RecordColumns])
"""What a poll returns: records (``poll``) or columns per partition (``poll_batch``)."""


class TopicMetadata(NamedTuple):
    """What the consumer's latest Metadata answer said about one topic (a snapshot).

    Attributes:
        partitions: How many partitions the topic has; None while no answer has named it.
        error: The error the latest answer gave for the topic (UNKNOWN_TOPIC_OR_PARTITION for
            one that does not exist), or None.
    """

    partitions: int | None
    error: EosError | None


class Mode(enum.Enum):
    """How the consumer was given its partitions."""

    UNSET = "neither assign() nor subscribe() was called"
    NONE = "assign() with no partitions"
    ASSIGN = "assign(): partitions chosen by the application"
    SUBSCRIBE = "subscribe(): partitions given by the group"


class _Released:
    """The loop's lock given up for a block, on the thread that holds it (the sync front's
    steps run under it, and decode and call back without it)."""

    __slots__ = ("_lock",)

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock.release()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.acquire()


class ConsumerSession:
    """One consumer's state and decisions (the module docstring). Nothing is started: the sync
    front calls :meth:`start_thread`, the asyncio front drives :attr:`loop` from an event loop.

    Args:
        config: The consumer's settings, checked.

    Attributes:
        config: The settings.
        loop: The I/O loop (its lock, its condition, its network client).
        lock: The loop's lock: the calls that never wait take it; steps run under it.
        metadata: The network client's metadata view.
        assignment: The partitions and their positions.
        fetcher: Fetch requests and offset queries.
        group: The group coordinator; None without a ``group_id``.
        mode: How partitions were given.
        on_assign, on_revoke, on_lost: The rebalance callbacks (:meth:`subscribe`).
        closed: Whether :meth:`close` (or :meth:`abandon`) ran.
        reporter: The front's ``stats_cb`` reporter (thread or event-loop timer), stopped by
            :meth:`close`.
        unlocked: Entered around what steps run without the lock (a no-op until
            :meth:`start_thread`: no other thread shares it then).
        catch_up: Called at the top of each poll round, before taking answers in (the asyncio
            front's :meth:`LoopDriver.pump <eosclient._net.loop_driver.LoopDriver.pump>`: what
            the I/O thread does meanwhile in the sync front); None: nothing.
        after_revoke: Called with the partitions once a revoking rebalance step is finished
            (the asyncio front drops the records it buffered for ``async for`` from them);
            None: nothing.
        finalizer: Stops the loop if the session is collected unclosed; detached by the front
            once closed.
    """

    reporter: StatsReporter | LoopStatsReporter | None

    def __init__(self, config: ConsumerConfig) -> None:
        self.config = cfg = config
        client = NetworkClient(cfg, auto_create_topics=False)
        self.loop = loop = IoLoop(client, f"eosclient-consumer-{cfg.client_id}")
        self.lock = loop.lock
        self.metadata = client.metadata
        isolation = Isolation.READ_COMMITTED if cfg.read_committed else Isolation.READ_UNCOMMITTED
        self.assignment = Assignment(isolation, max_held_bytes=cfg.max_held_bytes,
                                     max_partition_bytes=cfg.max_partition_fetch_bytes,
                                     reset_policy=cfg.auto_offset_reset,
                                     max_batch_bytes=cfg.receive_message_max_bytes,
                                     check_crcs=cfg.check_crcs)
        self.fetcher = Fetcher(cfg, client, self.assignment)
        self.group = GroupCoordinator(cfg, client, self.assignment) if cfg.group_id else None
        loop.drivers = [*([self.group] if self.group else []), self.fetcher]
        self.mode = Mode.UNSET
        self.on_assign: RebalanceCallback | None = None
        self.on_revoke: RebalanceCallback | None = None
        self.on_lost: RebalanceCallback | None = None
        self._assigned_at = 0  # the metadata version when assign() was called
        self._found_at = -1  # the metadata version that had every assigned partition
        self._pattern: re.Pattern[str] | None = None  # subscribe(pattern)
        self._matched_at = -1  # the metadata version the pattern was last matched against
        self.closed = False
        self._delivered = 0  # records polls returned (stats())
        self.reporter = None
        self.unlocked: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        self._shared: threading.Lock | None = None  # the lock, once a thread shares it
        self.catch_up: Callable[[], None] | None = None
        self.after_revoke: Callable[[list[TopicPartition]], None] | None = None
        self.finalizer = weakref.finalize(self, loop.discard)  # never closed: stop the thread

    def start_thread(self) -> None:
        """Start the I/O thread (the sync front); from now on steps give the lock up for what
        runs without it."""
        self.unlocked = _Released(self.lock)
        self._shared = self.lock
        self.loop.start()

    # -- calls that never wait (each takes the lock) --------------------------------------------

    def assign(self, tps: list[TopicPartition]) -> None:
        """:meth:`ReadCommittedConsumer.assign <eosclient.ReadCommittedConsumer.assign>`, the
        partitions checked.

        Raises:
            IllegalStateError: subscribed, or closed; nothing changed.
        """
        with self.lock:
            self.check_open()
            if self.mode is Mode.SUBSCRIBE:
                raise IllegalStateError("assign() after subscribe(): use one or the other")
            self.mode = Mode.ASSIGN if tps else Mode.NONE
            self.assignment.replace(tps, committed=self.group is not None)
            self.metadata.want({tp.topic for tp in tps})
            self._assigned_at = self.metadata.version
            self._found_at = -1
            self.loop.wake()

    def subscribe(self, names: list[str], pattern: re.Pattern[str] | None,
                  on_assign: RebalanceCallback | None, on_revoke: RebalanceCallback | None,
                  on_lost: RebalanceCallback | None) -> None:
        """:meth:`ReadCommittedConsumer.subscribe <eosclient.ReadCommittedConsumer.subscribe>`:
        ``names``, or the topics ``pattern`` matches (then ``names`` is empty), checked.

        Raises:
            IllegalStateError: no ``group_id``, partitions were assign()ed, or closed.
        """
        group = self.need_group("subscribe()")
        with self.lock:
            self.check_open()
            if self.mode is Mode.ASSIGN:
                raise IllegalStateError("subscribe() after assign(): use one or the other")
            self.mode = Mode.SUBSCRIBE
            self.on_assign, self.on_revoke, self.on_lost = on_assign, on_revoke, on_lost
            self._pattern = pattern
            if pattern is not None:
                self._matched_at = -1
                self.metadata.want_all()
                self._match_pattern()
            else:
                self.metadata.want(names)
                group.membership.subscribe(names, time.monotonic())
            self.loop.wake()

    def assigned(self) -> list[TopicPartition]:
        """The partitions assigned now."""
        with self.lock:
            return list(self.assignment.states)

    def topic_metadata(self, names: list[str]) -> dict[str, TopicMetadata]:
        """What the latest Metadata answer said about each of ``names`` (checked)."""
        with self.lock:  # the I/O thread writes the metadata under it
            return {t: TopicMetadata(self.metadata.partition_count(t),
                                     self.metadata.last_error(t)) for t in names}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Deliver ``tp`` from ``offset`` (both checked) next.

        Raises:
            IllegalStateError: the partition is not assigned, or closed; nothing changed.
        """
        with self.lock:
            self.state(tp).seek(offset)
            self.loop.wake()

    def seek_to(self, tps: list[TopicPartition] | None, how: str) -> None:
        """Reset ``tps`` (all assigned if None) to ``"earliest"`` or ``"latest"``, lazily.

        Raises:
            IllegalStateError: a partition is not assigned, or closed; nothing changed.
        """
        with self.lock:
            states = list(self.assignment) if tps is None else [self.state(tp) for tp in tps]
            self.check_open()
            for state in states:
                state.reset(how)
            self.loop.wake()

    def set_paused(self, tps: list[TopicPartition], paused: bool) -> None:
        """Pause or resume ``tps``.

        Raises:
            IllegalStateError: a partition is not assigned, or closed; nothing changed.
        """
        with self.lock:
            states = [self.state(tp) for tp in tps]
            for state in states:
                state.paused = paused
            self.loop.wake()

    def paused(self) -> list[TopicPartition]:
        """The assigned partitions that are paused now."""
        with self.lock:
            return [tp for tp, state in self.assignment.states.items() if state.paused]

    def in_generation(self) -> bool:
        """:meth:`ReadCommittedConsumer.in_generation
        <eosclient.ReadCommittedConsumer.in_generation>`."""
        with self.lock:
            group = self.group
            return (self.mode is Mode.SUBSCRIBE and group is not None
                    and group.membership.in_generation(time.monotonic()))

    def group_metadata(self) -> ConsumerGroupMetadata:
        """:meth:`ReadCommittedConsumer.group_metadata
        <eosclient.ReadCommittedConsumer.group_metadata>`.

        Raises:
            IllegalStateError: no ``group_id``.
            RetriableError: subscribed, but not yet a member of the group (poll() first).
        """
        group = self.need_group("group_metadata()")
        with self.lock:
            if self.mode is not Mode.SUBSCRIBE:
                return ConsumerGroupMetadata(group.group_id)
            joined = group.membership.last_joined
        if joined is None:
            raise error_for(ApiKey.OFFSET_COMMIT, 27, "not yet a member of the group: poll() "
                            "until partitions are assigned")
        return ConsumerGroupMetadata(group.group_id, joined[0], joined[1],
                                     self.config.group_instance_id)

    def stats(self) -> ClientStats:
        """A snapshot of the consumer's counters and request timings."""
        with self.lock:
            return ClientStats(
                "consumer", self.config.client_id, records=self._delivered,
                batches=self.assignment.fed, queued_bytes=self.assignment.queued_bytes,
                rebalances=self.group.assignments if self.group is not None else 0,
                requests=self.loop.client.latency.snapshot())

    @property
    def state_name(self) -> str:
        """``closed``, or how partitions were given (``unset``, ``none``, ``assign``,
        ``subscribe``): what a front's ``repr`` shows."""
        return "closed" if self.closed else self.mode.name.lower()

    @property
    def subscribed(self) -> bool:
        """Whether the partitions are the group's (:meth:`subscribe`)."""
        return self.mode is Mode.SUBSCRIBE

    # -- checks and helpers (no lock taken: steps call them) ------------------------------------

    def check_open(self) -> None:
        """Raise if the consumer is closed or its I/O loop cannot go on.

        Raises:
            IllegalStateError: closed.
            EosError: as :meth:`IoLoop.check_alive
                <eosclient._consumer.loop.IoLoop.check_alive>`.
        """
        if self.closed:
            raise IllegalStateError("the consumer is closed")
        self.loop.check_alive()

    def need_group(self, call: str) -> GroupCoordinator:
        """The group coordinator.

        Raises:
            IllegalStateError: no ``group_id`` (``call`` needs one).
        """
        if self.group is None:
            raise IllegalStateError(f"{call} needs a group_id")
        return self.group

    def deadline(self, timeout: float | None) -> float:
        """When a call given ``timeout`` (None: ``default.api.timeout.ms``) gives up.

        Raises:
            TypeError, ValueError: not a number of seconds >= 0.
        """
        return time.monotonic() + args.timeout_of(timeout, self.config.default_api_timeout_ms)

    def state(self, tp: TopicPartition) -> PartitionState:
        """An assigned partition's state (under the lock).

        Raises:
            IllegalStateError: not assigned, or closed.
        """
        self.check_open()
        state = self.assignment.states.get(tp)
        if state is None:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return state

    def check_idle_end(self, idle: float) -> None:
        """``records()``' end after ``idle`` quiet seconds: quiet from a cluster never reached
        is not the end of the data.

        Raises:
            AllBrokersDownError: no broker was ever reached.
        """
        client = self.loop.client
        if not client.reached:
            raise client.unreached_error(idle)

    def positions(self) -> dict[TopicPartition, int]:
        """Every assigned partition's position (under the lock): commit()'s default offsets."""
        return {tp: s.position for tp, s in self.assignment.states.items()
                if s.position is not None}

    def rebalance_due(self) -> bool:
        """Whether a rebalance step is due on the application's side (under the lock)."""
        return self.group is not None and self.group.rebalance_due

    def rebalanced(self, group: GroupCoordinator) -> bool:
        """Whether the member is STABLE again (under the lock).

        Raises:
            IllegalStateError: closed.
            FencedError, FatalError: the membership failed.
        """
        self.check_open()
        group.membership.polled(time.monotonic())
        if group.membership.error is not None:
            raise group.membership.error.with_traceback(None)
        return group.membership.state is State.STABLE

    # -- steps ----------------------------------------------------------------------------------

    def poll(self, seconds: float, limit: int) -> Steps[list[ConsumerRecord]]:
        """Records (deserialized) as soon as there are some, or [] after ``seconds`` (checked);
        at most ``limit``.

        Raises:
            As :meth:`ReadCommittedConsumer.poll <eosclient.ReadCommittedConsumer.poll>`.
        """
        return self._poll(seconds, limit, self.assignment.drain, [])

    def poll_batch(self, seconds: float, limit: int,
                   ) -> Steps[dict[TopicPartition, RecordColumns]]:
        """:meth:`poll`'s records as columns per partition (not deserialized)."""
        return self._poll(seconds, limit, self.assignment.drain_columns, {})

    def _poll(self, seconds: float, limit: int,
              drain: Callable[[int], tuple[Out, list[Followup]]], empty: Out) -> Steps[Out]:
        if self.mode is Mode.UNSET and not self.closed:
            raise IllegalStateError("poll() before assign() or subscribe(): there is nothing "
                                    "to fetch, so it could only wait")
        deadline = time.monotonic() + seconds
        group = self.group
        while True:
            if group is not None and group.rebalance_due:
                yield from self.rebalance()
            if self.catch_up is not None:
                self.catch_up()
            fed = self._take_in()
            # Decoding, without the lock: the I/O thread goes on fetching meanwhile. (What
            # `unlocked` does, written out: this runs at every poll, and the context manager's
            # two Python calls cost an empty poll ~0.3 us, a tenth.)
            shared = self._shared
            if shared is not None:
                shared.release()
            try:
                records, followups = drain(limit)
                records, done = self._deserialize(records)
            finally:
                if shared is not None:
                    shared.acquire()
            error = self._settle(records, followups, fed, done)
            if records:
                return records
            if error is not None:
                raise error.with_traceback(None)
            if group is not None and group.rebalance_due:
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return empty
            yield Block(remaining)

    def rebalance(self) -> Steps[None]:
        """Run one rebalance step, if one is due: its callback (``on_revoke``, ``on_assign``,
        ``on_lost``) a :class:`~eosclient._net.steps.Call`, without the lock. The step is
        finished whatever the callback did (raised, or its task was cancelled), so the group
        stays consistent: revoked partitions are dropped and the member joins again.

        Raises:
            Whatever the callback raised, once the step is done.
        """
        group = self.group
        if group is None:
            return
        step = group.start_step(self.assignment)
        if step is None:
            return
        completed = False
        try:
            callback = step_callback(step, self.on_assign, self.on_revoke, self.on_lost)
            if callback is not None:
                with self.unlocked:  # the callback may call the consumer
                    yield Call(callback, (step.partitions,))
            completed = True
        finally:
            group.finish_step(self.loop, self.assignment, step, completed=completed)
            if step.revoking and self.after_revoke is not None:
                self.after_revoke(step.partitions)

    def position(self, tp: TopicPartition, timeout: float | None) -> Steps[int]:
        """The offset of the next record to deliver from ``tp`` (checked), waited for while it
        is looked up.

        Raises:
            IllegalStateError: the partition is not assigned, or the consumer is closed.
            KafkaTimeoutError: no position by ``timeout``.
            EosError: looking it up failed.
        """
        deadline = self.deadline(timeout)
        state = self.state(tp)
        yield from wait_until(self.loop,
                              lambda: state.position is not None or state.error is not None,
                              deadline, f"position({tp})", self._check_waiting,
                              unchanged=UNCHANGED)
        found = state.position
        if found is None:
            raise (state.error or IllegalStateError(f"{tp} lost")).with_traceback(None)
        return found

    def ends(self, tps: list[TopicPartition], timeout: float | None,
             ) -> Steps[dict[TopicPartition, Watermarks]]:
        """Where each of ``tps`` (checked) begins and ends now, asked of the leaders at once.

        Raises:
            KafkaTimeoutError: no answer by ``timeout``.
            EosError: a leader answered with an error.
            IllegalStateError: the consumer is closed.
        """
        deadline = self.deadline(timeout)
        self.check_open()
        if not tps:
            return {}
        return (yield from self.fetcher.ends(tps, self.loop, deadline, self.check_open))

    def committed(self, tps: list[TopicPartition], timeout: float | None,
                  ) -> Steps[dict[TopicPartition, int | None]]:
        """The group's committed offsets of ``tps`` (checked), read with ``require_stable``.

        Raises:
            As :meth:`ReadCommittedConsumer.committed
            <eosclient.ReadCommittedConsumer.committed>`.
        """
        group = self.need_group("committed()")
        deadline = self.deadline(timeout)
        self.check_open()
        result = yield from group.wait_for(group.committed(tps), self.loop, deadline,
                                           "committed()", self.check_open)
        return {tp: result.get(tp) for tp in tps}

    def close(self, deadline: float, leave_group: bool) -> Steps[bool]:
        """Revoke (``on_revoke``, a ``Call``; what it raises is logged), stop the reporter,
        leave the group (a static member only if ``leave_group``; waited for 5 s at most) and
        stop the loop; whether it closed now (False: closed already). The front then waits
        for the loop to end and detaches :attr:`finalizer`."""
        if self.closed:
            return False
        owned = list(self.assignment.states) if self.mode is Mode.SUBSCRIBE else []
        if owned and self.on_revoke is not None:
            try:
                with self.unlocked:
                    yield Call(self.on_revoke, (owned,))
            except Exception:  # closing always closes
                log.exception("on_revoke raised while closing")
        if self.reporter is not None:
            with self.unlocked:  # a stats thread's call may be waiting for the lock
                self.reporter.stop()
        self.closed = True
        group = self.group
        if group is not None and self.loop.crashed is None:
            yield from group.leave(self.loop, min(deadline, time.monotonic() + _LEAVE_WAIT),
                                   static_too=leave_group)
        self.loop.stop()
        return True

    def abandon(self) -> None:
        """Close a session whose loop never ran (an asyncio front never started): nothing to
        revoke or leave."""
        self.closed = True
        self.loop.stop()
        self.finalizer.detach()
        self.loop.client.close()

    # -- poll's own steps (under the lock) ------------------------------------------------------

    def _take_in(self) -> bool:
        """Raise what must be raised, take in answers (whether there were any)."""
        self.check_open()
        now = time.monotonic()
        if self.group is not None:
            self.group.membership.polled(now)
            if self.group.membership.error is not None:
                raise self.group.membership.error.with_traceback(None)
        self._check_topics()
        self._match_pattern()
        return self.assignment.feed_all(now, self.fetcher.backoff.initial)

    def _deserialize(self, records: Out) -> tuple[Out, Deserialized | None]:
        """The application's deserializers (on poll()'s records, not poll_batch()'s columns),
        without the lock."""
        cfg = self.config
        if not isinstance(records, list) or not records or not (cfg.key_deserializer
                                                                or cfg.value_deserializer):
            return records, None
        done = deserialize(records, cfg.key_deserializer, cfg.value_deserializer)
        return done.records, done

    def _settle(self, records: list[ConsumerRecord] | dict[TopicPartition, RecordColumns],
                followups: list[Followup], fed: bool,
                done: Deserialized | None) -> EosError | None:
        """Act on what draining and deserializing found; prefetch; count the records
        delivered; the error to raise if there are none."""
        error = self.assignment.settle(followups)
        if fed or followups:
            self.loop.wake()  # what was taken in or drained may be fetched again
        if done is not None and done.error is not None:
            self._rewind(done.rewind)
            error = error or done.error
        self._delivered += (len(records) if isinstance(records, list) else
                            sum(map(len, records.values())))
        return error

    def _rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Move each partition's position back to a record the application was not given (a
        deserializer failed on it)."""
        for tp, offset in offsets.items():
            state = self.assignment.states.get(tp)
            if state is not None:
                state.seek(offset)
        self.loop.wake()

    def _check_waiting(self) -> None:
        self.check_open()
        self._check_topics()

    def _check_topics(self) -> None:
        """Raise if the metadata, answered since assign(), says an assigned partition is not
        there (Java waits forever; a typo deserves an error). Asked once per metadata answer,
        not per poll: it reads every assigned partition."""
        version = self.metadata.version
        if (self.mode is Mode.ASSIGN and version > self._assigned_at
                and version != self._found_at):
            error = missing(self.assignment.states, self.metadata)
            if error is not None:
                raise error
            self._found_at = version

    def _match_pattern(self) -> None:
        """Subscribe to the topics the pattern matches in the newest all-topics metadata. The
        membership rejoins only if the set changed."""
        listed, version = self.metadata.all_topics, self.metadata.version
        if self._pattern is None or listed is None or version == self._matched_at:
            return
        self._matched_at = version
        matched = sorted(t for t in listed if self._pattern.fullmatch(t))
        if matched and self.group is not None:
            self.metadata.want(matched)
            self.group.membership.subscribe(matched, time.monotonic())
            self.loop.wake()

