"""The read_committed consumer: delivers exactly the committed records, on every broker.

Every Fetch answer runs through eosclient's CRC-checked decoder and the marker-first
read_committed filter (:mod:`eosclient._core.isolation`), per partition, with one
:class:`~eosclient._core.isolation.IndexTrust` per broker: right on brokers that send no
aborted-transactions index (Tansu), as fast as an index-only client where the broker has proved
its index (noida-db). Records at or past the last stable offset are never delivered, control
batches never, and a corrupt batch raises :class:`~eosclient.errors.CorruptRecordError` naming
the topic, partition and offset; it is never skipped.

Threading: the model of :mod:`eosclient.producer`. One I/O thread (:mod:`eosclient._consumer.loop`)
fetches, heartbeats and commits; every public call takes the lock it shares with that thread for
as long as it touches shared state. ``poll()`` decodes and filters on the caller's thread, the
heaviest part without that lock (the I/O thread keeps fetching meanwhile), and runs the
rebalance callbacks there, outside it, so they may call the consumer (commit in ``on_revoke``,
seek in ``on_assign``). Like Java's, a consumer is meant for one application thread: calls from
several are serialized by a second, re-entrant lock (a ``close()`` from another thread waits for
a ``poll()`` under way to return). Blocking calls take a timeout (default
``default.api.timeout.ms``) and raise :class:`~eosclient.errors.KafkaTimeoutError` when it passes.
"""

from __future__ import annotations

import enum
import logging
import re
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple, TypeVar

from eosclient._consumer import args
from eosclient._consumer.deserialize import Deserialized, deserialize
from eosclient._consumer.fetcher import Fetcher
from eosclient._consumer.lookups import Ends
from eosclient._consumer.loop import IoLoop, serialized
from eosclient._consumer.membership import MOVED_ON, State
from eosclient._consumer.offsets import OffsetJob
from eosclient._consumer.partitions import (
    Assignment,
    ConsumerRecord,
    Followup,
    PartitionState,
    missing,
)
from eosclient._core.decode import BinaryColumn, RecordColumns
from eosclient._core.isolation import Isolation
from eosclient._core.records import Deserializer
from eosclient._core.types import TopicPartition
from eosclient._net.client import NetworkClient
from eosclient._stats_reporter import LoopStatsReporter, StatsReporter
from eosclient.config import ConsumerConfig
from eosclient.errors import (
    AbortableError,
    ApiKey,
    CommitFailedError,
    EosError,
    IllegalStateError,
    KafkaTimeoutError,
    RetriableError,
    error_for,
)
from eosclient.group import GroupCoordinator, RebalanceCallback
from eosclient.group_metadata import ConsumerGroupMetadata
from eosclient.stats import ClientStats

__all__ = ["BinaryColumn", "ConsumerRecord", "ReadCommittedConsumer", "RecordColumns",
           "TopicMetadata"]

log = logging.getLogger("eosclient.consumer")

_LEAVE_WAIT = 5.0  # seconds close() waits for LeaveGroup at most

_Out = TypeVar("_Out", list[ConsumerRecord], dict[TopicPartition, RecordColumns])


class TopicMetadata(NamedTuple):
    """What the consumer's latest Metadata answer said about one topic (a snapshot).

    Attributes:
        partitions: How many partitions the topic has; None while no answer has named it.
        error: The error the latest answer gave for the topic (UNKNOWN_TOPIC_OR_PARTITION for
            one that does not exist), or None.
    """

    partitions: int | None
    error: EosError | None


class _Mode(enum.Enum):
    UNSET = "neither assign() nor subscribe() was called"
    NONE = "assign() with no partitions"
    ASSIGN = "assign(): partitions chosen by the application"
    SUBSCRIBE = "subscribe(): partitions given by the group"


