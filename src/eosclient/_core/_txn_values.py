"""Values the transaction core hands out and keeps: outputs, named conditions, completions, jobs.

Private; :mod:`eosclient._core.txn` re-exports the public ones.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eosclient._core._txn_table import Input
from eosclient._core._txn_wire import GroupMetadata, Node
from eosclient._core.types import NO_IDENTITY, ProducerIdentity, TopicPartition
from eosclient.errors import ApiKey, EosError, IllegalStateError

__all__ = [
    "MAY_LAND_LATE",
    "REGISTRATION",
    "WAIT_OF",
    "AbortHistory",
    "Completion",
    "Destination",
    "EarlyAbort",
    "EndOutcome",
    "Ending",
    "FailUnsent",
    "InitForm",
    "Job",
    "Output",
    "Recovery",
    "SendRequest",
    "SequencesReset",
    "Step",
    "Stragglers",
    "TransactionExpired",
    "TxnCounts",
    "Wait",
    "is_successor",
]


class Destination(enum.Enum):
    """Where a request goes; the facade resolves coordinators through :attr:`SendRequest.node`."""

    TXN_COORDINATOR = "the transaction coordinator"
    GROUP_COORDINATOR = "the group coordinator"
    ANY_BROKER = "any broker"


@dataclass(frozen=True, slots=True)
class SendRequest:
    """Send ``request`` to ``node`` (any broker when None), not before ``not_before``."""

    request: Any
    destination: Destination
    node: Node | None
    not_before: float


@dataclass(frozen=True, slots=True)
class FailUnsent:
    """Fail every batch of ``generation`` (and older) that has not been sent, with ``error``."""

    generation: int
    error: EosError


@dataclass(frozen=True, slots=True)
class SequencesReset:
    """The identity changed: every partition's sequence starts again at 0."""

    old: ProducerIdentity
    new: ProducerIdentity


@dataclass(frozen=True, slots=True)
class TransactionExpired:
    """The open transaction passed ``transaction.timeout.ms``; the client is aborting it itself.

    The facade logs ``message`` at WARNING: nothing else tells an operator why the application's
    next call fails, or why the LSO moved on while the application was stuck.
    """

    generation: int
    message: str


Output = SendRequest | FailUnsent | SequencesReset | TransactionExpired


class Recovery(enum.Enum):
    """How the open transaction will be aborted."""

    ABORT = "EndTxn(abort); the epoch stays"
    BUMP_EPOCH = "EndTxn(abort), then InitProducerId(id, producer id, epoch) (KIP-360)"


class Stragglers(enum.Enum):
    """Whether a request of the transaction may still reach the coordinator after its end.

    A request whose answer was lost (request timeout, cut connection) may still be queued at the
    broker, which goes on processing what it has read after the client hung up. A late EndTxn,
    TxnOffsetCommit or registration carries the transaction's epoch; if the next transaction used
    the same epoch, it would land there (commit or abort it, rewind its offsets). So once such a
    transaction has ended, the epoch is bumped before the next one: both brokers reject EndTxn
    with the previous epoch (noida-db INVALID_PRODUCER_EPOCH 47; Tansu drops the connection).
    """

    NONE = "every coordinator request of the transaction was answered"
    POSSIBLE = "an answer was lost: the request may still land; bump the epoch after the end"


class AbortHistory(enum.Enum):
    """Whether the client knows every partition its producer id ever aborted records on.

    Those are the partitions that noida-db refuses to commit registered and empty (``txn.py``,
    Decisions: pre-registration), so only where this is KNOWN are declared partitions registered
    before their first record.
    """

    KNOWN = "a new producer id (epoch 0 at init): every transaction it had was this client's"
    UNKNOWN = "the producer id had an earlier holder (epoch > 0 at init): its aborts are unknown"


class EarlyAbort(enum.Enum):
    """Whether the client is aborting an expired transaction before the application asked.

    The application learns of it at its next call (ABORTABLE_ERROR) and must still call
    ``abort_transaction()``, which then waits for this abort or finds it done.
    """

    NONE = "the application ends the transaction"
    RUNNING = "the client is aborting the expired transaction (EndTxn(abort), maybe a bump)"
    DONE = "the coordinator aborted it; abort_transaction() only has to acknowledge it"


class EndOutcome(enum.Enum):
    """What is known about the EndTxn of the transaction being ended."""

    UNSENT = "no EndTxn sent yet: a commit may still be turned into an abort"
    PENDING = "an EndTxn was sent and not answered yet"
    UNKNOWN = "an EndTxn was sent and its answer lost: the coordinator may have acted"


@dataclass(frozen=True, slots=True)
class Ending:
    """The end being worked on: commit or abort, and what is known of it."""

    committed: bool
    outcome: EndOutcome = EndOutcome.UNSENT


class Wait(enum.Enum):
    """What the producer is waiting for (:meth:`TransactionCore.waiting_for`)."""

    COORDINATOR = "a FindCoordinator answer"
    PRODUCER_ID = "an InitProducerId answer"
    REGISTRATION = "AddPartitionsToTxn / AddOffsetsToTxn answers"
    OFFSETS = "a TxnOffsetCommit answer"
    BATCHES = "every batch of the transaction to be acknowledged or failed"
    END_TXN = "an EndTxn answer"


