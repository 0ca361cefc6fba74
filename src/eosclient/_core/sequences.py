"""Per-partition sequence numbers of one idempotent producer identity, sans-IO.

Theory of operation
-------------------
KIP-98 makes Produce idempotent. Every record batch carries the producer's identity (producer id,
epoch) and a base sequence; a batch of ``n`` records takes the sequences ``base .. base + n - 1``
of its partition. The broker writes a batch only if its base sequence follows the last one it
wrote for that identity, answers DUPLICATE_SEQUENCE_NUMBER (46) for one of the last five batches
it wrote, and OUT_OF_ORDER_SEQUENCE_NUMBER (45) for anything else. What follows from that, and
what this module keeps:

* Sequences are int32 and wrap to 0 after ``2**31 - 1``, as Kafka's
  ``DefaultRecordBatch.incrementSequence`` does.
* At most five batches are in flight per partition: the broker remembers only the last five,
  so an older resend could not be recognised as a duplicate.
* A batch keeps its sequence for life. A retry resends it, and every later batch of the
  partition that is in flight, in the original order with the original sequences: the first
  attempt may have been written, and only the same sequence lets the broker drop the copy.
* 46 is success: the broker already has the batch (``errors.is_success``).
* 45 for a batch that is not the oldest in flight follows from an earlier batch's failure (the
  broker saw a gap which that batch's resend will fill): retry in order, as Java's
  ``TransactionManager.canRetry`` does.
* 45 for the oldest batch, UNKNOWN_PRODUCER_ID (59), any other non-retriable error, or a batch
  that expired in flight (its outcome is unknown: franz-go's "unsure if produced") leave a gap
  that nothing can fill. The partition is *broken* until the epoch is bumped (KIP-360): the
  tracker reports :class:`~eosclient.errors.EpochBumpRequiredError` upward, sends nothing more
  there, and leaves the decision to bump to the transaction state machine, which then calls
  :meth:`SequenceTracker.reset`.
* A response for an older identity (from before :meth:`~SequenceTracker.reset`) is ignored, and
  so is an error from a superseded attempt (the batch was resent since). A success from any
  attempt settles the batch.

Errors are classified only through ``errors.error_for(ApiKey.PRODUCE, code)``.

The tracker holds an opaque payload per batch (the accumulator's batch), so that a retry can
hand the very same encoded batch back for resending.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from eosclient._core.types import ProducerIdentity, TopicPartition
from eosclient.errors import (
    ApiKey,
    ConfigError,
    EosError,
    EpochBumpRequiredError,
    FatalError,
    FencedError,
    IllegalStateError,
    RetriableError,
    error_for,
    is_success,
)

__all__ = [
    "MAX_IN_FLIGHT",
    "SEQUENCE_MODULUS",
    "Acked",
    "Failed",
    "Ignored",
    "Outcome",
    "Retry",
    "SendTicket",
    "SequenceTracker",
    "advance_sequence",
]

P = TypeVar("P")

SEQUENCE_MODULUS = 2**31
"""Sequences live in ``[0, 2**31)``; the one after ``2**31 - 1`` is 0."""

MAX_IN_FLIGHT = 5
"""The broker deduplicates only the last five batches of a producer per partition."""

_OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def advance_sequence(sequence: int, count: int) -> int:
    """The sequence ``count`` records after ``sequence``, wrapping as Kafka does.

    Args:
        sequence: A sequence in ``[0, 2**31)``.
        count: How many records to move forward.

    Returns:
        ``(sequence + count) mod 2**31``.
    """
    return (sequence + count) % SEQUENCE_MODULUS


class SendTicket(NamedTuple):
    """What one attempt to send a batch was sent as; the response is matched against it.

    Attributes:
        tp: The batch's partition.
        identity: The producer identity the batch carries.
        base_sequence: The batch's first sequence.
        record_count: How many records (and so sequences) the batch holds.
        attempt: 0 for the first send, then 1, 2, ... for each resend.
    """

    tp: TopicPartition
    identity: ProducerIdentity
    base_sequence: int
    record_count: int
    attempt: int

    @property
    def last_sequence(self) -> int:
        """The sequence of the batch's last record."""
        return advance_sequence(self.base_sequence, self.record_count - 1)