class ReadCommittedConsumer:
    """A Kafka consumer that delivers exactly the committed records, in offset order.

    Give it partitions with :meth:`assign` (no group needed), or topics with :meth:`subscribe`
    (a consumer group: ``group_id``). Then :meth:`poll`; commit with :meth:`commit`, or inside a
    producer's transaction with ``send_offsets_to_transaction(positions, group_metadata())``.

    Args:
        bootstrap_servers: ``"host:port,host:port"`` or a list of ``"host:port"``.
        group_id: ``group.id``; needed by :meth:`subscribe`, :meth:`commit`, :meth:`committed`.
        group_instance_id: ``group.instance.id``: a static member (KIP-345). A consumer
            restarted with the same one within ``session.timeout.ms`` takes its predecessor's
            place (and partitions) at once, and the predecessor is fenced; :meth:`close` does
            not leave the group (as in Java), so its partitions wait for it that long.
        isolation_level: ``"read_committed"`` (default) or ``"read_uncommitted"``.
        auto_offset_reset: ``"earliest"``, ``"latest"`` (default: the LSO) or ``"none"``.
        client_id: ``client.id``.
        security_protocol: ``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL.
        ssl_context: An :class:`ssl.SSLContext` used as it is (instead of ``ssl.*`` keys).
        sasl_mechanism: ``sasl.mechanism``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.
        sasl_username: ``sasl.username``.
        sasl_password: ``sasl.password`` (kept as a :class:`~eosclient.config.Secret`).
            The other ``ssl.*``/``sasl.*`` settings go in ``config``; see docs/security.md.
        key_deserializer: Turns key bytes into what records carry (not called for a null
            key); default: bytes. If it raises, :meth:`poll` raises
            :class:`~eosclient.errors.DeserializationError` and the position stays at the record.
        value_deserializer: The same for values (not called for a tombstone).
        config: Any setting by Kafka's dotted key (``{"fetch.max.bytes": 52428800}``), or a
            whole :class:`~eosclient.config.ConsumerConfig` (then pass no other setting).

    Raises:
        ConfigError: an unknown key (named, with the nearest known one), a wrong type, a bad
            value, or one setting given twice with different values. Nothing was started.
    """

    _reporter: StatsReporter | LoopStatsReporter | None  # stats_cb's (thread or timer)

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
        self._setup(args.config_of(given, config))
        self._loop.start()
        self._finalizer = weakref.finalize(self, self._loop.stop)  # never closed: stop the thread
        cfg = self.config
        if cfg.stats_cb is not None:
            self._reporter = StatsReporter(cfg.statistics_interval_ms / 1000, self.stats,
                                           cfg.stats_cb, f"eosclient-stats-{cfg.client_id}")

    @classmethod
    def _unstarted(cls, config: ConsumerConfig) -> ReadCommittedConsumer:
        """A consumer whose I/O thread is never started: the asyncio front
        (:mod:`eosclient.aio`) runs its loop's turns from an event loop instead."""
        self = cls.__new__(cls)
        self._setup(config)
        self._finalizer = weakref.finalize(self, self._loop.stop)
        return self

    def _setup(self, config: ConsumerConfig) -> None:
        self.config = cfg = config
        client = NetworkClient(cfg, auto_create_topics=False)
        self._loop = loop = IoLoop(client, f"eosclient-consumer-{cfg.client_id}")
        self._lock, self._changed, self._metadata = loop.lock, loop.changed, client.metadata
        isolation = Isolation.READ_COMMITTED if cfg.read_committed else Isolation.READ_UNCOMMITTED
        self._assignment = Assignment(isolation, max_held_bytes=cfg.max_held_bytes,
                                      max_partition_bytes=cfg.max_partition_fetch_bytes,
                                      reset_policy=cfg.auto_offset_reset,
                                      max_batch_bytes=cfg.receive_message_max_bytes,
                                      check_crcs=cfg.check_crcs)
        self._fetcher = Fetcher(cfg, client, self._assignment)
        self._group = GroupCoordinator(cfg, client, self._assignment) if cfg.group_id else None
        loop.drivers = [*([self._group] if self._group else []), self._fetcher]
        self._mode = _Mode.UNSET
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._on_lost: RebalanceCallback | None = None
        self._assigned_at = 0  # the metadata version when assign() was called
        self._found_at = -1  # the metadata version that had every assigned partition
        self._pattern: re.Pattern[str] | None = None  # subscribe(pattern)
        self._matched_at = -1  # the metadata version the pattern was last matched against
        self._closed = False
        self._app_lock = threading.RLock()  # serializes the application's calls (see above)
        self._delivered = 0  # records poll() returned (stats())
        self._reporter = None  # started by __init__ (the sync front)

    # -- partitions -----------------------------------------------------------------------------

    @serialized
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (an empty list: none); no group membership.

        Kept partitions keep their positions; new ones start at their committed offset (with a
        ``group_id``) or where ``auto.offset.reset`` says.

        Raises:
            IllegalStateError: the consumer is subscribed, or closed; nothing changed.
            TypeError, ValueError: not an iterable of (topic, partition >= 0); nothing changed.
        """
        tps = args.partitions_of(partitions)
        with self._lock:
            self._check_open()
            if self._mode is _Mode.SUBSCRIBE:
                raise IllegalStateError("assign() after subscribe(): use one or the other")
            self._mode = _Mode.ASSIGN if tps else _Mode.NONE
            self._assignment.replace(tps, committed=self._group is not None)
            self._metadata.want({tp.topic for tp in tps})
            self._assigned_at = self._metadata.version
            self._found_at = -1
            self._loop.wake()

    @serialized
    def subscribe(self, topics: Iterable[str] | re.Pattern[str],
                  on_assign: RebalanceCallback | None = None,
                  on_revoke: RebalanceCallback | None = None,
                  on_lost: RebalanceCallback | None = None) -> None:
        """Join the group and consume the partitions it assigns of ``topics``.

        ``topics`` may be a compiled regular expression (``re.compile(r"orders-.*")``): the
        topics whose whole name it matches (internal topics left out), matched again on every
        metadata refresh (at least every ``metadata.max.age.ms``), so a topic created later
        joins the subscription (the member rejoins the group with it). The group is joined
        once the first match is found. A topic that stops matching (deleted) stays subscribed
        while another still matches.

        ``on_revoke(partitions)`` runs before partitions are given up (commit there what was
        processed), ``on_assign(partitions)`` after new ones are given; all on the thread
        that calls :meth:`poll`, inside it. ``on_lost(partitions)`` runs instead of
        ``on_revoke`` when the member lost its generation first (its session or poll interval
        ran out, e.g. the process was paused; or the coordinator said ILLEGAL_GENERATION or
        UNKNOWN_MEMBER_ID): the partitions may already be another member's, so committing for
        them is too late (KIP-429's ``onPartitionsLost``; abort a transaction there). Without
        ``on_lost``, ``on_revoke`` runs, as in Java.

        Raises:
            IllegalStateError: no ``group_id``, partitions were assign()ed, or closed.
            TypeError, ValueError: ``topics`` is not a non-empty iterable of str.
        """
        pattern = topics if isinstance(topics, re.Pattern) else None
        names = [] if pattern is not None else args.topics_of(topics)
        group = self._need_group("subscribe()")
        with self._lock:
            self._check_open()
            if self._mode is _Mode.ASSIGN:
                raise IllegalStateError("subscribe() after assign(): use one or the other")
            self._mode = _Mode.SUBSCRIBE
            self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
            self._pattern = pattern
            if pattern is not None:
                self._matched_at = -1
                self._metadata.want_all()
                self._match_pattern()
            else:
                self._metadata.want(names)
                group.membership.subscribe(names, time.monotonic())
            self._loop.wake()

    def assignment(self) -> list[TopicPartition]:
        """The partitions assigned now."""
        with self._lock:
            return list(self._assignment.states)

    def topic_metadata(self, topics: Iterable[str]) -> dict[str, TopicMetadata]:
        """What the latest Metadata answer said about each of ``topics``; asks no broker.

        Meant to explain a wait: an assignment or subscription that stays empty because a topic
        does not exist (``error`` is UNKNOWN_TOPIC_OR_PARTITION), or because no broker has
        answered at all (``partitions`` and ``error`` both None). Topics the consumer was never
        given (:meth:`assign`, :meth:`subscribe`) are not asked about: they stay unknown.

        Raises:
            TypeError: ``topics`` is not an iterable of topic names (a bare str is refused).
            ValueError: a name does not fit a Kafka STRING.
        """
        if isinstance(topics, Iterable) and not isinstance(topics, str | bytes):
            topics = list(topics)
            if not topics:
                return {}
        names = args.topics_of(topics)
        with self._lock:  # the I/O thread writes the metadata under it
            return {t: TopicMetadata(self._metadata.partition_count(t),
                                     self._metadata.last_error(t)) for t in names}

    # -- records --------------------------------------------------------------------------------

    def poll(self, timeout: float = 1.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Committed records (all records under read_uncommitted), in offset order per partition.

        Runs the rebalance callbacks when the group rebalances. Returns as soon as records are
        ready, or an empty list when ``timeout`` passes. Paused partitions deliver nothing.
        With a ``key_deserializer`` or ``value_deserializer``, records carry what they return.

        Raises:
            IllegalStateError: neither :meth:`assign` nor :meth:`subscribe` was called (the
                poll could only wait: Java raises too), or the consumer is closed. After
                ``assign([])`` it returns an empty list: owning no partitions for a while is a
                state a dynamic application may be in.
            DeserializationError: a deserializer raised, and no other record was ready; the
                partition's position stays at the record (every poll raises again until a
                seek past it).
            CorruptRecordError: a fetched batch failed its CRC or parse; the position stays at
                it, and every poll raises again until a seek past it.
            OffsetOutOfRangeError: a position is gone and ``auto.offset.reset`` is ``none``.
            RetriableError: an assigned topic or partition does not exist (after the metadata
                said so; UNKNOWN_TOPIC_OR_PARTITION).
            FatalError: the group failed (e.g. INCONSISTENT_GROUP_PROTOCOL), or a bug.
            Exception: whatever a rebalance callback raised, after the rebalance step was done.
        """
        return self._poll(timeout, max_records, self._assignment.drain, [])

    def poll_batch(self, timeout: float = 1.0, max_records: int | None = None,
                   ) -> dict[TopicPartition, RecordColumns]:
        """:meth:`poll`'s records as columns, one :class:`RecordColumns` per partition that has
        any: lists of offsets, keys, values, timestamps and headers, with no object per record
        (``RecordColumns.to_arrow()`` makes a ``pyarrow.RecordBatch``).

        Positions move exactly as with :meth:`poll` (the records returned count as delivered;
        ``next_offset`` of a partition's columns is what to commit after them), and the two
        may be mixed. Returns an empty dict when ``timeout`` passes. Raises as :meth:`poll`.
        The columns hold keys and values as stored: ``key_deserializer`` and
        ``value_deserializer`` apply to :meth:`poll`'s records only.
        """
        return self._poll(timeout, max_records, self._assignment.drain_columns, {})

    def _poll(self, timeout: float, max_records: int | None,
              drain: Callable[[int], tuple[_Out, list[Followup]]], empty: _Out) -> _Out:
        seconds = args.timeout_of(timeout, 0)
        limit = args.max_records_of(max_records, self.config.max_poll_records)
        self._check_polling()
        deadline = time.monotonic() + seconds
        with self._app_lock:
            while True:
                self._rebalance()
                with self._lock:
                    fed = self._take_in()
                records, followups = drain(limit)  # decoding: no lock held
                records, done = self._deserialize(records)
                with self._lock:
                    error = self._settle_poll(records, followups, fed, done)
                    if records:
                        return records
                    if error is not None:
                        raise error.with_traceback(None)
                    if self._rebalance_due():
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return empty
                    self._changed.wait(remaining)

    # poll()'s steps, shared with the asyncio front (eosclient.aio), which waits otherwise.

    def _check_polling(self) -> None:
        if self._mode is _Mode.UNSET and not self._closed:
            raise IllegalStateError("poll() before assign() or subscribe(): there is nothing "
                                    "to fetch, so it could only wait")

    def _deserialize(self, records: _Out) -> tuple[_Out, Deserialized | None]:
        """The application's deserializers (on poll()'s records, not poll_batch()'s columns):
        on its thread, no lock held."""
        cfg = self.config
        if not isinstance(records, list) or not records or not (cfg.key_deserializer
                                                                or cfg.value_deserializer):
            return records, None
        done = deserialize(records, cfg.key_deserializer, cfg.value_deserializer)
        return done.records, done

    def _settle_poll(self, records: list[ConsumerRecord] | dict[TopicPartition, RecordColumns],
                     followups: list[Followup], fed: bool,
                     done: Deserialized | None) -> EosError | None:
        """poll()'s last step, under the lock: act on what draining and deserializing found;
        count the records delivered; the error to raise if there are none."""
        error = self._settle(followups, fed)
        if done is not None and done.error is not None:
            self._rewind(done.rewind)
            error = error or done.error
        self._delivered += (len(records) if isinstance(records, list) else
                            sum(map(len, records.values())))
        return error

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """``for record in consumer``: :meth:`records` with no idle timeout (ends on ``break``,
        on an exception, or once the consumer is closed)."""
        return self.records()

    def records(self, idle_timeout: float | None = None, poll_timeout: float = 1.0,
                ) -> Iterator[ConsumerRecord]:
        """The records :meth:`poll` delivers, one at a time, for as long as the loop wants them.

        The iteration ends when the loop breaks, when ``idle_timeout`` seconds pass with no
        record (None: never), or when the consumer is closed (by the loop's body, say). It
        takes one record per poll, so the position (and a :meth:`commit` made inside the loop)
        never passes a record the loop has not seen; rebalance callbacks run inside it, as
        inside :meth:`poll`.

        Raises:
            Exception: whatever :meth:`poll` raises, at the record where it happened; the
                iteration ends.
            AllBrokersDownError: ``idle_timeout`` passed and no broker was ever reached (even
                with ``error_cb`` set): quiet is not the end of the data then.
        """
        idle = None if idle_timeout is None else args.timeout_of(idle_timeout, 0)
        wait = args.timeout_of(poll_timeout, 0)
        quiet_since = time.monotonic()
        while not self._closed:
            got = self.poll(wait if idle is None else min(wait, idle), max_records=1)
            if got:
                yield got[0]
                quiet_since = time.monotonic()
            elif idle is not None and time.monotonic() - quiet_since >= idle:
                self._check_idle_end(idle)
                return

    @serialized
    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching ``partitions`` and delivering their records (what was fetched waits
        for :meth:`resume`); their positions stay. The group membership is unaffected, and
        a partition given back in a rebalance and assigned again starts unpaused.

        Raises:
            IllegalStateError: a partition is not assigned, or closed; nothing changed.
            TypeError, ValueError: not an iterable of (topic, partition >= 0); nothing changed.
        """
        self._set_paused(partitions, True)

    @serialized
    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch and deliver ``partitions`` again after :meth:`pause`. Raises as :meth:`pause`."""
        self._set_paused(partitions, False)

    def paused(self) -> list[TopicPartition]:
        """The assigned partitions that are paused now."""
        with self._lock:
            return [tp for tp, state in self._assignment.states.items() if state.paused]

    # -- positions ------------------------------------------------------------------------------

    @serialized
    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record to deliver: the offset to commit. Waits while the
        partition's committed offset or reset offset is looked up.

        Raises:
            IllegalStateError: the partition is not assigned, or the consumer is closed.
            KafkaTimeoutError: no position within ``timeout``.
            EosError: looking it up failed (OffsetOutOfRangeError with ``auto.offset.reset``
                none and nothing committed).
        """
        tp = args.partition_of(partition)
        deadline = self._deadline(timeout)
        with self._lock:
            state = self._state(tp)
            self._loop.wait_until(lambda: state.position is not None or state.error is not None,
                                  deadline, f"position({tp})", self._check_waiting)
            found = state.position
            if found is None:
                raise (state.error or IllegalStateError(f"{tp} lost")).with_traceback(None)
            return found

    @serialized
    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Deliver from ``offset`` next (what was fetched or held for the partition is dropped).

        Raises:
            IllegalStateError: the partition is not assigned, or closed; nothing changed.
            TypeError, ValueError: the offset is not an int >= 0; nothing changed.
        """
        tp = args.partition_of(partition)
        checked = args.offset_of(offset, tp)
        with self._lock:
            self._state(tp).seek(checked)
            self._loop.wake()

    @serialized
    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Deliver from the log start of ``partitions`` (default: all assigned), looked up lazily.

        Raises:
            IllegalStateError: a partition is not assigned, or closed; nothing changed.
        """
        self._seek_to(partitions, "earliest")

    @serialized
    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Deliver from the end: the LSO under read_committed (an open transaction's records
        are delivered once it commits), else the high watermark. Looked up lazily.

        Raises:
            IllegalStateError: a partition is not assigned, or closed; nothing changed.
        """
        self._seek_to(partitions, "latest")

    def last_stable_offset(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The partition's last stable offset now (asked of its leader with a Fetch).

        Raises:
            KafkaTimeoutError: no answer within ``timeout``.
            EosError: the leader answered with an error (an unknown topic, for one).
            IllegalStateError: the consumer is closed.
        """
        return self._ends(partition, timeout).last_stable_offset

    def high_watermark(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The partition's high watermark now. Raises as :meth:`last_stable_offset`."""
        return self._ends(partition, timeout).high_watermark

    @serialized
    def lag(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """Records (and markers) between the position and the end: the LSO under
        read_committed, else the high watermark. Raises as :meth:`position`."""
        ends = self._ends(partition, timeout)
        end = ends.last_stable_offset if self.config.read_committed else ends.high_watermark
        return max(0, end - self.position(partition, timeout))

    # -- offsets --------------------------------------------------------------------------------

    def committed(self, partitions: Iterable[TopicPartition], timeout: float | None = None,
                  ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: nothing committed), read with
        ``require_stable``: while a transaction that commits them is open, this waits.

        Raises:
            IllegalStateError: no ``group_id``, or closed.
            KafkaTimeoutError: not answered within ``timeout`` (e.g. the transaction stays open).
            EosError: the coordinator refused (GROUP_AUTHORIZATION_FAILED, ...).
        """
        tps = args.partitions_of(partitions)
        group = self._need_group("committed()")
        deadline = self._deadline(timeout)
        with self._lock:
            self._check_open()
            result = group.wait_for(group.committed(tps), self._loop, deadline, "committed()",
                                    self._check_open)
        return {tp: result.get(tp) for tp in tps}

    @serialized
    def commit(self, offsets: Mapping[TopicPartition, int] | None = None,
               timeout: float | None = None) -> None:
        """Commit ``offsets`` (default: every assigned partition's position) for the group.

        For non-transactional use; inside a transaction use the producer's
        ``send_offsets_to_transaction(positions, consumer.group_metadata())``.

        A rebalance does not make it fail by itself. If the group is rebalancing (a member
        joined or left), the commit is first tried under the current generation (Kafka accepts
        it until the rebalance completes); if the coordinator has moved on, :meth:`commit`
        finishes the rebalance here, as :meth:`poll` would (``on_revoke`` and ``on_assign`` run
        on this thread), then commits the offsets of the partitions this member still owns and
        moves their positions there, so none of those records is delivered again.

        Raises:
            CommitFailedError: some partitions went to another member before their offsets
                could be committed (named in ``.partitions``); the others were committed. Go
                on polling: the new owner reads those records again.
            KafkaTimeoutError: not answered (or the rebalance not finished) within
                ``timeout``; it may still be committed.
            IllegalStateError: no ``group_id``, or closed.
            TypeError, ValueError: bad offsets; nothing was sent.
            FencedError, FatalError: the group failed (another member took this
                ``group.instance.id``, ...).
        """
        checked = None if offsets is None else args.offsets_of(offsets)
        group = self._need_group("commit()")
        deadline = self._deadline(timeout)
        with self._lock:
            self._check_open()
            if checked is None:
                checked = self._positions()
            if not checked:
                return
            if self._commit_now(group, checked):
                try:
                    group.wait_for(group.commit(checked), self._loop, deadline, "commit()",
                                   self._check_open)
                    return
                except (AbortableError, RetriableError) as exc:
                    if not self._moved_on(group, exc):
                        raise
        self._finish_rebalance(deadline)
        with self._lock:
            self._check_open()
            kept = self._still_owned(checked)
            if kept:
                group.wait_for(group.commit(kept), self._loop, deadline, "commit()",
                               self._check_open)
                self._skip_committed(kept)
        self._raise_lost(checked, kept)

    def _commit_start(self, offsets: Mapping[TopicPartition, int]) -> OffsetJob | None:
        """Start committing ``offsets`` under the current generation and return at once; the
        exactly-once processor's second, plain commit of a committed transaction's offsets,
        which it waits for (:meth:`_commit_finish`) only before it writes offsets again. No
        rebalance is finished: a subscribed member out of its generation sends nothing (None).
        """
        group = self._need_group("commit()")
        with self._lock:
            self._check_open()
            if self._mode is _Mode.SUBSCRIBE and not group.membership.has_generation():
                return None
            job = group.commit(args.offsets_of(offsets))
        self._loop.wake()
        return job

    def _commit_finish(self, job: OffsetJob, timeout: float | None = None) -> None:
        """Wait for a commit :meth:`_commit_start` began.

        Raises:
            KafkaTimeoutError: not answered within ``timeout``; it may still land.
            EosError: the coordinator refused it (classified as :meth:`commit` raises).
        """
        group = self._need_group("commit()")
        deadline = self._deadline(timeout)
        with self._lock:
            self._check_open()
            group.wait_for(job, self._loop, deadline, "commit()", self._check_open)

    # commit()'s decisions, shared with the asyncio front (eosclient.aio), which waits otherwise.

    def _positions(self) -> dict[TopicPartition, int]:
        """commit()'s default offsets: every assigned partition's position."""
        return {tp: s.position for tp, s in self._assignment.states.items()
                if s.position is not None}

    def _commit_now(self, group: GroupCoordinator, offsets: Mapping[TopicPartition, int],
                    ) -> bool:
        """Whether commit() tries under the current generation first (else it finishes the
        rebalance first).

        Raises:
            CommitFailedError: inside ``on_revoke`` after the generation was lost: too late.
        """
        grouped = self._mode is _Mode.SUBSCRIBE
        if grouped and group.in_callback and not group.membership.has_generation():
            raise _commit_failed(sorted(offsets), kept=False)  # on_revoke: too late
        return not grouped or group.membership.has_generation()

    def _moved_on(self, group: GroupCoordinator, exc: EosError) -> bool:
        """Whether a commit that failed with ``exc`` is retried after finishing the rebalance:
        22 ILLEGAL_GENERATION, 25 UNKNOWN_MEMBER_ID, 27 REBALANCE_IN_PROGRESS mean the group
        moved on; anything else (or a commit from inside on_revoke, which cannot rebalance
        again) is the caller's."""
        return self._mode is _Mode.SUBSCRIBE and exc.code in MOVED_ON and not group.in_callback

    def _still_owned(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return {tp: offset for tp, offset in offsets.items() if tp in self._assignment.states}

    def _skip_committed(self, kept: Mapping[TopicPartition, int]) -> None:
        """After the rebalance's commit: the committed records are not delivered again."""
        for tp, offset in kept.items():
            state = self._assignment.states.get(tp)
            if state is not None and (state.position or 0) < offset:
                state.seek(offset)  # processed already: not delivered again
        self._loop.wake()

    @staticmethod
    def _raise_lost(offsets: Mapping[TopicPartition, int],
                    kept: Mapping[TopicPartition, int]) -> None:
        lost = sorted(set(offsets) - set(kept))
        if lost:
            raise _commit_failed(lost, kept=bool(kept))

    def _finish_rebalance(self, deadline: float) -> None:
        """Run the rebalance steps (revoke, then assign, callbacks included) until the member is
        STABLE again, as :meth:`poll` would; the application's thread, no lock held.

        Raises:
            KafkaTimeoutError: the group did not finish rebalancing by ``deadline``.
            FencedError, FatalError: the membership failed.
            Whatever a rebalance callback raised.
        """
        group = self._need_group("commit()")
        while True:
            self._rebalance()
            with self._lock:
                if self._rebalanced(group):
                    return
                if self._rebalance_due():
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _still_rebalancing(group)
                self._changed.wait(remaining)

    def _rebalanced(self, group: GroupCoordinator) -> bool:
        """Whether the member is STABLE again (under the lock).

        Raises:
            FencedError, FatalError: the membership failed.
        """
        self._check_open()
        group.membership.polled(time.monotonic())
        if group.membership.error is not None:
            raise group.membership.error.with_traceback(None)
        return group.membership.state is State.STABLE

    def in_generation(self) -> bool:
        """Whether this member holds its group generation now: subscribed, joined, and neither
        ``session.timeout.ms`` since the coordinator last answered a heartbeat nor
        ``max.poll.interval.ms`` since the last :meth:`poll` has passed. Read from the clock,
        so it is False at once in a process resumed after a pause longer than the session,
        before the I/O thread has noticed. A transactional committer checks it just before
        committing: past it, the group may have given the partitions to another member.
        """
        with self._lock:
            group = self._group
            return (self._mode is _Mode.SUBSCRIBE and group is not None
                    and group.membership.in_generation(time.monotonic()))

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group, generation, member id and ``group.instance.id``, for
        ``send_offsets_to_transaction`` (KIP-447): the coordinator refuses the commit of a
        member whose generation has passed, or whose instance id another member now owns.

        A subscribed consumer always gets the generation of its last successful join, even
        after it lost it (a session or poll-interval timeout): a commit made with it then fails
        at the coordinator, which is the fence. A consumer that uses ``assign()`` gets the bare
        group id (no generation: nothing to fence).

        Raises:
            IllegalStateError: no ``group_id``.
            RetriableError: subscribed, but not yet a member of the group (poll() first).
        """
        group = self._need_group("group_metadata()")
        with self._lock:
            if self._mode is not _Mode.SUBSCRIBE:
                return ConsumerGroupMetadata(group.group_id)
            joined = group.membership.last_joined
        if joined is None:
            raise error_for(ApiKey.OFFSET_COMMIT, 27, "not yet a member of the group: poll() "
                            "until partitions are assigned")
        return ConsumerGroupMetadata(group.group_id, joined[0], joined[1],
                                     self.config.group_instance_id)

    def stats(self) -> ClientStats:
        """A snapshot of this consumer's counters and request timings (see
        :mod:`eosclient.stats`); cheap, never blocks on the network. Works after close()."""
        with self._lock:
            return ClientStats(
                "consumer", self.config.client_id, records=self._delivered,
                batches=self._assignment.fed,
                rebalances=self._group.assignments if self._group is not None else 0,
                requests=self._loop.client.latency.snapshot())

    # -- lifecycle ------------------------------------------------------------------------------

    @serialized
    def close(self, timeout: float | None = None, *, leave_group: bool = False) -> None:
        """Revoke (``on_revoke``), leave the group, close the connections. Idempotent; errors
        on the way are logged, not raised: closing always closes.

        Args:
            timeout: Seconds for all of it (``default.api.timeout.ms`` if None); the LeaveGroup
                is waited for 5 s at most.
            leave_group: Whether a static member (``group.instance.id``) leaves too. By
                default it does not: it keeps its place, and its partitions, for
                ``session.timeout.ms``, for a restart to take over (KIP-345). True for a member
                that will not come back (scaled down), or that learnt it was replaced (a
                fenced producer of the same instance). It leaves under its member id alone,
                so a coordinator removes that member and no other. A dynamic member always
                leaves.
        """
        deadline = self._deadline(timeout)
        with self._lock:
            if self._closed:
                return
            owned = list(self._assignment.states) if self._mode is _Mode.SUBSCRIBE else []
        if owned and self._on_revoke is not None:
            try:
                self._on_revoke(owned)
            except Exception:  # closing always closes
                log.exception("on_revoke raised while closing")
        if self._reporter is not None:
            self._reporter.stop()
        with self._lock:
            self._closed = True
            if self._group is not None and self._loop.crashed is None:
                self._group.leave(self._loop, min(deadline, time.monotonic() + _LEAVE_WAIT),
                                  static_too=leave_group)
            self._loop.stop()
        self._loop.join(max(0.1, deadline - time.monotonic()))
        self._finalizer.detach()

    def __enter__(self) -> ReadCommittedConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else self._mode.name.lower()
        return f"<ReadCommittedConsumer group_id={self.config.group_id!r} {state}>"

    # -- internals ------------------------------------------------------------------------------

    def _check_idle_end(self, idle: float) -> None:
        """records()' end after ``idle`` quiet seconds, shared with the asyncio front: quiet
        from a cluster never reached is not the end of the data.

        Raises:
            AllBrokersDownError: no broker was ever reached.
        """
        client = self._loop.client
        if not client.reached:
            raise client.unreached_error(idle)

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        self._loop.check_alive()

    def _need_group(self, call: str) -> GroupCoordinator:
        if self._group is None:
            raise IllegalStateError(f"{call} needs a group_id")
        return self._group

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + args.timeout_of(timeout, self.config.default_api_timeout_ms)

    def _state(self, tp: TopicPartition) -> PartitionState:
        self._check_open()
        state = self._assignment.states.get(tp)
        if state is None:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return state

    def _check_waiting(self) -> None:
        self._check_open()
        self._check_topics()

    def _take_in(self) -> bool:
        """poll()'s first step, under the lock: raise what must be raised, take in answers
        (whether there were any)."""
        self._check_open()
        now = time.monotonic()
        if self._group is not None:
            self._group.membership.polled(now)
            if self._group.membership.error is not None:
                raise self._group.membership.error.with_traceback(None)
        self._check_topics()
        self._match_pattern()
        return self._assignment.feed_all(now, self._fetcher.backoff.initial)

    def _settle(self, followups: list[Followup], fed: bool) -> EosError | None:
        """poll()'s last step, under the lock: act on what draining found; prefetch."""
        error = self._assignment.settle(followups)
        if fed or followups:
            self._loop.wake()  # what was taken in or drained may be fetched again
        return error

    def _check_topics(self) -> None:
        """Raise if the metadata, answered since assign(), says an assigned partition is not
        there (Java waits forever; a typo deserves an error). Asked once per metadata answer,
        not per poll: it reads every assigned partition."""
        version = self._metadata.version
        if (self._mode is _Mode.ASSIGN and version > self._assigned_at
                and version != self._found_at):
            error = missing(self._assignment.states, self._metadata)
            if error is not None:
                raise error
            self._found_at = version

    def _match_pattern(self) -> None:
        """Subscribe to the topics the pattern matches in the newest all-topics metadata;
        under the lock. The membership rejoins only if the set changed."""
        listed, version = self._metadata.all_topics, self._metadata.version
        if self._pattern is None or listed is None or version == self._matched_at:
            return
        self._matched_at = version
        matched = sorted(t for t in listed if self._pattern.fullmatch(t))
        if matched and self._group is not None:
            self._metadata.want(matched)
            self._group.membership.subscribe(matched, time.monotonic())
            self._loop.wake()

    def _rebalance_due(self) -> bool:
        return self._group is not None and self._group.rebalance_due

    def _rebalance(self) -> None:
        if self._group is not None:  # without a group, poll() spares itself a lock round
            self._group.run_rebalance(self._loop, self._assignment, self._on_assign,
                                      self._on_revoke, self._on_lost)

    def _seek_to(self, partitions: Iterable[TopicPartition] | None, how: str) -> None:
        tps = None if partitions is None else args.partitions_of(partitions)
        with self._lock:
            states = list(self._assignment) if tps is None else [self._state(tp) for tp in tps]
            self._check_open()
            for state in states:
                state.reset(how)
            self._loop.wake()

    def _set_paused(self, partitions: Iterable[TopicPartition], paused: bool) -> None:
        tps = args.partitions_of(partitions)
        with self._lock:
            states = [self._state(tp) for tp in tps]
            for state in states:
                state.paused = paused
            self._loop.wake()

    def _rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Move each partition's position back to a record the application was not given (a
        deserializer failed on it); under the lock."""
        for tp, offset in offsets.items():
            state = self._assignment.states.get(tp)
            if state is not None:
                state.seek(offset)
        self._loop.wake()

    def _ends(self, partition: TopicPartition, timeout: float | None) -> Ends:
        tp = args.partition_of(partition)
        deadline = self._deadline(timeout)
        with self._lock:
            self._check_open()
            return self._fetcher.ends(tp, self._loop, deadline, self._check_open)


def _still_rebalancing(group: GroupCoordinator) -> KafkaTimeoutError:
    return KafkaTimeoutError(f"commit(): group {group.group_id!r} still rebalancing "
                             f"({group.membership.state.name}) when the timeout passed",
                             api=ApiKey.OFFSET_COMMIT)


def _commit_failed(lost: list[TopicPartition], *, kept: bool) -> CommitFailedError:
    names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in lost)
    return CommitFailedError(
        f"a rebalance gave {names} to another member (or is giving them) before their offsets "
        "were committed; their next owner reads them again from the last commit"
        + (" (the offsets of the partitions this member kept were committed)" if kept else ""),
        partitions=lost)
