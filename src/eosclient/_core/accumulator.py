"""Records -> per-partition batches -> encoded record batches (v2), sans-IO.

Theory of operation
-------------------
``append`` checks a record (type, size: see :mod:`eosclient._core.records`) and encodes it at
once into the open batch of its partition (:mod:`eosclient._core.encoder`), so that encoding cost
is spread over the appends; ``append_record`` is the same without the checks, for a caller that
made them (the producer's ``send()``), and ``appender`` hands out the newest batch's own append
for a caller that sends many records to one partition (``send()``'s shortcut; a batch no longer
open refuses records through it). A batch is *closed* when it refuses the next record
(``batch.size``) or a newer batch follows it; it is *ready* when closed, when its ``linger.ms``
has passed, or when the caller flushes. A batch's records share one outcome
(:mod:`eosclient._core.delivery`): settling a batch is one change however many records it holds,
and :meth:`RecordAccumulator.take_settled` lists the outcomes that changed.

Every batch belongs to one *transaction generation*, an int the caller passes with each append
(the producer counts its transactions). A record is never added to a batch of another generation,
so aborting a transaction can drop exactly its records: :meth:`RecordAccumulator.fail_generation`
fails every unsent batch of that generation (and older ones) and refuses later appends to them.
This is the KIP-360 rule that kafka-python 3.0.12 breaks: a record of an aborted transaction must
never be drained into a later one, where it would commit under the new epoch. For the same
reason a partition's batches of a newer generation wait until its batches of an older one are no
longer in flight.

``drain`` hands out at most one batch per partition (Produce v3+ accepts exactly one record batch
per partition per request), resends first, and within ``max_bytes``. It asks a :class:`DrainGate`
(the transaction core, wrapped by the I/O layer with leader and backoff checks) about every
batch: a new batch goes only if ``may_drain(tp, generation)`` allows *its* generation, so a batch
of a failed transaction stays put even if ``fail_generation`` has not been applied yet; a resend
goes only if ``may_resend(tp)`` allows (also while aborting: EndTxn must follow it). A new batch
gets its sequences from :class:`~eosclient._core.sequences.SequenceTracker` only here, at drain
time, and is encoded then with the producer id, epoch, base sequence and transactional flag; a
resend reuses those exact bytes.

``complete`` feeds a partition's Produce answer back and settles the batch's outcome; ``expire``
gives up on batches whose ``delivery.timeout.ms`` passed; ``reset_identity`` follows an epoch
bump. Nothing here reads a clock: ``now`` (seconds, monotonic) is passed in, and record
timestamps (``timestamp_ms``, wall clock) are the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from eosclient._core.batches import (
    AccumulatorSettings,
    BufferBudget,
    PartitionQueues,
    ProducerBatch,
    ReadyBatch,
)
from eosclient._core.delivery import BatchOutcome, DeliveryHandle, RecordDelivery
from eosclient._core.encoder import Header
from eosclient._core.partitioner import StickyPartitions, default_partitioner
from eosclient._core.records import (
    Record,
    RecordChecker,
    check_timestamp,
    compression_for,
)
from eosclient._core.sequences import Acked, Failed, Outcome, SequenceTracker
from eosclient._core.types import NO_IDENTITY, ProducerIdentity, TopicPartition
from eosclient.errors import AbortableError, EosError, KafkaTimeoutError

__all__ = [
    "AccumulatorSettings",
    "Appender",
    "DrainGate",
    "Expiry",
    "ProducerBatch",
    "ReadyBatch",
    "RecordAccumulator",
]

_NO_TIMESTAMP = -1

Appender = tuple[Callable[[int, bytes | None, bytes | None, Sequence[Header]], int], BatchOutcome]
"""What :meth:`RecordAccumulator.appender` hands out: a batch's ``add`` and its outcome."""


class DrainGate(Protocol):
    """What :meth:`RecordAccumulator.drain` asks before taking a batch (the transaction core
    answers both; the I/O layer adds its own checks: leader, node, retry backoff)."""

    def may_drain(self, tp: TopicPartition, generation: int) -> bool:
        """Whether a new batch of ``tp`` appended in ``generation`` may be sent now."""

    def may_resend(self, tp: TopicPartition) -> bool:
        """Whether a batch of ``tp`` due for a resend may be sent again now."""


