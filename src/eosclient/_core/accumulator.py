"""Records -> per-partition batches -> encoded record batches (v2), sans-IO.

Theory of operation
-------------------
``append`` checks a record (type, size: see :mod:`eosclient._core.records`) and writes it at once
into the open batch of its partition with kafka-python's ``DefaultRecordBatchBuilder``, so that
encoding cost is spread over the appends. A batch is *closed* when the builder refuses the next
record (``batch.size``) or a newer batch follows it; it is *ready* when closed, when its
``linger.ms`` has passed, or when the caller flushes.

Every batch belongs to one *transaction generation*, an int the caller passes with each append
(the producer counts its transactions). A record is never added to a batch of another generation,
so aborting a transaction can drop exactly its records: :meth:`RecordAccumulator.fail_generation`
fails every unsent batch of that generation (and older ones) and refuses later appends to them.
This is the KIP-360 rule that kafka-python 3.0.12 breaks: a record of an aborted transaction must
never be drained into a later one, where it would commit under the new epoch. For the same
reason a partition's batches of a newer generation wait until its batches of an older one are no
longer in flight.

``drain`` hands out at most one batch per partition (Produce v3+ accepts exactly one record batch
per partition per request), resends first, only for partitions the caller's ``ready`` predicate
allows (a known leader; KIP-609 pre-registration done), and within ``max_bytes``. A new batch
gets its sequences from :class:`~eosclient._core.sequences.SequenceTracker` only here, at drain
time, and is encoded then with the producer id, epoch, base sequence and transactional flag; a
resend reuses those exact bytes.

``complete`` feeds a partition's Produce answer back and settles the batch's handles; ``expire``
gives up on batches whose ``delivery.timeout.ms`` passed; ``reset_identity`` follows an epoch
bump. Nothing here reads a clock: ``now`` (seconds, monotonic) is passed in, and record
timestamps (``timestamp_ms``, wall clock) are the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eosclient._core.batches import (
    AccumulatorSettings,
    PartitionQueues,
    ProducerBatch,
    ReadyBatch,
)
from eosclient._core.partitioner import StickyPartitions
from eosclient._core.records import (
    DeliveryHandle,
    Record,
    RecordChecker,
    check_timestamp,
    compression_for,
)
from eosclient._core.sequences import Acked, Failed, Outcome, SequenceTracker
from eosclient._core.types import NO_IDENTITY, ProducerIdentity, TopicPartition
from eosclient.errors import AbortableError, EosError, KafkaTimeoutError

__all__ = ["AccumulatorSettings", "ProducerBatch", "ReadyBatch", "RecordAccumulator"]

_NO_TIMESTAMP = -1


class RecordAccumulator:
    """Per-partition batches of one producer, with their sequences.

    Args:
        settings: Batching, limits, codec, serializers and partitioner.
        identity: The producer identity, if already known; until :meth:`reset_identity`
            gives one, records queue up but nothing drains.
        sticky: Keyless partition choice (a seeded one makes tests reproducible).

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
        self._queues = PartitionQueues(
            settings, compression_for(settings.compression_type),
            on_filled=lambda tp: self._sticky.batch_filled(tp.topic, tp.partition),
        )
        self._dead_through: int | None = None  # every generation <= this was failed
        self._dead_error: BaseException | None = None
        self._drain_start = 0

    @property
    def settings(self) -> AccumulatorSettings:
        """The settings it was built with."""
        return self._settings

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

    def append_record(
        self, tp: TopicPartition, record: Record, *, now: float, generation: int
    ) -> DeliveryHandle:
        """Queue a record from :meth:`prepare`.

        Args:
            tp: Its partition (see :meth:`choose_partition`).
            record: The checked record.
            now: The monotonic time, in seconds (starts linger and delivery timeout).
            generation: The transaction generation the record belongs to.

        Returns:
            Its handle; already failed if ``generation`` was failed before.
        """
        handle = DeliveryHandle(record.timestamp_ms)
        handle._add_part(1)
        if self._is_dead(generation):
            handle._fail(self._dead_failure())
            return handle
        batch, delta = self._queues.append(tp, record, now=now, generation=generation)
        batch.parts.append((handle, delta, 1))
        return handle

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
    ) -> DeliveryHandle:
        """:meth:`prepare` then :meth:`append_record`: a bad record changes nothing."""
        record = self._checker.one(key, value, headers, timestamp_ms)
        return self.append_record(tp, record, now=now, generation=generation)

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

        Returns:
            The handle: it succeeds when every record is written, fails if any is lost.

        Raises:
            RecordTypeError: a key, value or the timestamp has a wrong type.
            RecordTooLargeError: a record exceeds ``max.request.size``.
            ValueError: ``keys`` and ``values`` differ in length.
        """
        records = self._checker.many(values, keys)
        stamp = check_timestamp(timestamp_ms)
        if handle is None:
            handle = DeliveryHandle(stamp)
            if not records:
                handle._succeed_if_empty()  # nothing to send: done at once
        if not records:
            return handle
        if self._is_dead(generation):
            handle._add_part(len(records))
            handle._fail(self._dead_failure())
            return handle
        self._queues.append_all(tp, records, timestamp_ms=stamp, now=now, generation=generation,
                                handle=handle)
        return handle

    # -- draining --------------------------------------------------------------------------

    def drain(
        self,
        ready: Callable[[TopicPartition], bool],
        now: float,
        *,
        max_bytes: int | None = None,
        flush: bool = False,
    ) -> dict[TopicPartition, ReadyBatch]:
        """Take the batches to send now: at most one per partition (one Produce request).

        Args:
            ready: Whether a partition may be produced to now (leader known, on the node this
                request goes to, registered in the transaction). Call once per node.
            now: The monotonic time, in seconds.
            max_bytes: Byte budget of the request (default ``max.request.size``); the first
                batch is taken even if larger.
            flush: Take batches whose linger has not passed too.

        Returns:
            Partition -> the batch to send, with its ticket and encoded bytes.
        """
        budget = max_bytes if max_bytes is not None else self._settings.max_request_size
        drained: dict[TopicPartition, ReadyBatch] = {}
        used = 0
        for tp in self._candidates():
            if not ready(tp):
                continue
            size = self._next_size(tp, now, flush)
            if size is None:
                continue
            if drained and used + size > budget:
                break
            drained[tp] = self._take(tp)
            used += len(drained[tp].data)
        return drained

    def next_ready(self, now: float) -> float | None:
        """Seconds until some batch becomes ready by linger (0: one is ready now); None if
        nothing is queued. Ignores the ``ready`` gating, so the I/O loop can sleep this long."""
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
        if self._dead_through is None or generation >= self._dead_through:
            self._dead_through, self._dead_error = generation, error
        doomed = self._queues.remove(lambda batch: batch.generation <= generation)
        for batch in doomed:
            batch.fail(error)
        return sum(batch.count for batch in doomed)

    def expire(self, now: float) -> list[EosError]:
        """Fail batches whose ``delivery.timeout.ms`` passed.

        Unsent ones fail with :class:`KafkaTimeoutError` (they used no sequence); ones in
        flight fail with :class:`EpochBumpRequiredError` (their outcome is unknown, KIP-360).

        Returns:
            One error per failed batch; report them to the transaction state machine (a
            transaction that lost a record cannot commit).
        """
        errors: list[EosError] = []
        for batch in self._queues.expired(now):
            error: EosError = KafkaTimeoutError(
                f"{batch.tp.topic}[{batch.tp.partition}]: {batch.count} record(s) not sent"
                " within delivery.timeout.ms"
            )
            batch.fail(error)
            errors.append(error)
        for batch, error in self._sequences.expire(now):
            batch.fail(error)
            errors.append(error)
        return errors

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

    def _is_dead(self, generation: int) -> bool:
        return self._dead_through is not None and generation <= self._dead_through

    def _dead_failure(self) -> BaseException:
        assert self._dead_error is not None
        return self._dead_error

    def _candidates(self) -> list[TopicPartition]:
        """Partitions with something to send, rotated so no partition starves (as Java)."""
        tps = list(dict.fromkeys([*self._sequences.partitions_with_resends(), *self._queues]))
        if not tps:
            return tps
        start = self._drain_start % len(tps)
        self._drain_start += 1
        return tps[start:] + tps[:start]

    def _next_size(self, tp: TopicPartition, now: float, flush: bool) -> int | None:
        """Bytes of the batch :meth:`_take` would return for ``tp``, or None if none is due."""
        resend = self._sequences.peek_resend(tp)
        if resend is not None:
            return resend.size_bound()
        head = self._queues.due(tp, now, flush=flush)
        if head is None or not self._sequences.can_send(tp):
            return None
        if any(b.generation != head.generation for b in self._sequences.in_flight_payloads(tp)):
            return None  # an older generation is still in flight here: never mix them
        return head.size_bound()

    def _take(self, tp: TopicPartition) -> ReadyBatch:
        resent = self._sequences.take_resend(tp)
        if resent is not None:
            batch, ticket = resent
            return ReadyBatch(tp, ticket, batch.data, batch)
        batch = self._queues.pop(tp)
        ticket = self._sequences.assign(tp, batch.count, batch, deadline=batch.deadline)
        data = batch.encode(ticket, transactional=self._settings.transactional)
        return ReadyBatch(tp, ticket, data, batch)