@dataclass(frozen=True, slots=True)
class Acked(Generic[P]):
    """The batch is written (or was already: 46); complete its records."""

    payload: P


@dataclass(frozen=True, slots=True)
class Retry:
    """A retriable error: the batch and every later one of its partition wait for a resend.

    Attributes:
        pending: How many batches of the partition now wait for a resend.
    """

    pending: int


@dataclass(frozen=True, slots=True)
class Failed(Generic[P]):
    """These batches are lost; fail their records with ``error`` and report it upward.

    Attributes:
        error: An :class:`EpochBumpRequiredError` when the sequence broke, else the
            classified error (:class:`FencedError`, :class:`FatalError`).
        payloads: The answered batch first, then any that were waiting for a resend on the
            same partition and can no longer be sent.
    """

    error: EosError
    payloads: tuple[P, ...]


@dataclass(frozen=True, slots=True)
class Ignored:
    """Nothing to do: an old identity, a superseded attempt, or an already settled batch."""

    reason: str


Outcome = Acked[P] | Retry | Failed[P] | Ignored
"""What :meth:`SequenceTracker.on_response` asks of the caller."""


@dataclass(eq=False, slots=True)
class _Entry(Generic[P]):
    base_sequence: int
    record_count: int
    deadline: float
    payload: P
    attempt: int = 0
    resend: bool = False


@dataclass(eq=False, slots=True)
class _Partition(Generic[P]):
    next_sequence: int = 0
    entries: list[_Entry[P]] = field(default_factory=list)  # in flight, in sequence order
    broken: EosError | None = None

    def find(self, base_sequence: int) -> _Entry[P] | None:
        return next((e for e in self.entries if e.base_sequence == base_sequence), None)

    def first_resend(self) -> _Entry[P] | None:
        return next((e for e in self.entries if e.resend), None)