class Expiry(NamedTuple):
    """A batch given up because its ``delivery.timeout.ms`` passed.

    Attributes:
        error: What its records failed with: :class:`KafkaTimeoutError` if it was never sent,
            :class:`EpochBumpRequiredError` if it was in flight (outcome unknown).
        identity: The producer identity it was sent under (never sent: the one it would have
            been sent under).
        generation: The transaction generation its records were appended in.
    """

    error: EosError
    identity: ProducerIdentity
    generation: int


class RecordAccumulator:
    """Per-partition batches of one producer, with their sequences.

    Args:
        settings: Batching, limits, codec, serializers and partitioner.
        identity: The producer identity, if already known; until :meth:`reset_identity`
            gives one, records queue up but nothing drains.
        sticky: Keyless partition choice (a seeded one makes tests reproducible).

    Attributes:
        append_record: ``append_record(tp, timestamp_ms, key, value, headers, now,
            generation) -> (outcome, offset delta)``: queue one record that was checked
            already (:meth:`prepare`: bytes or None key and value, checked headers, an int
            timestamp), in ``generation``, at monotonic time ``now``. Returns the outcome of
            its batch, shared with the batch's other records, and the record's offset delta
            there; the outcome has already failed if ``generation`` was failed before (then
            the record is in no batch, nor in :meth:`take_settled`). It is
            :meth:`PartitionQueues.append` itself: ``send()`` pays for one call, not two.

    Raises:
        ConfigError: a setting is out of range or its codec is not installed.
    """

    def __init__(
        self,
        settings: AccumulatorSettings | None = None,
        *,
        identity: ProducerIdentity = NO_IDENTITY,
        sticky: StickyPartitions | None = None,
    ) -> None:
        self._settings = settings = settings if settings is not None else AccumulatorSettings()
        self._checker = RecordChecker(
            key_serializer=settings.key_serializer,
            value_serializer=settings.value_serializer,
            max_request_size=settings.max_request_size,
        )
        self._sequences: SequenceTracker[ProducerBatch] = SequenceTracker(
            identity, max_in_flight=settings.max_in_flight
        )
        self._sticky = sticky if sticky is not None else StickyPartitions()
        self._keyless_sticky = settings.partitioner is default_partitioner
        self._settled: list[BatchOutcome] = []
        #: ``buffer.memory``: read ``budget.full`` before appending (the producer waits).
        self.budget = BufferBudget(settings.buffer_memory)
        self._queues = PartitionQueues(
            settings, compression_for(settings.compression_type),
            on_filled=lambda tp: self._sticky.batch_filled(tp.topic, tp.partition),
            sink=self._settled, budget=self.budget,
        )
        # The send() hot path is a single call, to the queues' own append: see the class doc.
        self.append_record = self._queues.append
        self._drain_start = 0

    @property
    def settings(self) -> AccumulatorSettings:
        """The settings it was built with."""
        return self._settings

    @property
    def sticky(self) -> StickyPartitions:
        """The keyless partition choice (KIP-480) :meth:`choose_partition` falls back to."""
        return self._sticky

    @property
    def sequences(self) -> SequenceTracker[ProducerBatch]:
        """The sequence tracker (read it; change it only through this accumulator)."""
        return self._sequences

    # -- partitioning ----------------------------------------------------------------------

    def choose_partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        """The partition for a record of ``topic`` with the serialized ``key``.

        The configured partitioner decides; where it answers None (the default does for a
        keyless record), the topic's sticky partition (KIP-480) is used.
        """
        if key is None and self._keyless_sticky:  # the hot path: skip a call answering None
            return self._sticky.current(topic, num_partitions)
        chosen = self._settings.partitioner(topic, key, num_partitions)
        if chosen is None:
            return self._sticky.current(topic, num_partitions)
        if not 0 <= chosen < num_partitions:
            raise ValueError(f"the partitioner chose {chosen} of {num_partitions} partitions")
        return chosen

    # -- appending -------------------------------------------------------------------------

    def prepare(
        self,
        key: object,
        value: object,
        headers: Sequence[tuple[str, Any]] | None = None,
        *,
        timestamp_ms: int,
    ) -> Record:
        """Check and serialize a record; its key then picks the partition.

        Args:
            key: bytes-like or None, or anything the key serializer takes.
            value: bytes-like or None, or anything the value serializer takes.
            headers: ``(str, bytes | None)`` pairs.
            timestamp_ms: CreateTime, wall-clock milliseconds (the caller's clock).

        Raises:
            RecordTypeError: a key, value, header or timestamp has a wrong type.
            RecordTooLargeError: the record exceeds ``max.request.size``.
        """
        return self._checker.one(key, value, headers, timestamp_ms)

    def append(
        self,
        tp: TopicPartition,
        key: object,
        value: object,
        headers: Sequence[tuple[str, Any]] | None = None,
        *,
        timestamp_ms: int,
        now: float,
        generation: int,
    ) -> RecordDelivery:
        """:meth:`prepare` then :meth:`append_record`: a bad record changes nothing.

        Returns:
            The record's place in its batch, readable as a handle.
        """
        record = self._checker.one(key, value, headers, timestamp_ms)
        outcome, delta = self._queues.append(tp, record.timestamp_ms, record.key, record.value,
                                             record.headers, now, generation)
        return RecordDelivery(outcome, delta, record.timestamp_ms)

    def appender(self, tp: TopicPartition, generation: int) -> Appender | None:
        """What appends more records of ``generation`` to ``tp``'s newest batch, the one
        :attr:`append_record` would try first; None if there is none, or it takes no more.

        Returns:
            ``(add, outcome)``: ``add(timestamp_ms, key, value, headers)`` appends one checked
            record (as :attr:`append_record` takes it) and answers its offset delta in the
            batch, or -1 (nothing changed: append it the usual way) if it does not fit, and for
            good once the batch is closed, drained, failed or expired; ``outcome`` is the
            batch's, shared by its records. Nothing else is checked: the caller keeps it only
            while the generation is open and ``tp`` is where its records go.
        """
        batch = self._queues.open_batch(tp, generation)
        return None if batch is None else (batch.writer.add, batch.outcome)

    def append_many(
        self,
        tp: TopicPartition,
        values: Sequence[object],
        keys: Sequence[object] | None = None,
        *,
        timestamp_ms: int,
        now: float,
        generation: int,
        handle: DeliveryHandle | None = None,
        checked: bool = False,
        headers: Sequence[Sequence[tuple[str, Any]] | None] | None = None,
    ) -> DeliveryHandle:
        """Queue many records of one partition under one handle (the ``send_batch`` path).

        All records are checked before any is queued. To spread one ``send_batch`` over
        several partitions, group its records by partition and pass the same ``handle`` to
        each call, all before the next :meth:`complete`.

        Args:
            tp: Their partition.
            values: The values (bytes-like or None, or what the value serializer takes).
            keys: The keys, as many as ``values``; None for keyless records.
            timestamp_ms: CreateTime of every record, wall-clock milliseconds.
            now: The monotonic time, in seconds.
            generation: The transaction generation the records belong to.
            handle: A handle to add these records to; a new one if None.
            checked: ``keys``, ``values`` and ``headers`` are lists from
                :meth:`RecordChecker.many` and :meth:`RecordChecker.many_headers` already (the
                caller checked them; they are not checked again).
            headers: Each record's headers; header-less records when None.

        Returns:
            The handle: it succeeds when every record is written, fails if any is lost.

        Raises:
            RecordTypeError: a key, value or the timestamp has a wrong type.
            RecordTooLargeError: a record exceeds ``max.request.size``.
            ValueError: ``keys`` and ``values`` differ in length.
        """
        ks, vals = (keys, values) if checked else self._checker.many(values, keys)
        hs = headers if checked or headers is None else self._checker.many_headers(
            headers, ks, vals)  # type: ignore[arg-type]
        stamp = check_timestamp(timestamp_ms)
        if handle is None:
            handle = DeliveryHandle(stamp)
            if not vals:
                handle._succeed_if_empty()  # nothing to send: done at once
        if not vals:
            return handle
        dead = self._queues.dead(generation)
        if dead is not None:
            handle._add_part(len(vals))
            handle._fail(dead)
            return handle
        self._queues.append_all(tp, ks, vals, timestamp_ms=stamp,  # type: ignore[arg-type]
                                now=now, generation=generation, handle=handle,
                                headers=hs)  # type: ignore[arg-type]
        return handle

    def take_settled(self) -> list[BatchOutcome]:
        """The outcomes of the batches settled since the last call, oldest first."""
        settled = self._settled[:]
        self._settled.clear()
        return settled

    # -- draining --------------------------------------------------------------------------

    def drain(
        self,
        gate: DrainGate,
        now: float,
        *,
        max_bytes: int | None = None,
        flush: bool = False,
        encode: bool = True,
    ) -> dict[TopicPartition, ReadyBatch]:
        """Take the batches to send now: at most one per partition (one Produce request).

        Args:
            gate: Asked about every candidate: ``may_drain(tp, generation)`` for a new batch,
                ``may_resend(tp)`` for a resend (leader known and on the node this request
                goes to, registered in the transaction, its generation the current one).
            now: The monotonic time, in seconds.
            max_bytes: Byte budget of the request (default ``max.request.size``); the first
                batch is taken even if larger.
            flush: Take batches whose linger has not passed too.
            encode: Encode new batches now; False leaves their ``data`` empty until
                :meth:`encode` (the budget then counts their uncompressed size).

        Returns:
            Partition -> the batch to send, with its ticket and encoded bytes.
        """
        budget = max_bytes if max_bytes is not None else self._settings.max_request_size
        drained: dict[TopicPartition, ReadyBatch] = {}
        used = 0
        for tp in self._candidates():
            size = self._next_size(tp, gate, now, flush)
            if size is None:
                continue
            if drained and used + size > budget:
                break
            drained[tp] = self._take(tp, encode)
            used += drained[tp].batch.size_bound()  # the exact size once encoded
        return drained

    def encode(self, ready: ReadyBatch) -> ReadyBatch:
        """``ready`` with its bytes, encoded now if :meth:`drain` left them out.

        It touches only the drained batch, which nothing else reads or changes until its
        answer is fed to :meth:`complete`: a threaded caller may call it without its lock.
        """
        if ready.data:
            return ready
        data = ready.batch.data or ready.batch.encode(
            ready.ticket, transactional=self._settings.transactional)
        return ReadyBatch(ready.tp, ready.ticket, data, ready.batch)

    def next_ready(self, now: float) -> float | None:
        """Seconds until some batch becomes ready by linger (0: one is ready now); None if
        nothing is queued. Ignores the gate, so the I/O loop can sleep this long."""
        if self._sequences.partitions_with_resends():
            return 0.0
        return self._queues.next_due(now)

    # -- answers and failures --------------------------------------------------------------

    def complete(
        self,
        ready: ReadyBatch,
        code: int,
        *,
        base_offset: int = -1,
        log_append_time_ms: int = _NO_TIMESTAMP,
    ) -> Outcome[ProducerBatch]:
        """Feed the Produce answer for one drained batch and settle its handles.

        Args:
            ready: The batch as :meth:`drain` returned it.
            code: The partition's error code (13 for a dropped connection: outcome unknown).
            base_offset: The partition's ``base_offset`` from the response.
            log_append_time_ms: The response's ``log_append_time`` (-1 for CreateTime).

        Returns:
            The sequence tracker's verdict. On :class:`~eosclient._core.sequences.Failed`
            the handles already failed; report ``outcome.error`` to the transaction state
            machine. On ``Retry`` the batch is resent by a later :meth:`drain`.
        """
        outcome = self._sequences.on_response(ready.ticket, code)
        if isinstance(outcome, Acked):
            outcome.payload.succeed(base_offset if code == 0 else -1, log_append_time_ms)
        elif isinstance(outcome, Failed):
            for batch in outcome.payloads:
                batch.fail(outcome.error)
        return outcome

    def fail_generation(self, generation: int, error: BaseException) -> int:
        """Fail every unsent record of ``generation`` and older ones; refuse later appends.

        Batches already drained are not touched: they are in flight under their identity and
        settle by their answers (the state machine waits for them, or bumps the epoch).

        Args:
            generation: The aborted transaction's generation.
            error: What their handles fail with.

        Returns:
            How many records were failed.
        """
        self._queues.kill(generation, error)
        doomed = self._queues.remove(lambda batch: batch.generation <= generation)
        for batch in doomed:
            batch.fail(error)
        return sum(batch.count for batch in doomed)

    def expire(self, now: float) -> list[Expiry]:
        """Fail batches whose ``delivery.timeout.ms`` passed.

        Unsent ones fail with :class:`KafkaTimeoutError` (they used no sequence); ones in
        flight fail with :class:`EpochBumpRequiredError` (their outcome is unknown, KIP-360).

        Returns:
            One :class:`Expiry` per failed batch, with the identity and generation it belongs
            to; report each to the transaction state machine, which ignores one of an identity
            or transaction already over (a transaction that lost a record cannot commit).
        """
        identity = self._sequences.identity  # every in-flight batch is of the current one
        expired: list[Expiry] = []
        for batch in self._queues.expired(now):
            error: EosError = KafkaTimeoutError(
                f"{batch.tp.topic}[{batch.tp.partition}]: {batch.count} record(s) not sent"
                " within delivery.timeout.ms"
            )
            batch.fail(error)
            expired.append(Expiry(error, identity, batch.generation))
        for batch, error in self._sequences.expire(now):
            batch.fail(error)
            expired.append(Expiry(error, identity, batch.generation))
        return expired

    def reset_identity(self, identity: ProducerIdentity, error: EosError | None = None) -> None:
        """Use a new producer identity (after InitProducerId or a KIP-360 bump).

        Every partition's sequence restarts at 0. Batches still in flight under the old
        identity are failed with ``error`` (their answers will be ignored); queued ones are
        kept and will be sent under the new identity.

        Raises:
            ValueError: ``identity`` is the current one; nothing changed.
        """
        dropped = self._sequences.reset(identity)
        failure = error if error is not None else AbortableError(
            "the batch was in flight when the producer identity changed; outcome unknown"
        )
        for batch in dropped:
            batch.fail(failure)

    # -- introspection ---------------------------------------------------------------------

    def unsent_records(self, generation: int | None = None) -> int:
        """Records queued and not yet drained, of ``generation`` or (None) of all."""
        return self._queues.records(generation)

    def in_flight(self) -> int:
        """Batches drained and not yet settled (resends pending included)."""
        return self._sequences.in_flight()

    # -- internals -------------------------------------------------------------------------

    def _candidates(self) -> list[TopicPartition]:
        """Partitions with something to send, rotated so no partition starves (as Java)."""
        tps = list(dict.fromkeys([*self._sequences.partitions_with_resends(), *self._queues]))
        if not tps:
            return tps
        start = self._drain_start % len(tps)
        self._drain_start += 1
        return tps[start:] + tps[:start]

    def _next_size(self, tp: TopicPartition, gate: DrainGate, now: float,
                   flush: bool) -> int | None:
        """Bytes of the batch :meth:`_take` would return for ``tp``, or None if none may go."""
        resend = self._sequences.peek_resend(tp)
        if resend is not None:
            return resend.size_bound() if gate.may_resend(tp) else None
        head = self._queues.due(tp, now, flush=flush)
        if head is None or not self._sequences.can_send(tp):
            return None
        if not gate.may_drain(tp, head.generation):
            return None  # e.g. a failed transaction's batch that FailUnsent has yet to remove
        if any(b.generation != head.generation for b in self._sequences.in_flight_payloads(tp)):
            return None  # an older generation is still in flight here: never mix them
        return head.size_bound()

    def _take(self, tp: TopicPartition, encode: bool) -> ReadyBatch:
        resent = self._sequences.take_resend(tp)
        if resent is not None:
            batch, ticket = resent
            return ReadyBatch(tp, ticket, batch.data, batch)
        batch = self._queues.pop(tp)
        ticket = self._sequences.assign(tp, batch.count, batch, deadline=batch.deadline)
        ready = ReadyBatch(tp, ticket, b"", batch)
        return self.encode(ready) if encode else ready
