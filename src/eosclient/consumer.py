"""The read_committed consumer: delivers exactly the committed records, on every broker.

Every Fetch answer runs through eosclient's CRC-checked decoder and the marker-first
read_committed filter (:mod:`eosclient._core.isolation`), per partition, with one
:class:`~eosclient._core.isolation.IndexTrust` per broker: right on brokers that send no
aborted-transactions index (Tansu), as fast as an index-only client where the broker has proved
its index (noida-db). Records at or past the last stable offset are never delivered, control
batches never, and a corrupt batch raises :class:`~eosclient.errors.CorruptRecordError` naming
the topic, partition and offset; it is never skipped.

Shape: this class is a front. What a consumer is and decides (partitions, group, fetcher, the
poll, commit and rebalance steps) is a :class:`~eosclient._consumer.session.ConsumerSession`,
shared with the asyncio front (:mod:`eosclient.aio.consumer`); here the arguments are checked
and the session's steps carried out on the caller's thread
(:func:`~eosclient._net.steps.drive`).

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

import re
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Generic, Self, TypeVar, cast

from eosclient._consumer import args
from eosclient._consumer import commit as committing
from eosclient._consumer.lookups import Watermarks
from eosclient._consumer.loop import serialized
from eosclient._consumer.offsets import OffsetJob
from eosclient._consumer.partitions import ConsumerRecord
from eosclient._consumer.session import ConsumerSession, TopicMetadata
from eosclient._core.decode import BinaryColumn, RecordColumns
from eosclient._core.records import KeyT, ValueT
from eosclient._core.types import TopicPartition
from eosclient._net.steps import Steps, drive
from eosclient._stats_reporter import StatsReporter
from eosclient.config import ConsumerConfig, build
from eosclient.group import RebalanceCallback
from eosclient.group_metadata import ConsumerGroupMetadata
from eosclient.stats import ClientStats

__all__ = ["BinaryColumn", "ConsumerRecord", "ReadCommittedConsumer", "RecordColumns",
           "TopicMetadata", "Watermarks"]

_T = TypeVar("_T")


class ReadCommittedConsumer(Generic[KeyT, ValueT]):
    """A Kafka consumer that delivers exactly the committed records, in offset order.

    Generic in its records' key and value types, which type checkers infer from
    ``key_deserializer`` and ``value_deserializer`` (``bytes`` without one): with
    ``value_deserializer=json.loads``, :meth:`poll` returns ``list[ConsumerRecord[bytes, Any]]``.
    Deserializers given in ``config`` are not seen by the type checker; annotate the
    consumer then (``consumer: ReadCommittedConsumer[str, Any] = ReadCommittedConsumer(...)``).

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
        self.config = cfg = build(ConsumerConfig, given, config)
        self._session = session = ConsumerSession(cfg)
        self._lock = session.lock
        self._app_lock = threading.RLock()  # serializes the application's calls (see above)
        session.start_thread()
        if cfg.stats_cb is not None:
            session.reporter = StatsReporter(cfg.statistics_interval_ms / 1000, self.stats,
                                             cfg.stats_cb, f"eosclient-stats-{cfg.client_id}")

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
        self._session.assign(args.partitions_of(partitions))

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
        self._session.subscribe(names, pattern, on_assign, on_revoke, on_lost)

    def assignment(self) -> list[TopicPartition]:
        """The partitions assigned now."""
        return self._session.assigned()

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
        return self._session.topic_metadata(args.topics_of(topics))

    # -- records --------------------------------------------------------------------------------

    def poll(self, timeout: float = 1.0, max_records: int | None = None,
             ) -> list[ConsumerRecord[KeyT, ValueT]]:
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
        steps = self._session.poll(args.timeout_of(timeout, 0),
                                   args.max_records_of(max_records, self.config.max_poll_records))
        with self._app_lock, self._lock:
            # The session applied the deserializers (ConsumerSession.poll): the records carry
            # what they return, which is what KeyT and ValueT are bound to.
            return cast("list[ConsumerRecord[KeyT, ValueT]]", drive(steps, self._session.loop))

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
        steps = self._session.poll_batch(
            args.timeout_of(timeout, 0), args.max_records_of(max_records,
                                                             self.config.max_poll_records))
        with self._app_lock, self._lock:
            return drive(steps, self._session.loop)

    def __iter__(self) -> Iterator[ConsumerRecord[KeyT, ValueT]]:
        """``for record in consumer``: :meth:`records` with no idle timeout (ends on ``break``,
        on an exception, or once the consumer is closed)."""
        return self.records()

    def records(self, idle_timeout: float | None = None, poll_timeout: float = 1.0,
                ) -> Iterator[ConsumerRecord[KeyT, ValueT]]:
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
        session = self._session
        while not session.closed:
            got = self.poll(wait if idle is None else min(wait, idle), max_records=1)
            if got:
                yield got[0]
                quiet_since = time.monotonic()
            elif idle is not None and time.monotonic() - quiet_since >= idle:
                session.check_idle_end(idle)
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
        self._session.set_paused(args.partitions_of(partitions), True)

    @serialized
    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch and deliver ``partitions`` again after :meth:`pause`. Raises as :meth:`pause`."""
        self._session.set_paused(args.partitions_of(partitions), False)

    def paused(self) -> list[TopicPartition]:
        """The assigned partitions that are paused now."""
        return self._session.paused()

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
        return self._run(self._session.position(args.partition_of(partition), timeout))

    @serialized
    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Deliver from ``offset`` next (what was fetched or held for the partition is dropped).

        Raises:
            IllegalStateError: the partition is not assigned, or closed; nothing changed.
            TypeError, ValueError: the offset is not an int >= 0; nothing changed.
        """
        tp = args.partition_of(partition)
        self._session.seek(tp, args.offset_of(offset, tp))

    @serialized
    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Deliver from the log start of ``partitions`` (default: all assigned), looked up lazily.

        Raises:
            IllegalStateError: a partition is not assigned, or closed; nothing changed.
        """
        self._session.seek_to(_partitions(partitions), "earliest")

    @serialized
    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Deliver from the end: the LSO under read_committed (an open transaction's records
        are delivered once it commits), else the high watermark. Looked up lazily.

        Raises:
            IllegalStateError: a partition is not assigned, or closed; nothing changed.
        """
        self._session.seek_to(_partitions(partitions), "latest")

    def watermarks(self, partitions: Iterable[TopicPartition], timeout: float | None = None,
                   ) -> dict[TopicPartition, Watermarks]:
        """Where each partition begins and ends now: its log start offset, high watermark and
        last stable offset, asked of every leader at once (one request per leader, however
        many partitions), so the cost of a thousand partitions is a round trip, not a
        thousand. The partitions need not be assigned.

        Raises:
            KafkaTimeoutError: no answer for every partition within ``timeout``.
            EosError: a leader answered with an error (an unknown topic, for one).
            IllegalStateError: the consumer is closed.
        """
        return self._run(self._session.ends(args.partitions_of(partitions), timeout))

    def last_stable_offset(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The partition's last stable offset now (asked of its leader with a Fetch; for
        many partitions, :meth:`watermarks` asks once). Raises as :meth:`watermarks`."""
        tp = args.partition_of(partition)
        return self._run(self._session.ends([tp], timeout))[tp].last_stable_offset

    def high_watermark(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The partition's high watermark now. Raises as :meth:`watermarks`."""
        tp = args.partition_of(partition)
        return self._run(self._session.ends([tp], timeout))[tp].high_watermark

    @serialized
    def lag(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """Records (and markers) between the position and the end: the LSO under
        read_committed, else the high watermark. Raises as :meth:`position`."""
        tp = args.partition_of(partition)
        ends = self._run(self._session.ends([tp], timeout))[tp]
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
        return self._run(self._session.committed(args.partitions_of(partitions), timeout))

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
        self._run(committing.commit(self._session, checked, timeout))

    def start_commit(self, offsets: Mapping[TopicPartition, int]) -> OffsetJob | None:
        """For the exactly-once processor (not part of the public API): start committing
        ``offsets`` under the current generation and return at once; its second, plain commit
        of a committed transaction's offsets, which it waits for (:meth:`finish_commit`) only
        before it writes offsets again. No rebalance is finished: a subscribed member out of
        its generation sends nothing (None).

        Raises:
            IllegalStateError: no ``group_id``, or closed.
            TypeError, ValueError: bad offsets; nothing was sent.
        """
        return committing.commit_start(self._session, offsets)

    def finish_commit(self, job: OffsetJob, timeout: float | None = None) -> None:
        """For the exactly-once processor: wait for a commit :meth:`start_commit` began.

        Raises:
            KafkaTimeoutError: not answered within ``timeout``; it may still land.
            EosError: the coordinator refused it (classified as :meth:`commit` raises).
        """
        self._run(committing.commit_finish(self._session, job, timeout))

    def in_generation(self) -> bool:
        """Whether this member holds its group generation now: subscribed, joined, and neither
        ``session.timeout.ms`` since the coordinator last answered a heartbeat nor
        ``max.poll.interval.ms`` since the last :meth:`poll` has passed. Read from the clock,
        so it is False at once in a process resumed after a pause longer than the session,
        before the I/O thread has noticed. A transactional committer checks it just before
        committing: past it, the group may have given the partitions to another member.
        """
        return self._session.in_generation()

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
        return self._session.group_metadata()

    def stats(self) -> ClientStats:
        """A snapshot of this consumer's counters and request timings (see
        :mod:`eosclient.stats`); cheap, never blocks on the network. Works after close()."""
        return self._session.stats()

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
        session = self._session
        deadline = session.deadline(timeout)
        with self._lock:
            closed_now = drive(session.close(deadline, leave_group), session.loop)
        if closed_now:
            session.loop.join(max(0.1, deadline - time.monotonic()))
            session.finalizer.detach()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<ReadCommittedConsumer group_id={self.config.group_id!r} "
                f"{self._session.state_name}>")

    # -- internals ------------------------------------------------------------------------------

    def _run(self, steps: Steps[_T]) -> _T:
        """Carry an operation's steps out on this thread, under the loop's lock (given up
        inside for callbacks)."""
        with self._lock:
            return drive(steps, self._session.loop)


def _partitions(partitions: Iterable[TopicPartition] | None) -> list[TopicPartition] | None:
    return None if partitions is None else args.partitions_of(partitions)