class Completion:
    """How one blocking call ends; the facade polls the core until :attr:`done`.

    Attributes:
        call: The call this completes.
        deadline: When it fails with :class:`~eosclient.errors.KafkaTimeoutError`.
    """

    __slots__ = ("_error", "call", "deadline", "done")

    def __init__(self, call: Input, deadline: float) -> None:
        self.call = call
        self.deadline = deadline
        self.done = False
        self._error: EosError | None = None

    @property
    def error(self) -> EosError | None:
        """The failure, once done; None for a success."""
        return self._error

    def result(self) -> None:
        """Return on success.

        Raises:
            EosError: the call's failure, as classified; the core's state is as it left it.
            IllegalStateError: not done yet.
        """
        if not self.done:
            raise IllegalStateError(f"{self.call.value} has not completed")
        if self._error is not None:
            raise self._error

    def _finish(self, error: EosError | None) -> None:
        if not self.done:
            self.done, self._error = True, error


class InitForm(enum.Enum):
    """The two forms of InitProducerId (the I/O layer picks the version; below v3 there is only
    the plain one, so kafka-python drops the KIP-360 fields and the bump form goes out plain)."""

    PLAIN = "InitProducerId(transactional id): a new epoch for whoever asks, fencing the owner"
    BUMP = "InitProducerId(transactional id, producer id, epoch): KIP-360, the owner's bump only"


def is_successor(old: ProducerIdentity, new: ProducerIdentity) -> bool:
    """Whether ``new`` is what bumping ``old`` gives: the same producer id with epoch + 1, or a
    new producer id at epoch 0 (the epoch ran out, or the coordinator forgot the producer id).

    Anything else means another instance re-initialised the transactional.id in between.
    """
    if new.producer_id == old.producer_id:
        return new.epoch == old.epoch + 1
    return new.epoch == 0


class Step(enum.Enum):
    """What a coordinator request is for; the value is its API."""

    FIND = ApiKey.FIND_COORDINATOR
    INIT = ApiKey.INIT_PRODUCER_ID
    ADD_PARTITIONS = ApiKey.ADD_PARTITIONS_TO_TXN
    ADD_OFFSETS = ApiKey.ADD_OFFSETS_TO_TXN
    OFFSETS = ApiKey.TXN_OFFSET_COMMIT
    END_TXN = ApiKey.END_TXN


REGISTRATION = frozenset({Step.ADD_PARTITIONS, Step.ADD_OFFSETS, Step.OFFSETS})
"""Steps that must all be settled before EndTxn."""
MAY_LAND_LATE = REGISTRATION | {Step.END_TXN}
"""Steps whose lost request could land on the next transaction (see :class:`Stragglers`)."""

WAIT_OF: Mapping[Step, Wait] = {
    Step.FIND: Wait.COORDINATOR, Step.INIT: Wait.PRODUCER_ID,
    Step.ADD_PARTITIONS: Wait.REGISTRATION, Step.ADD_OFFSETS: Wait.REGISTRATION,
    Step.OFFSETS: Wait.OFFSETS, Step.END_TXN: Wait.END_TXN,
}


@dataclass(eq=False)
class Job:
    """One coordinator request to get answered, re-sent until it is."""

    step: Step
    destination: Destination
    key: str = ""  # the coordinator's key (transactional id or group id)
    target: Destination = Destination.TXN_COORDINATOR  # FIND: which coordinator it looks up
    partitions: frozenset[TopicPartition] = frozenset()
    group: GroupMetadata | None = None
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    bump_from: ProducerIdentity = NO_IDENTITY  # INIT: the answer must be its successor (KIP-360)
    form: InitForm = InitForm.PLAIN  # INIT: the form of the request last built
    committed: bool = False  # END_TXN: commit or abort
    waiter: Completion | None = None
    not_before: float = 0.0
    attempts: int = 0
    quick_attempts: int = 0  # CONCURRENT_TRANSACTIONS answers in a row (the quick backoff)
    request: Any = None  # in flight when set
    sent_as: ProducerIdentity = NO_IDENTITY
    sent_to: Node | None = None  # the coordinator the last request went to (None: any broker)
    sent_version: int | None = None  # the version the I/O layer sent it at, once answered
    closes_in_a_row: int = 0  # END_TXN: attempts the broker answered by closing the connection
    maybe_applied: bool = False  # a request of it was lost: the broker may have acted
    done: bool = False


@dataclass(slots=True)
class TxnCounts:
    """What the core has done, for ``stats()``: counters that only grow.

    Attributes:
        committed: Transactions committed (COMMITTING -> READY).
        aborted: Transactions aborted (ABORTING -> READY).
        epoch_bumps: Identities replaced by their successor (KIP-360: the epoch bumped, or a new
            producer id at epoch 0 once the epoch ran out).
    """

    committed: int = 0
    aborted: int = 0
    epoch_bumps: int = 0