class SequenceTracker(Generic[P]):
    """Sequences and in-flight batches of every partition, for one producer identity at a time.

    Args:
        identity: The identity InitProducerId gave; until one is known (producer id < 0)
            nothing can be sent.
        max_in_flight: Batches in flight per partition, 1 to 5
            (``max.in.flight.requests.per.connection``).

    Raises:
        ConfigError: ``max_in_flight`` is outside 1..5.
    """

    def __init__(self, identity: ProducerIdentity, *, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise ConfigError(
                f"must be 1..{MAX_IN_FLIGHT} for an idempotent producer, got {max_in_flight}",
                key="max.in.flight.requests.per.connection",
            )
        self._identity = identity
        self._max_in_flight = max_in_flight
        self._partitions: dict[TopicPartition, _Partition[P]] = {}

    # -- queries ---------------------------------------------------------------------------

    @property
    def identity(self) -> ProducerIdentity:
        """The identity new batches are sent with."""
        return self._identity

    def next_sequence(self, tp: TopicPartition) -> int:
        """The base sequence the next new batch of ``tp`` will get."""
        part = self._partitions.get(tp)
        return part.next_sequence if part is not None else 0

    def in_flight(self, tp: TopicPartition | None = None) -> int:
        """Batches sent and not yet settled, for ``tp`` or (None) for every partition."""
        parts = self._partitions.values() if tp is None else [self._part(tp)]
        return sum(len(part.entries) for part in parts)

    def in_flight_payloads(self, tp: TopicPartition) -> Iterator[P]:
        """The payloads of ``tp``'s unsettled batches, in sequence order."""
        return (entry.payload for entry in self._part(tp).entries)

    def broken(self, tp: TopicPartition) -> EosError | None:
        """The error that broke ``tp``'s sequence, or None while it is intact."""
        part = self._partitions.get(tp)
        return part.broken if part is not None else None

    def can_send(self, tp: TopicPartition) -> bool:
        """Whether a *new* batch may be sent to ``tp`` now.

        Not before an identity is known, not on a broken partition, not while a resend is
        pending (resends go first, in order), and not with ``max_in_flight`` batches out.
        """
        if self._identity.producer_id < 0:
            return False
        part = self._partitions.get(tp)
        if part is None:
            return True
        return (
            part.broken is None
            and part.first_resend() is None
            and len(part.entries) < self._max_in_flight
        )

    def partitions_with_resends(self) -> list[TopicPartition]:
        """The partitions that have a batch waiting for a resend."""
        return [tp for tp, part in self._partitions.items() if part.first_resend() is not None]

    def peek_resend(self, tp: TopicPartition) -> P | None:
        """The payload of ``tp``'s next batch due for a resend, without taking it."""
        entry = self._part(tp).first_resend()
        return entry.payload if entry is not None else None

    # -- sending ---------------------------------------------------------------------------

    def assign(self, tp: TopicPartition, record_count: int, payload: P, *, deadline: float) -> (
        SendTicket
    ):
        """Give a new batch of ``record_count`` records its sequences and count it in flight.

        Args:
            tp: The batch's partition.
            record_count: Records in the batch (at least 1).
            payload: What to hand back on a retry or a failure (the accumulator's batch).
            deadline: When the batch's delivery timeout passes (same clock as ``now``).

        Returns:
            The ticket to send the batch with and to pass to :meth:`on_response`.

        Raises:
            IllegalStateError: :meth:`can_send` is False for ``tp``; nothing changed.
            ValueError: ``record_count`` < 1; nothing changed.
        """
        if record_count < 1:
            raise ValueError(f"a batch holds at least one record, got {record_count}")
        if not self.can_send(tp):
            raise IllegalStateError(f"{tp}: no new batch may be sent now (see can_send)")
        part = self._partitions.setdefault(tp, _Partition())
        entry = _Entry(part.next_sequence, record_count, deadline, payload)
        part.entries.append(entry)
        part.next_sequence = advance_sequence(part.next_sequence, record_count)
        return self._ticket(tp, entry)

    def take_resend(self, tp: TopicPartition) -> tuple[P, SendTicket] | None:
        """Take ``tp``'s next batch due for a resend: same sequences, next attempt number.

        Returns:
            The payload and its new ticket, or None if nothing of ``tp`` waits for a resend
            (or the partition is broken).
        """
        part = self._partitions.get(tp)
        entry = part.first_resend() if part is not None and part.broken is None else None
        if entry is None:
            return None
        entry.resend = False
        entry.attempt += 1
        return entry.payload, self._ticket(tp, entry)

    # -- responses -------------------------------------------------------------------------

    def on_response(self, ticket: SendTicket, code: int) -> Outcome[P]:
        """Feed one partition's answer to a Produce attempt.

        Args:
            ticket: The ticket the batch was sent with.
            code: The partition's error code in the Produce response; for a dropped
                connection pass NETWORK_EXCEPTION (13): the outcome is unknown and a resend
                with the same sequences is deduplicated.

        Returns:
            What the caller does with the batch: see :data:`Outcome`.
        """
        if ticket.identity != self._identity:
            return Ignored(f"response for an older producer identity {ticket.identity}")
        part = self._partitions.get(ticket.tp)
        entry = part.find(ticket.base_sequence) if part is not None else None
        if part is None or entry is None:
            return Ignored("the batch was already settled")
        if is_success(ApiKey.PRODUCE, code):  # 0, or 46: the broker already has it
            part.entries.remove(entry)
            return Acked(entry.payload)
        if ticket.attempt != entry.attempt:
            return Ignored(f"an error from attempt {ticket.attempt}, superseded by a resend")
        return self._on_error(ticket.tp, part, entry, error_for(ApiKey.PRODUCE, code))

    def expire(self, now: float) -> list[tuple[P, EosError]]:
        """Give up on in-flight batches whose delivery deadline has passed.

        Their outcome is unknown, so their partition's sequence is broken (KIP-360): each is
        failed with :class:`EpochBumpRequiredError`, and so is every batch of the same
        partition that was waiting for a resend.

        Returns:
            ``(payload, error)`` for every batch given up, in partition and sequence order.
        """
        failed: list[tuple[P, EosError]] = []
        for tp, part in self._partitions.items():
            expired = [e for e in part.entries if e.deadline <= now]
            if not expired:
                continue
            error = _expired_error(tp, len(expired))
            for entry in expired:
                part.entries.remove(entry)
                failed.append((entry.payload, error))
            failed.extend((payload, error) for payload in self._break(part, error))
        return failed

    def reset(self, identity: ProducerIdentity) -> tuple[P, ...]:
        """Start over under a new identity (KIP-360 bump): every partition back to sequence 0.

        Args:
            identity: The identity InitProducerId returned; it must differ from the current
                one, or the broker would see sequence 0 again on the same epoch.

        Returns:
            The payloads still in flight under the old identity; their responses will be
            ignored, so the caller fails them.

        Raises:
            ValueError: ``identity`` is the current one; nothing changed.
        """
        if identity == self._identity:
            raise ValueError(f"reset to the same producer identity {identity}")
        dropped = tuple(e.payload for part in self._partitions.values() for e in part.entries)
        self._partitions.clear()
        self._identity = identity
        return dropped

    # -- internals -------------------------------------------------------------------------

    def _part(self, tp: TopicPartition) -> _Partition[P]:
        return self._partitions.get(tp) or _Partition()

    def _ticket(self, tp: TopicPartition, entry: _Entry[P]) -> SendTicket:
        return SendTicket(tp, self._identity, entry.base_sequence, entry.record_count,
                          entry.attempt)

    def _on_error(
        self, tp: TopicPartition, part: _Partition[P], entry: _Entry[P], error: EosError
    ) -> Outcome[P]:
        if part.broken is not None:
            return self._fail(part, entry, _after_break(tp, part.broken, error))
        if _should_retry(part, entry, error):
            index = part.entries.index(entry)
            for later in part.entries[index:]:  # ordered retry: this one and all after it
                later.resend = True
            return Retry(len(part.entries) - index)
        return self._fail(part, entry, error)

    def _fail(self, part: _Partition[P], entry: _Entry[P], error: EosError) -> Failed[P]:
        part.entries.remove(entry)
        return Failed(error, (entry.payload, *self._break(part, error)))

    @staticmethod
    def _break(part: _Partition[P], error: EosError) -> tuple[P, ...]:
        """Mark ``part`` broken; drop and return the batches that waited for a resend."""
        if part.broken is None:
            part.broken = error
        waiting = tuple(e.payload for e in part.entries if e.resend)
        part.entries = [e for e in part.entries if not e.resend]
        return waiting


def _should_retry(part: _Partition[P], entry: _Entry[P], error: EosError) -> bool:
    if isinstance(error, RetriableError):
        return True
    # 45 behind an unsettled earlier batch: the gap is that batch's, and its resend fills it.
    return error.code == _OUT_OF_ORDER_SEQUENCE_NUMBER and entry is not part.entries[0]


def _after_break(tp: TopicPartition, first: EosError, error: EosError) -> EosError:
    """The error for a batch answered after its partition's sequence broke."""
    if isinstance(error, FatalError | FencedError):
        return error
    bump = EpochBumpRequiredError(
        f"{tp.topic}[{tp.partition}]: the sequence broke earlier ({first}); then: {error}",
        code=error.code,
        code_name=error.code_name,
        api=ApiKey.PRODUCE,
    )
    bump.__cause__ = error
    return bump


def _expired_error(tp: TopicPartition, count: int) -> EpochBumpRequiredError:
    return EpochBumpRequiredError(
        f"{tp.topic}[{tp.partition}]: {count} batch(es) expired in flight (delivery timeout)"
        " with no answer; their outcome is unknown, so the sequence is broken (KIP-360)",
        api=ApiKey.PRODUCE,
    )
