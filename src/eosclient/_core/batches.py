"""The accumulator's settings and batches: one partition's records on their way to the broker.

:class:`PartitionQueues` keeps each partition's unsent batches, oldest first; a record joins the
newest batch of its partition only if that batch is of the same transaction generation and not
full.

A :class:`ProducerBatch` owns a :class:`~eosclient._core.encoder.BatchWriter` that encodes each
record as it is appended; when the batch is drained it is closed once, with the producer id,
epoch, base sequence and transactional flag of its :class:`~eosclient._core.sequences.SendTicket`
(header, codec and CRC then), and keeps those bytes for every resend. Its records share one
:class:`~eosclient._core.delivery.BatchOutcome`; ``send_batch`` handles are kept as parts. A
:class:`ReadyBatch` is one drained batch as it goes into a Produce request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from eosclient._core.delivery import BatchOutcome, DeliveryHandle
from eosclient._core.encoder import BatchWriter, Header
from eosclient._core.partitioner import Partitioner, default_partitioner
from eosclient._core.records import Compression, Serializer, compression_for
from eosclient._core.sequences import SendTicket
from eosclient._core.types import TopicPartition
from eosclient.errors import ConfigError

__all__ = ["AccumulatorSettings", "BufferBudget", "PartitionQueues", "ProducerBatch", "ReadyBatch"]

# What a new batch takes (and counts in buffer.memory) before it grows: Java's batch.size.
_FIRST_LIMIT = 16_384


@dataclass(frozen=True, kw_only=True, slots=True)
class AccumulatorSettings:
    """The producer settings the accumulator uses (Kafka's names in the docs).

    Attributes:
        batch_size: ``batch.size``: bytes per batch before compression (a larger record
            still gets a batch of its own).
        linger_ms: ``linger.ms``: how long a batch that is not full waits for more records.
        max_request_size: ``max.request.size``: no record may be larger; also the default
            byte budget of one drain.
        compression_type: ``compression.type``: none, gzip, snappy, lz4 or zstd.
        delivery_timeout_ms: ``delivery.timeout.ms``: from append to giving up.
        buffer_memory: ``buffer.memory``: bytes of batches not yet settled before
            :attr:`BufferBudget.full` says to wait.
        max_in_flight: ``max.in.flight.requests.per.connection``: batches in flight per
            partition, at most 5.
        transactional: Whether batches carry the transactional flag (False: idempotent only).
        key_serializer: Turns keys into bytes; None accepts bytes-like keys only.
        value_serializer: Turns values into bytes; None accepts bytes-like values only.
        partitioner: ``(topic, key, num_partitions) -> int | None``; None means sticky.
    """

    batch_size: int = 1_000_000
    linger_ms: float = 5.0
    max_request_size: int = 1_048_576
    compression_type: str = "none"
    delivery_timeout_ms: float = 120_000.0
    buffer_memory: int = 33_554_432
    max_in_flight: int = 5
    transactional: bool = True
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None
    partitioner: Partitioner = default_partitioner

    def __post_init__(self) -> None:
        for key, value in (("batch.size", self.batch_size),
                           ("max.request.size", self.max_request_size),
                           ("buffer.memory", self.buffer_memory)):
            if value < 1:
                raise ConfigError(f"must be at least 1, got {value}", key=key)
        for key, number in (("linger.ms", self.linger_ms),
                            ("delivery.timeout.ms", self.delivery_timeout_ms)):
            if number < 0:
                raise ConfigError(f"must not be negative, got {number}", key=key)
        compression_for(self.compression_type)  # raises ConfigError naming the package


class BufferBudget:
    """``buffer.memory``: the bytes held by batches from their opening until they settle.

    A batch counts the bytes it may take now (:meth:`ProducerBatch.grow`: 16 KiB at first,
    doubling as records fill it, up to ``batch.size``), or the size of its one record when that
    is larger; it gives them back when it succeeds or fails. So a large ``batch.size`` (1 MB,
    librdkafka's default) costs memory only where records fill it, not per open batch. ``full``
    is kept up to date so that ``send()`` reads one attribute.
    """

    __slots__ = ("full", "limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.full = False

    def reserve(self, size: int) -> None:
        """Count ``size`` more bytes."""
        self.used += size
        self.full = self.used >= self.limit

    def release(self, size: int) -> None:
        """Give ``size`` bytes back."""
        self.used -= size
        self.full = self.used >= self.limit


@dataclass(eq=False, slots=True)
class ProducerBatch:
    """One partition's batch, from its first append until it is settled. Opaque to callers."""

    tp: TopicPartition
    generation: int
    created: float
    deadline: float
    writer: BatchWriter  # its records, encoded as appended; emptied by encode()
    codec: int
    outcome: BatchOutcome  # shared with its send() records
    sink: list[BatchOutcome]  # where the outcome goes once settled (the accumulator's list)
    budget: BufferBudget  # buffer.memory, shared by the accumulator's batches
    capacity: int = 0  # batch.size (at most max.request.size): how far it may grow
    limit: int = 0  # bytes its writer takes now (grow() doubles it)
    reserved: int = 0  # bytes counted in the budget until the batch settles
    full: bool = False
    data: bytes = b""
    # send_batch() handles: (handle, its part number, offset delta of its first record here,
    # records here)
    parts: list[tuple[DeliveryHandle, int, int, int]] = field(default_factory=list)

    @classmethod
    def open(
        cls, tp: TopicPartition, generation: int, now: float, *, settings: AccumulatorSettings,
        codec: Compression, sink: list[BatchOutcome], budget: BufferBudget,
    ) -> ProducerBatch:
        """A new, empty batch of ``tp`` for ``generation``, created at ``now``; what it takes
        before it grows (16 KiB, or less if ``batch.size`` is smaller) is counted in
        ``budget``."""
        capacity = min(settings.batch_size, settings.max_request_size)
        limit = min(capacity, _FIRST_LIMIT)
        deadline = now + settings.delivery_timeout_ms / 1000
        batch = cls(tp, generation, now, deadline, BatchWriter(limit), int(codec),
                    BatchOutcome(tp), sink, budget, capacity, limit)
        batch.reserve(limit)
        return batch

    def grow(self) -> bool:
        """Let the batch take twice the bytes, up to its capacity, and count them in the budget;
        False if it is at its capacity (it is full)."""
        if self.limit >= self.capacity:
            return False
        self.limit = min(self.capacity, 2 * self.limit)
        self.writer.widen(self.limit)
        if self.limit > self.reserved:
            self.reserve(self.limit - self.reserved)
        return True

    def reserve(self, size: int) -> None:
        """Count ``size`` more bytes for this batch in the budget (when it opens or grows, or
        for a record beyond its limit)."""
        self.reserved += size
        self.budget.reserve(size)

    def _settle(self) -> None:
        self.sink.append(self.outcome)
        if self.reserved:
            self.budget.release(self.reserved)
            self.reserved = 0

    @property
    def count(self) -> int:
        """Records in the batch."""
        return self.writer.count

    def size_bound(self) -> int:
        """The encoded size at most: the uncompressed size until encoded, then exact."""
        return len(self.data) if self.data else self.writer.size

    def encode(self, ticket: SendTicket, *, transactional: bool) -> bytes:
        """Encode the batch for its first send; the bytes are kept for every resend."""
        identity = ticket.identity
        self.data = self.writer.build(
            producer_id=identity.producer_id, producer_epoch=identity.epoch,
            base_sequence=ticket.base_sequence, transactional=transactional,
            compression=self.codec)
        return self.data

    def succeed(self, base_offset: int, log_append_time_ms: int) -> None:
        """Settle the batch's records as written."""
        self.outcome.succeed(base_offset, log_append_time_ms)
        self._settle()
        for handle, part, first, count in self.parts:
            handle._succeed_part(part, self.outcome.delivered(first, handle.timestamp_ms, count))

    def fail(self, error: BaseException) -> None:
        """Settle the batch's records as failed with ``error``."""
        self.outcome.fail(error)
        self._settle()
        for handle, _, _, _ in self.parts:
            handle._fail(error)


@dataclass(frozen=True, slots=True)
class ReadyBatch:
    """One batch to put in a Produce request, and the ticket to answer it with.

    Attributes:
        tp: The partition.
        ticket: Identity, sequences and attempt it is sent with; pass the ReadyBatch back to
            ``RecordAccumulator.complete``.
        data: The encoded record batch (v2), ready for the request's ``records`` field.
        batch: The accumulator's batch (opaque).
    """

    tp: TopicPartition
    ticket: SendTicket
    data: bytes
    batch: ProducerBatch = field(repr=False)

    @property
    def generation(self) -> int:
        """The transaction generation the batch's records were appended in."""
        return self.batch.generation




class PartitionQueues:
    """Each partition's unsent batches, oldest first.

    Args:
        settings: ``batch.size``, ``linger.ms``, ``delivery.timeout.ms`` and the flag.
        codec: The compression codec of new batches.
        on_filled: Called with a partition whose batch just filled (moves the sticky
            partition, KIP-480).
        sink: Where every batch puts its outcome once settled.
        budget: ``buffer.memory``; every batch counts its bytes there until it settles.
    """

    def __init__(
        self,
        settings: AccumulatorSettings,
        codec: Compression,
        on_filled: Callable[[TopicPartition], None],
        sink: list[BatchOutcome],
        budget: BufferBudget,
    ) -> None:
        self._settings = settings
        self._budget = budget
        self._codec = codec
        self._on_filled = on_filled
        self._sink = sink
        self._linger = settings.linger_ms / 1000
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._dead_through = -1  # every generation <= this was failed (kill)
        self._dead_error: BaseException | None = None

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(list(self._queues))

    def append(  # noqa: PLR0917 (positional: the per-record hot path, keywords cost)
        self, tp: TopicPartition, timestamp_ms: int, key: bytes | None, value: bytes | None,
        headers: Sequence[Header], now: float, generation: int,
    ) -> tuple[BatchOutcome, int]:
        """Add one record; returns its batch's outcome and its offset delta there.

        A record of a generation that :meth:`kill` failed gets an outcome failed already,
        and no batch.
        """
        queue = self._queues.get(tp)
        if queue:  # the hot path: the newest batch of the partition takes it
            batch = queue[-1]
            # A batch in a queue is never of a killed generation (kill removes them all).
            if batch.generation == generation and not batch.full:
                index = batch.writer.count
                if batch.writer.append(timestamp_ms, key, value, headers):
                    return batch.outcome, index
        return self._append_to_new(tp, timestamp_ms, key, value, headers, now, generation)

    def _append_to_new(  # noqa: PLR0917
        self, tp: TopicPartition, timestamp_ms: int, key: bytes | None, value: bytes | None,
        headers: Sequence[Header], now: float, generation: int,
    ) -> tuple[BatchOutcome, int]:
        dead = self.dead(generation)
        if dead is not None:
            outcome = BatchOutcome(tp)
            outcome.fail(dead)
            return outcome, 0
        queue = self._queues.get(tp)
        if queue and queue[-1].generation == generation and not queue[-1].full:
            batch = queue[-1]  # it refused the record: it grows, or a new batch follows it
            while True:
                batch = self._next(batch, now)
                index = batch.writer.count
                if batch.writer.append(timestamp_ms, key, value, headers):  # a first one fits
                    break
        else:
            batch, index = self._new(tp, generation, now), 0
            batch.writer.append(timestamp_ms, key, value, headers)
        if batch.writer.size > batch.reserved:  # one record larger than batch.size
            batch.reserve(batch.writer.size - batch.reserved)
        return batch.outcome, index

    def open_batch(self, tp: TopicPartition, generation: int) -> ProducerBatch | None:
        """``tp``'s newest batch if :meth:`append` would try it first for ``generation``."""
        queue = self._queues.get(tp)
        if queue:
            batch = queue[-1]
            if batch.generation == generation and not batch.full:
                return batch
        return None

    def kill(self, generation: int, error: BaseException) -> None:
        """Fail every later append to ``generation`` and older ones with ``error``."""
        if generation >= self._dead_through:
            self._dead_through, self._dead_error = generation, error

    def dead(self, generation: int) -> BaseException | None:
        """The error appends to ``generation`` fail with, if :meth:`kill` failed it."""
        return self._dead_error if generation <= self._dead_through else None

    def append_all(
        self, tp: TopicPartition, keys: list[bytes | None] | None, values: list[bytes | None],
        *, timestamp_ms: int, now: float, generation: int, handle: DeliveryHandle,
        headers: list[list[Header]] | None = None,
    ) -> None:
        """Add records (header-less when ``headers`` is None), all under ``handle``; they may
        span several batches."""
        batch = self._open(tp, generation, now)
        index = 0
        while True:
            first = batch.count
            index = batch.writer.append_values(timestamp_ms, keys, values, index, headers)
            if batch.count > first:
                part = handle._add_part(batch.count - first)
                batch.parts.append((handle, part, first, batch.count - first))
            if index >= len(values):
                return
            batch = self._next(batch, now)

    def due(self, tp: TopicPartition, now: float, *, flush: bool) -> ProducerBatch | None:
        """``tp``'s oldest batch if it may go now: closed, lingered long enough, or flushing."""
        queue = self._queues.get(tp)
        if not queue:
            return None
        head = queue[0]
        closed = head.full or len(queue) > 1
        return head if flush or closed or now - head.created >= self._linger else None

    def pop(self, tp: TopicPartition) -> ProducerBatch:
        """Remove and return ``tp``'s oldest batch."""
        queue = self._queues[tp]
        batch = queue.popleft()
        if not queue:
            del self._queues[tp]
        batch.writer.seal()  # on its way: encoded maybe later, but it takes no more records
        return batch

    def remove(self, doomed: Callable[[ProducerBatch], bool]) -> list[ProducerBatch]:
        """Remove and return every batch ``doomed`` picks."""
        removed: list[ProducerBatch] = []
        for tp, queue in list(self._queues.items()):
            removed.extend(b for b in queue if doomed(b))
            kept = deque(b for b in queue if not doomed(b))
            self._set(tp, kept)
        for batch in removed:
            batch.writer.seal()
        return removed

    def expired(self, now: float) -> list[ProducerBatch]:
        """Remove and return the batches whose delivery deadline passed."""
        return self.remove(lambda batch: batch.deadline <= now)

    def next_due(self, now: float) -> float | None:
        """Seconds until some batch is due by linger (0: now); None if nothing is queued."""
        waits = (
            0.0 if q[0].full or len(q) > 1 else max(0.0, q[0].created + self._linger - now)
            for q in self._queues.values()
        )
        return min(waits, default=None)

    def records(self, generation: int | None = None) -> int:
        """Records queued, of ``generation`` or (None) of all."""
        return sum(
            b.count for q in self._queues.values() for b in q
            if generation is None or b.generation == generation
        )

    def _open(self, tp: TopicPartition, generation: int, now: float) -> ProducerBatch:
        queue = self._queues.get(tp)
        if queue and queue[-1].generation == generation and not queue[-1].full:
            return queue[-1]
        return self._new(tp, generation, now)

    def _next(self, batch: ProducerBatch, now: float) -> ProducerBatch:
        """Where a record that ``batch`` refused goes: ``batch`` itself if it can grow, else a
        new batch, ``batch`` closed."""
        if batch.grow():
            return batch
        batch.full = True
        batch.writer.seal()  # a smaller record would still fit: it must go to the new batch
        self._on_filled(batch.tp)
        return self._new(batch.tp, batch.generation, now)

    def _new(self, tp: TopicPartition, generation: int, now: float) -> ProducerBatch:
        batch = ProducerBatch.open(tp, generation, now, settings=self._settings,
                                   codec=self._codec, sink=self._sink, budget=self._budget)
        self._queues.setdefault(tp, deque()).append(batch)
        return batch

    def _set(self, tp: TopicPartition, queue: deque[ProducerBatch]) -> None:
        if queue:
            self._queues[tp] = queue
        else:
            self._queues.pop(tp, None)
