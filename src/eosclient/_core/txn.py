"""The transactional producer's state machine, sans-IO: calls and responses in, requests out.

Theory of operation
-------------------
A transactional producer holds one identity, ``(producer id, epoch)``, handed out by the
transaction coordinator (InitProducerId), and walks one table of states
(:data:`TRANSACTIONAL_TABLE`, drawn in ``docs/producer-states.md``). Every change of state passes
through :meth:`TransactionCore._transition`, named by its cause: ``CALL_*`` when the application
asked, ``RECV_*`` when a broker answered, ``TIMER_*`` when the client's own clock ran out. A call
the table lacks raises :class:`~eosclient.errors.IllegalStateError` and changes nothing; a broker
event the table lacks is a protocol violation and goes to FATAL. Around the table sits the
conversation with the coordinators: :meth:`~TransactionCore.poll` hands out :class:`SendRequest`
values (kafka-python request objects, no version set, each tagged with where it goes and the
earliest time to send it), and :meth:`~TransactionCore.on_response` takes the answers back.
Error codes are classified only by :func:`eosclient.errors.error_for`; this module decides what
each *kind* does here.

Where each part lives:

* ``_txn_table.py``, **the machine**: states, inputs, both tables, one row per edge with its
  named guard and action, what entering each state does (``ON_ENTRY``), and the diagrams. Read
  it to know what can happen and what each change does.
* ``_txn_wire.py``, **the conversation**: the requests built and the answers read
  (kafka-python objects), what an error's kind is to the table (``input_for``), and the
  bookkeeping of asking (jobs, requests in flight, coordinators, backoff, the KIP-360 form per
  broker).
* this module, **the core**: the values it hands out and keeps, and :class:`TransactionCore`,
  which *has* a machine and a conversation. Its sections, in order: what the facade reads, the
  application's calls, the facade's inputs (``poll``, answers, batch failures), the machine's
  guards and actions (one method per name in the table, dispatched by a dict), the calls'
  checks and waits, what is asked, and what each answer does (the recovery rules below).

The KIPs followed:

* **KIP-98** (transactions). FindCoordinator(transactional id) then InitProducerId; per
  transaction AddPartitionsToTxn before the first Produce to a partition, AddOffsetsToTxn before
  TxnOffsetCommit, EndTxn last, and only once every registration and every batch is settled.
* **KIP-609-style pre-registration** (client side here; the KIP never shipped). ``begin`` with
  partitions and/or a group emits one AddPartitionsToTxn and one AddOffsetsToTxn at once, without
  waiting; a partition may be produced to once its registration succeeded
  (:meth:`~TransactionCore.partition_ready`). Undeclared partitions and groups fail locally.
  Only the declared partitions where a registration left empty is safe go out at ``begin``
  (Decisions, below); the others, and every partition without a declaration, are registered
  lazily, with their first record: all new ones of a drain in one request, one request at a time
  (Java's behaviour). A group's coordinator is looked up as soon as the
  group is named (at ``begin`` or ``send_offsets``), beside its AddOffsetsToTxn, so that
  TxnOffsetCommit follows that answer at once. So a pre-registered transaction takes three rounds
  of requests, the floor without KIP-890: registrations (and a lookup), Produce and
  TxnOffsetCommit, EndTxn. CONCURRENT_TRANSACTIONS (51) on InitProducerId or on a registration
  before any partition of the transaction is registered means the previous transaction is
  still writing markers: retried after 20 ms, doubling (Java: KAFKA-5482).
* **KIP-447**. TxnOffsetCommit carries the consumer's generation, member id and instance id, so
  the group coordinator can fence a zombie consumer.
* **KIP-360** (recovering a broken sequence). An :class:`~eosclient.errors.EpochBumpRequiredError`
  (Produce 45, 59, every Produce rejection the errors table marks so, a batch expired with its
  outcome unknown) makes the transaction abortable with :attr:`Recovery.BUMP_EPOCH`; nothing is
  bumped yet. ``abort`` then fails the unsent batches (:class:`FailUnsent`), waits for the
  in-flight ones, sends EndTxn(abort), then InitProducerId(id, producer id, epoch). A broker that
  rejects that form (Tansu: -1; UNSUPPORTED_VERSION 35; UNKNOWN_PRODUCER_ID 59, as the errors table
  notes) gets the plain InitProducerId(id) instead, and later bumps to that broker go plain at
  once. The answer must be the successor identity (epoch + 1), else FENCED. Only then READY,
  with a new identity and :class:`SequencesReset`. The producer stays ABORTING during the bump,
  so ``abort`` again resumes it. (The rules, and the plain form's residual risk, are under
  Recovery, below.)
* **KIP-588**. INVALID_PRODUCER_EPOCH (47) on Produce is abortable-with-bump (the coordinator may
  have aborted on timeout); on the coordinator APIs it is fenced, like PRODUCER_FENCED (90). The
  KIP's recovery (re-claiming the epoch a coordinator bumped on timeout) is deliberately not
  attempted: on noida-db it would fence the live instance (Decisions, below).
* **KIP-890**. TRANSACTION_ABORTABLE (120) is abortable. This client does not use transaction
  version 2 (partitions added by Produce v12, the bump inside EndTxn v5): neither broker here
  offers it (noida-db 0.2.3: Produce v9, EndTxn v3; Tansu 0.6.0: Produce v11, EndTxn v4; no
  finalized ``transaction.version`` feature in either's ApiVersions). The broker's part-1
  verification is what finally closes the KAFKA-14053 window below.

Generations
-----------
Every transaction gets a generation number (:attr:`TransactionCore.generation`, +1 at ``begin``).
``send`` returns it; the accumulator tags each batch with it and drains a new batch only when
:meth:`~TransactionCore.may_drain` agrees, which needs the batch's generation to be the current
one (the accumulator's ``drain`` asks it per batch, so this holds even before the facade applied
``FailUnsent``). Abort emits ``FailUnsent(generation)``. So a record of a failed transaction can
never be drained into the next one (kafka-python 3.0.12 does exactly that after a KIP-360 bump).
A batch already sent is different: its resend (same identity, same sequences) is allowed by
:meth:`~TransactionCore.may_resend`, also while aborting, because EndTxn must follow its answer.

Decisions
---------
* **KAFKA-14053.** A batch still in flight when EndTxn(abort) is written can land *after* the
  abort marker with the same epoch, where a later commit marker could commit it. So EndTxn, for
  abort as for commit, waits until the facade reports no incomplete batch: unsent ones failed,
  in-flight ones answered, or their connection closed. A batch whose answer can never come
  (request timeout, cut connection) must be reported with
  :meth:`~TransactionCore.on_batch_expired` only after the I/O layer closed that connection; it
  makes the abort bump the epoch and delays EndTxn(abort) by ``unknown_outcome_grace_ms``, so a
  request the broker had already read is appended before the marker. That narrows, but on a
  broker without KIP-890 verification cannot close, the window. The alternative of Java's
  proposal for KAFKA-14053 (skip EndTxn, plain fencing InitProducerId, whose abort marker carries
  a new epoch) was not taken: the plain form cannot tell a zombie from the owner and would take
  the transactional.id back from a successor. (Re-initialising, ``init`` in COMMITTING or
  ABORTING, uses the KIP-360 form too, and must get the successor identity, else FENCED.)
* **Unknown outcome.** EndTxn that timed out or lost its connection leaves the state COMMITTING
  or ABORTING with :attr:`Ending.outcome` UNKNOWN; the same EndTxn is re-sent (after finding the
  coordinator again), since the coordinator answers a repeated EndTxn as a success. ``commit``
  again resumes a commit, ``abort`` again an abort; the other one is refused (an unconfirmed
  commit may only be retried as a commit), and so is ``begin``, until the outcome is settled or
  ``init`` re-initialises (a new epoch: the coordinator completes or aborts whatever was open).
  Once settled, the epoch is bumped before READY: the lost EndTxn may still land (the same holds
  for a lost TxnOffsetCommit or registration). ``abort`` may replace a ``commit`` whose EndTxn
  has not been sent.
* **Transaction timeout: the client aborts, at once.** ``transaction.timeout.ms`` is counted
  from the transaction's first registration (the coordinator starts its clock when that request
  arrives, a little later, so the client's deadline comes first). When it passes,
  TIMER_TXN_EXPIRED moves IN_TRANSACTION (or COMMITTING whose EndTxn is unsent, or an
  ABORTABLE_ERROR nobody aborted) to ABORTABLE_ERROR, :class:`TransactionExpired` asks the facade
  to log a WARNING, and the I/O thread sends EndTxn(abort) itself, after the transaction's
  batches are answered (KAFKA-14053), bumping where KIP-360 asks. Java's client only fails the
  next call and leaves the abort to the coordinator, which aborts and bumps the epoch on its
  own. Neither broker here does (BROKERS.md), so a hung application, the very case the setting
  exists for, would hold back the LSO of every partition it wrote, and every read_committed
  reader behind it, for ever; the I/O thread is the only live party left to end it. The abort is
  what a broker would have done, so it breaks no promise: nothing of the transaction was
  committed, and the application still learns of it, because the state stays ABORTABLE_ERROR
  (its next call raises an AbortableError naming the timeout) until ``abort_transaction()``,
  which then finds the abort done (:class:`EarlyAbort`). A process
  that is stopped altogether (SIGSTOP, a VM pause) cannot do this; its successor's
  InitProducerId aborts the transaction instead.
* **KIP-588 recovery: not attempted, because on noida-db it fences the live instance.** Where
  a coordinator aborts a transaction on timeout it bumps the epoch, and the producer's next
  coordinator request is refused with 47 or 90, exactly as if another instance had taken the
  transactional.id over. KIP-588 lets the producer send InitProducerId(id, producer id, old
  epoch): Kafka's coordinator remembers that the bump was its own (the pre-timeout epoch stays
  as ``lastProducerEpoch``) and answers epoch + 1, and answers PRODUCER_FENCED if another
  instance's InitProducerId made the bump. All the safety is in that memory at the coordinator;
  the producer cannot tell the two cases apart. Not even by the narrowest trigger, "this
  producer's own transaction outlived ``transaction.timeout.ms`` (its timer fired, or the
  refusal came after the deadline) and the refusal answers a request of that transaction": a
  process paused past the timeout (GC, SIGSTOP, a VM) is precisely the zombie whose successor
  re-initialised meanwhile, so the trigger selects the dangerous case as often as the good one.
  The probe is therefore safe only on a broker that refuses a stale epoch in the KIP-360 form
  *without bumping*, and the client cannot learn whether its broker does without sending one.
  noida-db does not (it is lax): asked InitProducerId(id, producer id, e) while the live
  instance holds e + 1, it bumps to e + 2 and answers that (``tests/integration/test_wire.py``
  measures it). The zombie, seeing e + 2 rather than its successor, is FENCED, but the live
  instance is fenced too: both dead, the outcome issue 11 (item 2) removed. Tansu refuses the
  form with UNKNOWN_SERVER_ERROR and does not bump: harmless, but no recovery, and the plain
  form this client falls back to elsewhere (KIP-360, above) would fence the live instance
  outright, so it must never be used for a probe. Neither broker here aborts on timeout
  (BROKERS.md), so on them a probe could only do harm (noida-db) or nothing (Tansu). So 47 and
  90 from the coordinator stay FENCED, also past the timeout; the client's own abort (above)
  is what ends a timed-out transaction here, and where a broker does abort on timeout the
  application closes the producer and starts a new one (Java's behaviour before KIP-588). The
  Produce-47 path is not a probe: its bump follows an EndTxn(abort) that the coordinator
  accepted with the same epoch, which proves the epoch current (noida-db answers a stale
  EndTxn with 47, so that path ends FENCED before any bump). A broker known to be strict (real
  Kafka) could get the probe behind an explicit setting; nothing here can test it.
* **Pre-registration only where an empty partition is safe.** Kafka's coordinator writes its
  marker on every registered partition, written to or not, and Tansu commits such a partition
  too, so registering a declared partition at ``begin`` costs nothing there. noida-db 0.2.3
  answers EndTxn(commit) with INVALID_TXN_STATE (48) when a registered partition got no record
  and the producer id ever aborted records there (an EndTxn(abort), or an InitProducerId that
  found the transaction open: a takeover; a later commit with records there does not clear it).
  It answers only after walking the partitions in no fixed order: those before the empty one
  have their COMMIT marker, the others none, their records open and the LSO held back; its
  coordinator then forgets the partitions, so a repeated EndTxn(commit) answers NONE (and
  DescribeTransactions says CompleteCommit) with nothing written, and a successor's
  InitProducerId aborts nothing (``tests/integration/test_noida_quirks.py``, and the wire
  measurements in ``docs/testing.md``). Neither "committed" nor "aborted" is then true, and
  nothing the client can send makes it so, so it avoids the situation: a declared partition is
  registered at ``begin`` only where the client knows an empty registration is safe, i.e. it
  saw every transaction of its producer id (InitProducerId gave epoch 0: a new producer id,
  never handed to anyone before; a KIP-360 bump of it keeps that) and none of those that were
  not committed queued a record there (:class:`AbortHistory`).
  Every other declared partition is registered with its first record, so one that gets no
  record is never in the transaction. After a takeover (epoch > 0) that is every one: the
  earlier instances' aborts are unknown. Not taken: a record written to every empty registered
  partition (filler in the application's data); answering the 48 with success, or with an
  "outcome unknown" error (half the transaction may be open for ever: neither is the truth, and
  a retry or DescribeTransactions cannot tell); asking the broker where the producer id aborted
  (DescribeTransactions shows only the open transaction; noida-db's Fetch lists every abort a
  partition ever had, but that is a second noida-db bug to depend on). The cost: where the
  producer id had an earlier holder, a declared partition's registration no longer overlaps the
  application's work before its first record (in Java it never does).
* **Timeouts.** A blocking call returns a :class:`Completion`; when ``now`` passes its deadline
  it fails with :class:`~eosclient.errors.KafkaTimeoutError` while the work goes on (as in Java).
  If the work then succeeds, the same call made again returns that success at once.

Recovery
--------
The rules the answers follow (the review that found each is in the tests' comments):

* **A lost answer may land late.** An EndTxn, TxnOffsetCommit or registration whose answer was
  lost marks the transaction (:class:`Stragglers`); once its end is confirmed, the epoch is bumped
  (InitProducerId's KIP-360 form) before READY, so a copy still queued at the broker carries a
  stale epoch and is rejected instead of acting on the next transaction.
* **A bump must give the successor.** After a bump, or a re-initialisation of the same instance
  (``init`` from COMMITTING or ABORTING, which also uses the KIP-360 form), the answer must be
  the same producer id with epoch + 1 (or a new producer id at epoch 0): anything else means
  another instance took the transactional.id meanwhile, and the producer is FENCED instead of
  taking it back. Where a broker rejects the KIP-360 form (Tansu: -1; old brokers: 35, 59; and
  below InitProducerId v3 it cannot be sent), that broker gets the plain form, which bumps for
  whoever asks. Residual risk, documented: if another instance took the id over just before that
  plain fallback, the fallback fences it too; this producer still reports FENCED, so neither
  commits with a stale epoch, but the id has no live owner until an instance re-initialises.
  A broker that does not recognise a retried bump (noida-db bumps again) gives epoch + 2 to the
  retry of a bump whose first answer was lost: a bump whose ``k`` earlier attempts lost their
  answers takes up to epoch + 1 + ``k`` as its own (each may have bumped). What that cannot tell
  apart: another instance's InitProducerId landing where the lost attempt did not; this
  producer then takes the id over, as the latest InitProducerId does on any broker, and the
  other is fenced; neither commits with a stale epoch. (Until a cluster nemesis run lost a
  bump's answer on noida-db, this ended in FENCED, and the application had to make a new
  producer.) Apache Kafka (from reading its
  coordinator; no Kafka runs here) fences a transaction still open when the KIP-360 form comes,
  answers CONCURRENT_TRANSACTIONS, and then PRODUCER_FENCED to the retry, so re-initialising
  before the EndTxn landed ends in FENCED there too.
* **A broker that closes the connection on EndTxn** (Tansu, for a stale epoch) answers nothing:
  after ``CLOSES_MEAN_FENCED`` such attempts in a row the producer is FENCED rather than
  retrying for ever.
* **An abort never waits on a registration it does not need.** In ABORTING and ABORTABLE_ERROR a
  registration the broker *answered* with a retriable error is dropped, not retried: nothing of it
  was applied. A commit whose EndTxn was not sent yet may be turned into an abort.
"""

from __future__ import annotations

import copy
import enum
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from eosclient._core import _txn_wire as wire
from eosclient._core._txn_table import (
    IDEMPOTENT_TABLE,
    ON_ENTRY,
    TRANSACTIONAL_TABLE,
    Action,
    Guard,
    Input,
    State,
    StateMachine,
    Transition,
    mermaid_diagram,
)
from eosclient._core._txn_wire import (
    BUMP_FORM_REJECTED,
    CLOSES_MEAN_FENCED,
    MAY_LAND_LATE,
    REGISTRATION,
    Conversation,
    Destination,
    GroupMetadata,
    InitForm,
    Job,
    Node,
    SendRequest,
    Step,
    closed_by_broker,
    fenced_by_closes,
    input_for,
)
from eosclient._core.types import NO_IDENTITY, ProducerIdentity, TopicPartition
from eosclient.errors import (
    AbortableError,
    ApiKey,
    EosError,
    EpochBumpRequiredError,
    FatalError,
    FencedError,
    IllegalStateError,
    InvalidGroupIdError,
    KafkaTimeoutError,
    ProtocolError,
    RequestNotSentError,
    RetriableError,
    UnknownPartitionError,
    UsageError,
    error_for,
    error_for_codes,
    is_success,
)

__all__ = [
    "CLOSES_MEAN_FENCED",
    "IDEMPOTENT_TABLE",
    "NO_IDENTITY",
    "TRANSACTIONAL_TABLE",
    "AbortHistory",
    "Completion",
    "Destination",
    "EarlyAbort",
    "EndOutcome",
    "Ending",
    "FailUnsent",
    "GroupMetadata",
    "Input",
    "Node",
    "Output",
    "ProducerIdentity",
    "Recovery",
    "SendRequest",
    "SequencesReset",
    "State",
    "Stragglers",
    "TopicPartition",
    "TransactionCore",
    "TransactionExpired",
    "Transition",
    "TxnCounts",
    "Wait",
    "is_successor",
    "mermaid_diagram",
]


# -- the values the core hands out and keeps -------------------------------------------------------


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

    Those are the partitions that noida-db refuses to commit registered and empty (module
    docstring, Decisions: pre-registration), so only where this is KNOWN are declared partitions
    registered before their first record.
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


def is_successor(old: ProducerIdentity, new: ProducerIdentity, lost: int = 0) -> bool:
    """Whether ``new`` is what bumping ``old`` gives: the same producer id with epoch + 1, or a
    new producer id at epoch 0 (the epoch ran out, or the coordinator forgot the producer id).
    ``lost`` earlier attempts of the same bump whose answers were lost may each have bumped
    too, on a broker that does not recognise a retried bump (noida-db; Kafka answers a retry
    with the epoch it gave): then up to epoch + 1 + ``lost``.

    Anything else means another instance re-initialised the transactional.id in between.
    """
    if new.producer_id == old.producer_id:
        return old.epoch + 1 <= new.epoch <= old.epoch + 1 + lost
    return new.epoch == 0


WAIT_OF: Mapping[Step, Wait] = {
    Step.FIND: Wait.COORDINATOR, Step.INIT: Wait.PRODUCER_ID,
    Step.ADD_PARTITIONS: Wait.REGISTRATION, Step.ADD_OFFSETS: Wait.REGISTRATION,
    Step.OFFSETS: Wait.OFFSETS, Step.END_TXN: Wait.END_TXN,
}


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


DRAINING = frozenset({State.IN_TRANSACTION, State.COMMITTING})
"""States in which registered partitions may be produced to."""
OPEN = frozenset({State.IN_TRANSACTION, State.COMMITTING, State.ABORTING, State.ABORTABLE_ERROR})
"""States with a transaction whose batches' failures still matter."""

_TXN_CALLS = frozenset({Input.CALL_BEGIN, Input.CALL_SEND_OFFSETS, Input.CALL_COMMIT,
                        Input.CALL_ABORT})
_ERROR_STATES = frozenset({State.ABORTABLE_ERROR, State.FENCED, State.FATAL})
_FINISHES = {State.INITIALIZING: Input.CALL_INIT, State.COMMITTING: Input.CALL_COMMIT,
             State.ABORTING: Input.CALL_ABORT}
"""The call a state works for: leaving it for READY finishes that call."""
_ABANDONING = frozenset({State.ABORTING, State.ABORTABLE_ERROR})
"""States in which registrations are no longer needed (the transaction will be aborted)."""
_CONCURRENT_TRANSACTIONS = 51
_INVALID_TXN_STATE = 48
# CONCURRENT_TRANSACTIONS (51) on these before any partition of the transaction is registered
# means the previous transaction's end is still completing (Java's rule: no partition in the
# transaction yet). A group registered first does not change that: pre-registration sends
# AddPartitionsToTxn and AddOffsetsToTxn together, and either may be answered first.
_REGISTERING = frozenset({Step.ADD_PARTITIONS, Step.ADD_OFFSETS})

_Do = Callable[[Transition, EosError | None, float], None]
"""An action's method: the change made (its cause as given), the error it carries, the time."""


def _again(error: EosError) -> EosError:
    """A fresh copy of a stored error, to raise once more without growing its traceback."""
    twin = copy.copy(error)
    twin.__cause__ = error.__cause__
    return twin


# -- the core --------------------------------------------------------------------------------------


class TransactionCore:
    """The transactional (or idempotent) producer's protocol state, without I/O.

    Args:
        transactional_id: The transactional.id; None for an idempotent producer, whose table
            (:data:`IDEMPOTENT_TABLE`) has no transactions.
        transaction_timeout_ms: Sent in InitProducerId.
        retry_backoff_ms: Wait before the first retry of a coordinator request; doubled per
            attempt up to ``retry_backoff_max_ms``.
        retry_backoff_max_ms: The cap on a retry's wait.
        unknown_outcome_grace_ms: How long EndTxn(abort) waits after a batch expired with its
            outcome unknown (KAFKA-14053, see the module docstring).
        history_size: How many transitions :attr:`history` keeps.

    Driving it: make the application's call; then :meth:`poll` and act on every output (send a
    :class:`SendRequest` to its node, not before ``not_before``; pass :class:`FailUnsent` to the
    accumulator's ``fail_generation`` and :class:`SequencesReset` to its ``reset_identity``);
    drain a new batch only where :meth:`may_drain` allows its generation, resend a batch only
    where :meth:`may_resend` allows (the accumulator's ``drain`` takes this core as its gate);
    feed each answer to :meth:`on_response` (or :meth:`on_request_failed`) and each failed batch
    to :meth:`on_produce_error` (or :meth:`on_batch_expired`); poll again after every answer and
    at :meth:`next_timer` at the latest. A blocking call has returned when its
    :class:`Completion` is done. ``now`` is monotonic seconds; deadlines use the same clock.

    It has a :class:`~eosclient._core._txn_table.StateMachine` (the table; it judges the table's
    guards and runs its actions through this class's methods) and a
    :class:`~eosclient._core._txn_wire.Conversation` (the requests in progress).
    """

    def __init__(
        self,
        *,
        transactional_id: str | None,
        transaction_timeout_ms: int = 60_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        unknown_outcome_grace_ms: int = 1_000,
        history_size: int = 64,
    ) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        table = IDEMPOTENT_TABLE if transactional_id is None else TRANSACTIONAL_TABLE
        self._machine = StateMachine(table, history_size=history_size, holds=self._holds)
        self._conv = Conversation(backoff=retry_backoff_ms / 1000,
                                  backoff_max=retry_backoff_max_ms / 1000)
        self._grace = unknown_outcome_grace_ms / 1000
        self._outbox: list[Output] = []
        self.identity: ProducerIdentity = NO_IDENTITY
        self.generation = 0
        self.counts = TxnCounts()
        self._abort_history = AbortHistory.UNKNOWN  # until InitProducerId answers
        self._aborted_on: set[TopicPartition] = set()  # may hold aborted records of this id
        self._error: EosError | None = None
        self._waiters: list[Completion] = []
        self._timed_out: set[Input] = set()
        self._unclaimed: Input | None = None  # a call that timed out, then succeeded
        self._incomplete = False
        # The table names guards and actions; these are their bodies (the methods of the
        # "machine" section below), one per name. Then each answer's reader, by its request.
        self._guards: Mapping[Guard, Callable[[], bool]] = {
            Guard.END_TXN_UNSENT: self._end_txn_unsent,
        }
        self._actions: Mapping[Action, _Do] = {
            Action.FINISH: self._finish,
            Action.START_COMMIT: self._start_commit,
            Action.START_ABORT: self._start_abort,
            Action.FAIL_TRANSACTION: self._fail_transaction,
            Action.STOP: self._stop,
            Action.CLOSE: self._close,
            Action.ASK_PRODUCER_ID: self._ask_producer_id,
            Action.REINITIALISE: self._reinitialise,
            Action.RESUME: self._resume,
            Action.DROP_COMMIT: self._drop_commit,
            Action.OWE_BUMP: self._owe_bump,
            Action.ABORT_EXPIRED: self._abort_expired,
            Action.BUMP_EPOCH: self._bump_epoch,
            Action.SETTLE_EARLY: self._settle_early,
        }
        self._answers: Mapping[Step, Callable[[Job, Any, float], None]] = {
            Step.FIND: self._on_find,
            Step.INIT: self._on_init,
            Step.ADD_PARTITIONS: self._on_add_partitions,
            Step.ADD_OFFSETS: self._on_add_offsets,
            Step.OFFSETS: self._on_offsets,
            Step.END_TXN: self._on_end_txn,
        }
        self._reset_transaction()

    def _reset_transaction(self) -> None:
        """Forget the transaction: what is declared, registered and sent, and how it ends."""
        self._declared: frozenset[TopicPartition] | None = None
        self._declared_group: str | None = None
        self._registered: set[TopicPartition] = set()
        self._adding: set[TopicPartition] = set()  # in an AddPartitionsToTxn not yet answered
        self._pending: set[TopicPartition] = set()  # lazily added, not yet asked for
        self._sent_to: set[TopicPartition] = set()  # send() queued records for these
        self._groups: set[str] = set()  # groups whose AddOffsetsToTxn succeeded
        self._ending: Ending | None = None
        self._recovery = Recovery.ABORT
        self._stragglers = Stragglers.NONE
        self._quiet_until = 0.0
        self._txn_deadline: float | None = None  # armed by the first registration
        self._early = EarlyAbort.NONE


    # -- what the facade reads ---------------------------------------------------------------------

    @property
    def state(self) -> State:
        """The current state."""
        return self._machine.state

    @property
    def transactional(self) -> bool:
        """False for an idempotent-only producer (no transactional_id)."""
        return self.transactional_id is not None

    @property
    def history(self) -> tuple[Transition, ...]:
        """The latest transitions, oldest first (``CALL_SEND`` is checked, never recorded)."""
        return tuple(self._machine.history)

    @property
    def retries(self) -> int:
        """Coordinator requests sent again (a retriable error, a lost answer), for stats()."""
        return self._conv.retries

    @property
    def recovery(self) -> Recovery | None:
        """How the failed transaction will be aborted; None outside ABORTABLE_ERROR/ABORTING."""
        abortable = self.state in (State.ABORTABLE_ERROR, State.ABORTING)
        return self._recovery if abortable else None

    @property
    def ending(self) -> Ending | None:
        """The EndTxn being worked on (commit or abort, outcome pending or unknown), if any."""
        return self._ending

    @property
    def error(self) -> EosError | None:
        """The error that put the producer in ABORTABLE_ERROR, FENCED or FATAL."""
        return self._error

    def waiting_for(self) -> frozenset[Wait]:
        """What the producer waits for before it can move on."""
        return frozenset(self._waits())

    def next_timer(self) -> float | None:
        """When :meth:`poll` must run even if nothing arrives (the nearest deadline, including
        the open transaction's ``transaction.timeout.ms``)."""
        deadlines = [w.deadline for w in self._waiters if not w.done]
        if self._txn_deadline is not None and self._machine.allows(Input.TIMER_TXN_EXPIRED):
            deadlines.append(self._txn_deadline)
        return min(deadlines, default=None)

    def partition_ready(self, tp: TopicPartition) -> bool:
        """Whether batches for ``tp`` may be sent now (registered in the open transaction)."""
        if not self.transactional:
            return self._machine.state is State.READY
        return self._machine.state in DRAINING and tp in self._registered

    def may_drain(self, tp: TopicPartition, generation: int) -> bool:
        """Whether a new batch tagged ``generation`` may be drained for ``tp`` now.

        A batch of an earlier generation never may: a record of a failed transaction is never
        drained into a later one (KIP-360).
        """
        return generation == self.generation and self.partition_ready(tp)

    def may_resend(self, tp: TopicPartition) -> bool:
        """Whether a batch of ``tp`` that was already sent, and is due for a resend, may go now.

        Unlike :meth:`may_drain` this holds while the transaction is failing or aborting too:
        EndTxn(abort) waits until every batch sent in the transaction is answered (KAFKA-14053),
        and a batch whose answer was a retriable error is answered only by its resend, under
        its original identity and sequences (which the broker deduplicates). Never after the
        transaction ended, was fenced or failed fatally, or for a partition it never registered.
        """
        if not self.transactional:
            return self._machine.state is State.READY
        return self._machine.state in OPEN and tp in self._registered

    # -- application calls -------------------------------------------------------------------------

    def init(self, now: float, deadline: float) -> Completion:
        """CALL_INIT: get a producer id, resume an init that timed out, or re-initialise.

        From COMMITTING or ABORTING this abandons the transaction (its unsent batches are
        failed) and asks for a new epoch with the KIP-360 form; the coordinator completes or
        aborts what was open. An answer other than epoch + 1 fails it with FencedError.

        Raises:
            IllegalStateError: not allowed in this state; nothing changed.
            FencedError: the producer was fenced (FatalError likewise); nothing changed.
        """
        if (done := self._claim(Input.CALL_INIT)) is not None:
            return done
        self._call(Input.CALL_INIT, "init_transactions()", now)
        return self._wait(Input.CALL_INIT, deadline)

    def begin(
        self,
        now: float,
        *,
        partitions: Iterable[TopicPartition] | None = None,
        group_id: str | None = None,
    ) -> None:
        """CALL_BEGIN: open a transaction; never waits.

        Args:
            now: The current time.
            partitions: The partitions the transaction may write; ``send`` to any other
                partition raises UnknownPartitionError. Those where an empty registration is
                safe are registered at once (one AddPartitionsToTxn), the others with their
                first record (module docstring, Decisions: pre-registration).
            group_id: Pre-register this group (AddOffsetsToTxn, sent at once);
                ``send_offsets`` for another group then raises InvalidGroupIdError.

        Raises:
            IllegalStateError: no transactional_id, or not READY (e.g. an EndTxn outcome is
                still unknown); nothing changed.
            AbortableError: the open transaction failed and must be aborted; nothing changed.
            InvalidGroupIdError: ``group_id`` is empty; nothing changed.
        """
        declared = None
        if partitions is not None:
            declared = frozenset(TopicPartition(*tp) for tp in partitions)
        if group_id is not None and not group_id:
            raise InvalidGroupIdError("group_id must be a non-empty string")
        self._call(Input.CALL_BEGIN, "begin_transaction()", now)
        self._unclaimed = None
        self.generation += 1
        self._reset_transaction()
        self._declared, self._declared_group = declared, group_id
        if declared and (early := self._preregistrable(declared)):
            self._add_partitions_job(early, now)
        if group_id is not None:
            self._register_group(group_id, now)

    def send(self, tp: TopicPartition) -> int:
        """CALL_SEND: check that a record may be queued for ``tp``; return its generation.

        An unregistered ``tp`` (declared or not) is registered lazily: the next :meth:`poll`
        asks for every such partition in one AddPartitionsToTxn.

        Raises:
            UnknownPartitionError: ``tp`` was not declared at ``begin``; nothing changed.
            IllegalStateError: no transaction is open; nothing changed.
            AbortableError: the transaction failed (Fenced/FatalError likewise); nothing changed.
        """
        if self._machine.state is State.IN_TRANSACTION and (
                tp in self._registered or tp in self._adding or tp in self._pending):
            self._sent_to.add(tp)
            return self.generation  # the hot path: registered, or on its way (checked then)
        self._check(Input.CALL_SEND)
        if self._declared is not None and tp not in self._declared:
            raise UnknownPartitionError(
                f"send() to {tp.topic}[{tp.partition}], which begin_transaction(partitions="
                "...) did not declare; nothing was queued"
            )
        if self.transactional:
            self._sent_to.add(tp)
            if tp not in self._registered and tp not in self._adding:
                self._pending.add(tp)
        return self.generation

    def declared_partitions(self, topic: str) -> tuple[TopicPartition, ...] | None:
        """``topic``'s partitions declared at ``begin``, in order; None without a declaration."""
        if self._declared is None:
            return None
        return tuple(sorted(tp for tp in self._declared if tp.topic == topic))

    def add_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """:meth:`send`'s checks and lazy registration for many partitions (the bulk path)."""
        for tp in tps:
            self.send(tp)

    def send_offsets(
        self,
        offsets: Mapping[TopicPartition, int],
        group: GroupMetadata | str,
        now: float,
        deadline: float,
    ) -> Completion:
        """CALL_SEND_OFFSETS: commit consumer offsets inside the transaction (KIP-447).

        AddOffsetsToTxn first unless the group was registered, then TxnOffsetCommit to the
        group coordinator. Commit waits for it; waiting on the completion is optional.

        Raises:
            InvalidGroupIdError: another group was declared at ``begin``; nothing changed.
            IllegalStateError: no transaction is open; nothing changed.
            AbortableError: the transaction failed (Fenced/FatalError likewise); nothing changed.
        """
        meta = group if isinstance(group, GroupMetadata) else GroupMetadata(group)
        self._check(Input.CALL_SEND_OFFSETS)
        if self._declared_group is not None and meta.group_id != self._declared_group:
            raise InvalidGroupIdError(
                f"send_offsets_to_transaction() for group {meta.group_id!r}, but "
                f"begin_transaction() declared {self._declared_group!r}; nothing was sent"
            )
        self._call(Input.CALL_SEND_OFFSETS, f"offsets of group {meta.group_id!r}", now)
        waiter = self._wait(Input.CALL_SEND_OFFSETS, deadline)
        if not offsets:
            waiter._finish(None)
            return waiter
        self._register_group(meta.group_id, now)
        self._conv.add(Job(Step.OFFSETS, Destination.GROUP_COORDINATOR, key=meta.group_id,
                           group=meta, offsets=dict(offsets), waiter=waiter._finish,
                           not_before=now))
        return waiter

    def commit(self, now: float, deadline: float) -> Completion:
        """CALL_COMMIT: end the transaction with EndTxn(commit), or resume that.

        EndTxn goes out once every registration is answered and the facade reports no
        incomplete batch. If its outcome is lost, the same EndTxn is sent again.

        Raises:
            AbortableError: the transaction failed: abort it; nothing changed.
            IllegalStateError: not in a transaction, or aborting; nothing changed.
            FencedError: the producer was fenced (FatalError likewise); nothing changed.
        """
        if (done := self._claim(Input.CALL_COMMIT)) is not None:
            return done
        self._call(Input.CALL_COMMIT, "commit_transaction()", now)
        return self._wait(Input.CALL_COMMIT, deadline)

    def abort(self, now: float, deadline: float) -> Completion:
        """CALL_ABORT: fail the unsent batches, EndTxn(abort), and bump if KIP-360 asks.

        Raises:
            IllegalStateError: not in a transaction, or committing and EndTxn(commit) was
                sent (an unconfirmed commit may only be retried as a commit); nothing changed.
            FencedError: the producer was fenced (FatalError likewise); nothing changed.
        """
        if (done := self._claim(Input.CALL_ABORT)) is not None:
            return done
        self._call(Input.CALL_ABORT, "abort_transaction()", now)
        return self._wait(Input.CALL_ABORT, deadline)

    def abandon(self, completion: Completion) -> None:
        """The caller stopped waiting for ``completion`` before its deadline (an asyncio task
        was cancelled): treat it as timed out now, so the same call made again resumes the
        work, or returns its success if that came meanwhile, exactly as after a timeout.

        A completion already done with a success nobody saw is kept for the next call the same
        way; one done with an error needs nothing (the error state raises it again).
        """
        if completion.done:
            if completion.error is None:
                self._unclaimed = completion.call
            return
        completion._finish(self._timeout(completion.call))
        self._timed_out.add(completion.call)
        self._waiters = [w for w in self._waiters if not w.done]

    def close(self) -> None:
        """CALL_CLOSE: stop; pending calls fail, unsent batches are failed. Idempotent."""
        self._unclaimed = None
        self._call(Input.CALL_CLOSE, "close()", 0.0)

    # -- the facade's inputs: time, answers, batch failures ----------------------------------------

    def poll(self, now: float, *, incomplete_batches: bool) -> list[Output]:
        """Advance timers and the conversation; return what the facade must do, oldest first.

        Args:
            now: The current time.
            incomplete_batches: Whether any batch of the open transaction is unsent or awaiting
                its answer (Java's ``accumulator.hasIncomplete()``); EndTxn waits while it is.

        Returns:
            SendRequest, FailUnsent and SequencesReset values. Call again after every response.
        """
        self._expire(now)
        self._incomplete = incomplete_batches
        self._check_expiry(now)
        if self._machine.state in DRAINING and self._pending and not self._adding:
            self._add_partitions_job(frozenset(self._pending), now)
            self._pending.clear()
        if self._machine.state in (State.COMMITTING, State.ABORTING, State.ABORTABLE_ERROR):
            self._maybe_end(now)  # (ABORTABLE_ERROR: only the client's own abort has an end)
        self._outbox.extend(self._conv.emit(self._build, self.identity, self._ready))
        out, self._outbox = self._outbox, []
        return out

    def on_response(self, request: Any, response: Any, now: float) -> None:
        """Take the answer to a request from :meth:`poll`.

        An answer for abandoned work, or for an identity since replaced, is ignored.

        Raises:
            ValueError: ``request`` is not in flight here.
        """
        job = self._conv.answered(request)
        if job is None:
            return
        if job.step not in (Step.FIND, Step.INIT) and job.sent_as != self.identity:
            self._conv.finish(job)
            return
        self._answers[job.step](job, response, now)

    def on_request_failed(self, request: Any, now: float, error: EosError | None = None) -> None:
        """A request's answer will never come (connection cut, request timeout).

        Coordinator requests are sent again after the coordinator is looked up again; a lost
        EndTxn makes its outcome UNKNOWN until a repeat is answered (module docstring, Recovery).

        Raises:
            ValueError: ``request`` is not in flight here.
        """
        job = self._conv.answered(request)
        if job is not None:
            self._on_lost(job, now, error)

    def on_produce_error(
        self, error: EosError, identity: ProducerIdentity, generation: int, now: float
    ) -> None:
        """A batch failed for good with ``error`` (from ``errors.error_for(PRODUCE, code)``).

        Ignored for an old identity or a transaction already over. A retriable error here means
        the sender gave up: the batch's outcome is unknown, as in :meth:`on_batch_expired`.

        Raises:
            ValueError: ``error`` is a UsageError, not a broker's answer.
        """
        if isinstance(error, UsageError):
            raise ValueError(f"not a broker error: {error!r}")
        if isinstance(error, RetriableError):
            self.on_batch_expired(identity, generation, now, cause=error)
        elif self._current(identity, generation):
            self._transition(input_for(error), str(error), error=error, now=now)

    def on_batch_expired(
        self,
        identity: ProducerIdentity,
        generation: int,
        now: float,
        cause: EosError | None = None,
    ) -> None:
        """A batch expired with its outcome unknown; report it only once its connection closed.

        KIP-360: the abort will bump the epoch; KAFKA-14053: EndTxn(abort) waits the grace.
        """
        if not self._current(identity, generation):
            return
        self._quiet_until = max(self._quiet_until, now + self._grace)
        error = EpochBumpRequiredError(
            "a batch expired with its outcome unknown; the abort bumps the epoch (KIP-360)",
            api=ApiKey.PRODUCE,
        )
        error.__cause__ = cause
        self._transition(Input.RECV_BUMP_REQUIRED, str(error), error=error, now=now)

    # -- the machine: one change, the guards judged, the actions' bodies ---------------------------

    def _transition(
        self, event: Input, cause: str, *, error: EosError | None = None, now: float = 0.0
    ) -> None:
        """The one way the state changes: the table's row, then what ``_txn_table`` says the
        change does (the entered state's entry action, then the row's own)."""
        before = self._machine.state
        edge = self._machine.step(event, cause)
        if edge is None:
            return  # dropped: a timer with nothing to do, or a broker event after the end
        moved = Transition(before, event, edge.target, cause)
        if edge.target is not before and (entry := ON_ENTRY.get(edge.target)) is not None:
            self._actions[entry](moved, error, now)
        if edge.then is not None:
            self._actions[edge.then](moved, error, now)

    def _holds(self, guard: Guard) -> bool:
        return self._guards[guard]()

    def _end_txn_unsent(self) -> bool:
        """Guard END_TXN_UNSENT: once an EndTxn(commit) may have reached the coordinator, an
        unconfirmed commit may only be retried as a commit (no abort, no expiry)."""
        return self._ending is not None and self._ending.outcome is EndOutcome.UNSENT

    # Entry actions (``ON_ENTRY``).

    def _finish(self, moved: Transition, error: EosError | None, now: float) -> None:
        """FINISH (READY): the call the left state worked for succeeded."""
        before = moved.source
        if before is State.COMMITTING:
            self.counts.committed += 1
        elif before is State.ABORTING:
            self.counts.aborted += 1
            self._aborted_on |= self._sent_to  # its records may be in the log, aborted
        call = _FINISHES[before]
        if not self._resolve({call}, None) and call in self._timed_out:
            self._unclaimed = call  # the caller gave up waiting; the same call gets the success
        self._timed_out.discard(call)
        self._error = None
        self._reset_transaction()

    def _start_commit(self, moved: Transition, error: EosError | None, now: float) -> None:
        """START_COMMIT (COMMITTING): EndTxn(commit) is due (``_maybe_end`` sends it)."""
        self._ending = Ending(committed=True)

    def _start_abort(self, moved: Transition, error: EosError | None, now: float) -> None:
        """START_ABORT (ABORTING): abort, unless the client's own abort got there first."""
        if self._early is EarlyAbort.RUNNING:
            return  # the client's own abort goes on; abort_transaction() waits for it
        if self._early is EarlyAbort.DONE:
            self._ending = Ending(committed=False)  # nothing is registered: READY at next poll
            return
        self._begin_abort(self._error or AbortableError("the transaction was aborted"))

    def _fail_transaction(self, moved: Transition, error: EosError | None, now: float) -> None:
        """FAIL_TRANSACTION (ABORTABLE_ERROR): keep the error; the commit and offsets fail."""
        self._error = error
        self._ending = None
        self._resolve({Input.CALL_COMMIT, Input.CALL_SEND_OFFSETS}, error)

    def _stop(self, moved: Transition, error: EosError | None, now: float) -> None:
        """STOP (FENCED, FATAL): keep the error; drop every request; fail every call and batch."""
        if moved.target is State.FATAL and not isinstance(error, FatalError):
            fatal = FatalError(f"unexpected in state {moved.source.name}: {moved.input.name} "
                               f"({moved.cause})")
            fatal.__cause__, error = error, fatal
        self._error = error = error or FatalError(f"entered {moved.target.name}")
        self._drop_everything(error)

    def _close(self, moved: Transition, error: EosError | None, now: float) -> None:
        """CLOSE (CLOSED): drop every request; fail every call and batch as closed."""
        self._drop_everything(IllegalStateError("the producer was closed"))

    def _drop_everything(self, error: EosError) -> None:
        self._conv.cancel_all()
        self._resolve(Input, error)
        self._outbox.append(FailUnsent(self.generation, error))

    # Rows' actions.

    def _ask_producer_id(self, moved: Transition, error: EosError | None, now: float) -> None:
        """ASK_PRODUCER_ID: a first init (or an idempotent one): any identity will do."""
        self._conv.add(Job(Step.INIT, self._txn_destination(), key=self.transactional_id or "",
                           not_before=now))

    def _reinitialise(self, moved: Transition, error: EosError | None, now: float) -> None:
        """REINITIALISE: abandon the transaction; the same instance bumps, never takes the
        transactional.id back (InitProducerId's KIP-360 form, the successor or FENCED)."""
        abandoned = AbortableError("init_transactions() re-initialised the producer: this "
                                   "client does not know the transaction's outcome")
        self._conv.cancel_all()
        self._resolve({Input.CALL_COMMIT, Input.CALL_ABORT, Input.CALL_SEND_OFFSETS}, abandoned)
        self._outbox.append(FailUnsent(self.generation, abandoned))
        self._aborted_on |= self._sent_to  # the coordinator may abort it
        self._reset_transaction()
        self._conv.add(Job(Step.INIT, self._txn_destination(), key=self.transactional_id or "",
                           bump_from=self.identity, not_before=now))

    def _resume(self, moved: Transition, error: EosError | None, now: float) -> None:
        """RESUME: the same call again sends every waiting request at once."""
        self._conv.resume(now)

    def _drop_commit(self, moved: Transition, error: EosError | None, now: float) -> None:
        """DROP_COMMIT: abort() turned the commit into an abort before EndTxn(commit) went out."""
        self._resolve({Input.CALL_COMMIT}, AbortableError(
            "abort_transaction() was called while the commit waited: the transaction is "
            "aborted"))
        self._timed_out.discard(Input.CALL_COMMIT)

    def _owe_bump(self, moved: Transition, error: EosError | None, now: float) -> None:
        """OWE_BUMP: the abort will bump the epoch (KIP-360)."""
        self._recovery = Recovery.BUMP_EPOCH

    def _abort_expired(self, moved: Transition, error: EosError | None, now: float) -> None:
        """ABORT_EXPIRED: abort the transaction now, without waiting for the application.

        Why the client does what Java's client leaves to the broker is in the module docstring
        (Decisions: transaction timeout). The state stays ABORTABLE_ERROR, so the application's
        next call still raises, and ``abort_transaction()`` then finds this abort running or done.
        """
        self._outbox.append(TransactionExpired(self.generation, moved.cause))
        if self._early is not EarlyAbort.NONE:
            return
        self._early = EarlyAbort.RUNNING
        self._begin_abort(self._error or AbortableError(moved.cause))

    def _bump_epoch(self, moved: Transition, error: EosError | None, now: float) -> None:
        """BUMP_EPOCH: the end is confirmed; bump before READY (KIP-360, or a lost request)."""
        self._registered.clear()  # the transaction is over: nothing of it is sent again
        self._conv.add(Job(Step.INIT, Destination.TXN_COORDINATOR,
                           key=self.transactional_id or "", bump_from=self.identity,
                           not_before=now))

    def _settle_early(self, moved: Transition, error: EosError | None, now: float) -> None:
        """SETTLE_EARLY: the client's own abort, if one ran, is over at the coordinator (and
        bumped, if it had to be)."""
        if self._early is EarlyAbort.NONE:
            return
        self._early = EarlyAbort.DONE
        self._registered.clear()
        self._groups.clear()
        self._recovery = Recovery.ABORT
        self._stragglers = Stragglers.NONE

    def _begin_abort(self, error: EosError) -> None:
        """What every abort starts with: fail the unsent, drop unsent registrations, EndTxn."""
        self._outbox.append(FailUnsent(self.generation, error))
        for job in self._conv.drop_unsent(REGISTRATION | {Step.FIND}):
            self._adding -= job.partitions  # never sent: the broker cannot have acted on it
            if job.waiter is not None:
                job.waiter(error)
        self._pending.clear()
        self._ending = Ending(committed=False)
        self._resolve({Input.CALL_SEND_OFFSETS}, error)

    # -- the calls' checks and waits ---------------------------------------------------------------

    def _claim(self, call: Input) -> Completion | None:
        """A done completion if ``call`` timed out earlier and its work has since succeeded."""
        claimed, self._unclaimed = self._unclaimed is call, None
        if not claimed:
            return None
        done = Completion(call, math.inf)
        done._finish(None)
        return done

    def _check(self, call: Input) -> None:
        """Raise, changing nothing, unless the table permits ``call`` here (a row, its guard
        holding)."""
        if self._machine.permits(call):
            return
        state = self._machine.state
        if state in _ERROR_STATES and self._error is not None:
            raise _again(self._error)
        if self.transactional_id is None and call in _TXN_CALLS:
            raise IllegalStateError(f"{call.value} needs a transactional_id; this producer "
                                    "is idempotent only")
        raise IllegalStateError(self._machine.refusal(call))

    def _call(self, call: Input, cause: str, now: float) -> None:
        self._check(call)
        self._transition(call, cause, now=now)

    def _wait(self, call: Input, deadline: float) -> Completion:
        waiter = Completion(call, deadline)
        self._waiters.append(waiter)
        return waiter

    def _resolve(self, calls: Iterable[Input], error: EosError | None) -> int:
        """Finish the live completions of ``calls``; return how many there were."""
        wanted, count = frozenset(calls), 0
        for waiter in self._waiters:
            if waiter.call in wanted and not waiter.done:
                waiter._finish(error)
                count += 1
        self._waiters = [w for w in self._waiters if not w.done]
        return count

    def _expire(self, now: float) -> None:
        for waiter in self._waiters:
            if not waiter.done and now >= waiter.deadline:
                waiter._finish(self._timeout(waiter.call))
                self._timed_out.add(waiter.call)
        self._waiters = [w for w in self._waiters if not w.done]

    def _timeout(self, call: Input) -> KafkaTimeoutError:
        waits = ", ".join(sorted(w.value for w in self._waits())) or "nothing"
        ending = self._ending
        lost = ending is not None and ending.outcome is EndOutcome.UNKNOWN
        unknown = " the EndTxn outcome is unknown;" if lost else ""
        error = KafkaTimeoutError(
            f"{call.value}: deadline passed in state {self._machine.state.name}, waiting for "
            f"{waits};{unknown} the work goes on: call {call.value} again to resume"
        )
        error.__cause__ = self._conv.last_retriable
        return error

    def _waits(self) -> set[Wait]:
        waits = {WAIT_OF[job.step] for job in self._conv.jobs}
        if self._ending is not None and self._incomplete:
            waits.add(Wait.BATCHES)
        return waits

    def _current(self, identity: ProducerIdentity, generation: int) -> bool:
        """Whether a batch of ``identity`` and ``generation`` still matters."""
        if identity != self.identity:
            return False
        if self.transactional_id is None:
            return self._machine.state in (State.READY, State.INITIALIZING)
        state = self._machine.state
        ending = state in (State.COMMITTING, State.ABORTING) or self._early is not EarlyAbort.NONE
        ended = ending and self._ending is None  # over at the coordinator: bumping, or done
        return generation == self.generation and state in OPEN and not ended

    def _check_expiry(self, now: float) -> None:
        """Fire TIMER_TXN_EXPIRED once the transaction's deadline passed (once per transaction)."""
        deadline = self._txn_deadline
        if deadline is None or now < deadline:
            return
        self._txn_deadline = None
        if not self._machine.permits(Input.TIMER_TXN_EXPIRED):
            return  # nothing to expire here, or guarded (EndTxn(commit) may have landed)
        state = self._machine.state
        elapsed = now - deadline + self.transaction_timeout_ms / 1000
        cause = (
            f"transaction.timeout.ms ({self.transaction_timeout_ms} ms) passed: the transaction "
            f"of transactional.id {self.transactional_id!r} (producer id "
            f"{self.identity.producer_id}, epoch {self.identity.epoch}) was open {elapsed:.1f} s "
            "since its first registration, and no broker here aborts it, so the client is "
            "aborting it now (EndTxn(abort)) to let the LSO move on; call abort_transaction() "
            "and redo the transaction")
        error = AbortableError(cause) if state is not State.ABORTABLE_ERROR else None
        self._transition(Input.TIMER_TXN_EXPIRED, cause, error=error, now=now)

    def _txn_destination(self) -> Destination:
        if self.transactional_id is None:
            return Destination.ANY_BROKER
        return Destination.TXN_COORDINATOR

    # -- what is asked -----------------------------------------------------------------------------

    def _preregistrable(self, declared: frozenset[TopicPartition]) -> frozenset[TopicPartition]:
        """The declared partitions to register at ``begin``, before their first record: those
        the client knows this producer id never aborted records on (module docstring, Decisions:
        pre-registration). The others are registered with their first record."""
        if self._abort_history is not AbortHistory.KNOWN:
            return frozenset()
        return declared - self._aborted_on

    def _arm(self, now: float) -> None:
        """Start the transaction's clock at its first registration, as the coordinator does
        (it starts when it first hears of the transaction, a little later: so ours ends first)."""
        if self._txn_deadline is None and self.transactional_id is not None:
            self._txn_deadline = now + self.transaction_timeout_ms / 1000

    def _add_partitions_job(self, partitions: frozenset[TopicPartition], now: float) -> None:
        self._arm(now)
        self._adding |= partitions
        self._conv.add(Job(Step.ADD_PARTITIONS, Destination.TXN_COORDINATOR,
                           key=self.transactional_id or "", partitions=partitions,
                           not_before=now))

    def _register_group(self, group_id: str, now: float) -> None:
        if group_id in self._groups or any(
            job.step is Step.ADD_OFFSETS and job.group is not None
            and job.group.group_id == group_id for job in self._conv.jobs
        ):
            return
        self._arm(now)
        self._conv.add(Job(Step.ADD_OFFSETS, Destination.TXN_COORDINATOR,
                           key=self.transactional_id or "", group=GroupMetadata(group_id),
                           not_before=now))
        # TxnOffsetCommit will go to the group's coordinator: find it while AddOffsetsToTxn is
        # on its way, so the commit follows that answer at once (pre-registration, KIP-609).
        self._conv.look_up_ahead(Destination.GROUP_COORDINATOR, group_id, now)

    def _maybe_end(self, now: float) -> None:
        """Start EndTxn once nothing it must follow is outstanding (KAFKA-14053)."""
        ending = self._ending
        if ending is None or self._conv.has((Step.END_TXN,)):
            return
        if self._incomplete or self._pending or self._conv.has(REGISTRATION):
            return
        if not (self._registered or self._groups):
            self._end_confirmed("nothing was registered with the coordinator: nothing to end", now)
            return
        self._conv.add(Job(Step.END_TXN, Destination.TXN_COORDINATOR,
                           key=self.transactional_id or "", committed=ending.committed,
                           not_before=max(now, self._quiet_until)))

    def _end_confirmed(self, cause: str, now: float) -> None:
        """The end is settled: READY, or first the bump KIP-360 or a lost request asks for."""
        self._ending = None
        bump = self._recovery is Recovery.BUMP_EPOCH or self._stragglers is Stragglers.POSSIBLE
        self._transition(Input.RECV_END_TXN_BUMP if bump else Input.RECV_END_TXN_OK, cause,
                         now=now)

    def _ready(self, job: Job) -> bool:
        """Gates on (re)sending: TxnOffsetCommit follows its group's AddOffsetsToTxn, and no
        EndTxn attempt, first or repeated, goes out while a batch is incomplete (KAFKA-14053)."""
        if job.step is Step.OFFSETS:
            return job.key in self._groups
        return job.step is not Step.END_TXN or not self._incomplete

    def _build(self, job: Job) -> Any:
        txn, me = self.transactional_id or "", self.identity
        if job.step is Step.FIND:
            return wire.find_coordinator(job.key,
                                         group=job.target is Destination.GROUP_COORDINATOR)
        if job.step is Step.INIT:
            return self._build_init(job)
        if job.step is Step.ADD_PARTITIONS:
            return wire.add_partitions(txn, me, job.partitions)
        assert job.group is not None or job.step is Step.END_TXN
        if job.step is Step.ADD_OFFSETS and job.group is not None:
            return wire.add_offsets(txn, me, job.group.group_id)
        if job.step is Step.OFFSETS and job.group is not None:
            return wire.txn_offset_commit(txn, me, job.group, job.offsets)
        if self._ending is not None and self._ending.outcome is EndOutcome.UNSENT:
            self._ending = Ending(job.committed, EndOutcome.PENDING)  # from now on it may land
        return wire.end_txn(txn, me, committed=job.committed)

    def _build_init(self, job: Job) -> Any:
        """InitProducerId in the form its broker takes (per broker: the KIP-360 fallback)."""
        job.form = self._conv.init_form(job)
        bump_from = job.bump_from if job.form is InitForm.BUMP else NO_IDENTITY
        return wire.init_producer_id(self.transactional_id, self.transaction_timeout_ms,
                                     bump_from)

    # -- what each answer does ---------------------------------------------------------------------
    # Handlers read codes, classify them only with eosclient.errors, and turn each error's kind
    # into a retry or an input: retriable -> retry with backoff; otherwise the kind's RECV_*
    # input (wire.input_for) through _transition. The rules are the module docstring's Recovery.

    def _failed(self, job: Job, error: EosError, now: float) -> None:
        """A job's answer carried ``error``: retry it, or feed the error's kind to the table."""
        if isinstance(error, RetriableError):
            if job.step in REGISTRATION and self._machine.state in _ABANDONING:
                # Answered, so nothing of it was applied (partial successes are recorded); an
                # abort does not need it: retrying it could wedge the abort for ever.
                self._give_up(job, self._error or error)
                return
            quick = error.code == _CONCURRENT_TRANSACTIONS and (
                job.step is Step.INIT or (job.step in _REGISTERING and not self._registered)
            )  # the previous transaction is still completing: retry soon (KAFKA-5482)
            self._conv.retry(job, now, quick=quick, error=error)
            return
        if self._end_goes_on(job, error):
            if self._machine.state is State.ABORTING:
                self._transition(Input.RECV_ABORTABLE, str(error), error=error, now=now)
            self._conv.retry(job, now, error=error)  # the end itself (or its bump) must finish
            return
        # 47/90 from the coordinator stay FENCED even past transaction.timeout.ms: no KIP-588
        # probe (InitProducerId with the old epoch), because noida-db bumps for a stale epoch
        # in that form, so a zombie's probe would fence the live instance too (Decisions).
        self._give_up(job, error)
        self._transition(input_for(error), str(error), error=error, now=now)

    def _end_goes_on(self, job: Job, error: EosError) -> bool:
        """An AbortableError for the EndTxn of an abort, or a bump after the end: not a reason
        to abandon it (the transaction is being aborted, or is over)."""
        if input_for(error) is not Input.RECV_ABORTABLE:
            return False
        state = self._machine.state
        if state is State.ABORTING or self._early is EarlyAbort.RUNNING:
            return job.step in (Step.END_TXN, Step.INIT)
        return state is State.COMMITTING and job.step is Step.INIT

    def _give_up(self, job: Job, error: EosError) -> None:
        self._conv.finish(job)
        self._adding -= job.partitions
        if job.waiter is not None:
            job.waiter(error)

    def _on_find(self, job: Job, response: Any, now: float) -> None:
        code, message, node = wire.coordinator_of(response, job.key)
        if is_success(ApiKey.FIND_COORDINATOR, code):
            self._conv.found(job, node)
        else:
            self._failed(job, error_for(ApiKey.FIND_COORDINATOR, code, message), now)

    def _on_init(self, job: Job, response: Any, now: float) -> None:
        code, form = response.error_code, self._conv.sent_form(job)
        if is_success(ApiKey.INIT_PRODUCER_ID, code):
            self._conv.finish(job)
            self._new_identity(job, ProducerIdentity(response.producer_id,
                                                     response.producer_epoch), form, now)
        elif form is InitForm.BUMP and code in BUMP_FORM_REJECTED:
            self._conv.reject_bump_form(job)  # KIP-360 fallback: this broker gets the plain form
            job.not_before = now
        else:
            self._failed(job, error_for(ApiKey.INIT_PRODUCER_ID, code), now)

    def _new_identity(self, job: Job, new: ProducerIdentity, form: InitForm, now: float) -> None:
        old, wanted = self.identity, job.bump_from
        if wanted != NO_IDENTITY and not is_successor(wanted, new, job.lost_answers):
            fenced = FencedError(
                f"InitProducerId ({form.name.lower()} form) from producer id "
                f"{wanted.producer_id}, epoch {wanted.epoch} returned producer id "
                f"{new.producer_id}, epoch {new.epoch}: another instance re-initialised the "
                "transactional.id meanwhile, so this one is fenced", api=ApiKey.INIT_PRODUCER_ID)
            self._transition(Input.RECV_FENCED, str(fenced), error=fenced, now=now)
            return
        twice = ""
        if new.producer_id == wanted.producer_id and new.epoch > wanted.epoch + 1:
            twice = (f"; the {job.lost_answers} earlier attempt(s) whose answer was lost bumped "
                     "it too (this broker does not recognise a retried bump)")
        self.identity = new
        if old != NO_IDENTITY:  # a successor (the same id bumped, or a new id at epoch 0)
            self.counts.epoch_bumps += 1
        self._outbox.append(SequencesReset(old, new))
        self._transition(Input.RECV_INIT_OK, f"producer id {new.producer_id}, epoch "
                         f"{new.epoch} ({form.name.lower()} form){twice}", now=now)
        if new.producer_id != old.producer_id:  # (after READY noted the old id's abort)
            # Epoch 0: no transaction of this producer id came before this client's; a higher
            # epoch: an earlier instance held it, and aborted records who knows where
            # (Decisions: pre-registration). The same id bumped keeps what the client knew.
            self._abort_history = AbortHistory.KNOWN if new.epoch == 0 else AbortHistory.UNKNOWN
            self._aborted_on = set()

    def _on_add_partitions(self, job: Job, response: Any, now: float) -> None:
        codes = wire.partition_codes(response)
        api = ApiKey.ADD_PARTITIONS_TO_TXN
        added = {tp for tp in job.partitions if tp in codes and is_success(api, codes[tp])}
        self._registered |= added
        self._adding -= job.partitions
        error = error_for_codes(api, [codes[tp] for tp in job.partitions if tp in codes])
        missing = job.partitions - codes.keys()
        if error is None and missing:
            error = ProtocolError(f"AddPartitionsToTxn: no result for {sorted(missing)}", api=api)
        if error is None:
            self._conv.finish(job)
            self._transition(Input.RECV_REGISTERED, f"partitions {sorted(added)}", now=now)
            return
        if isinstance(error, RetriableError):
            job.partitions = job.partitions - added
            self._adding |= job.partitions
        self._failed(job, error, now)

    def _on_add_offsets(self, job: Job, response: Any, now: float) -> None:
        code = response.error_code
        if not is_success(ApiKey.ADD_OFFSETS_TO_TXN, code):
            self._failed(job, error_for(ApiKey.ADD_OFFSETS_TO_TXN, code), now)
            return
        assert job.group is not None
        self._conv.finish(job)
        self._groups.add(job.group.group_id)
        self._transition(Input.RECV_REGISTERED, f"group {job.group.group_id!r}", now=now)

    def _on_offsets(self, job: Job, response: Any, now: float) -> None:
        error = error_for_codes(ApiKey.TXN_OFFSET_COMMIT, wire.offset_commit_codes(response))
        if error is not None:
            self._failed(job, error, now)
            return
        self._conv.finish(job)
        if job.waiter is not None:
            job.waiter(None)
        self._transition(Input.RECV_REGISTERED, f"offsets of group {job.key!r}", now=now)

    def _on_end_txn(self, job: Job, response: Any, now: float) -> None:
        code, job.closes_in_a_row = response.error_code, 0
        word = "commit" if job.committed else "abort"
        if is_success(ApiKey.END_TXN, code):
            self._conv.finish(job)
            self._end_confirmed(f"EndTxn({word}) succeeded", now)
            return
        error = error_for(ApiKey.END_TXN, code)
        empty = self._registered - self._sent_to
        if job.committed and code == _INVALID_TXN_STATE and empty:
            # Pre-registration avoids this (Decisions); should it come all the same, the
            # error must not read as "nothing was committed": the application would redo it.
            error.add_note(
                "registered partitions got no record ("
                + ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(empty)) + "): "
                "noida-db answers so after committing some of the transaction's partitions and "
                "leaving the others open, so its records may be partly committed; read what "
                "was committed before redoing the work")
        if isinstance(error, EpochBumpRequiredError) and not job.committed:
            # KIP-360: the coordinator lost this producer id, so there is nothing to end: bump.
            self._recovery = Recovery.BUMP_EPOCH
            self._conv.finish(job)
            self._end_confirmed(str(error), now)
            return
        self._failed(job, error, now)

    def _on_lost(self, job: Job, now: float, error: EosError | None) -> None:
        """A request of ``job`` will never be answered; the broker may still act on it."""
        if isinstance(error, RequestNotSentError):
            # It never left the client (its connection failed first): nothing of it can land
            # late, so no outcome became unknown and no epoch bump is owed for it.
            self._conv.retry(job, now, rediscover=True, error=error)
            return
        if job.step in MAY_LAND_LATE and self.transactional_id is not None:
            self._stragglers = Stragglers.POSSIBLE  # bump before the next transaction
        if job.step is Step.END_TXN:
            closed = closed_by_broker(error)
            job.closes_in_a_row = job.closes_in_a_row + 1 if closed else 0
            if job.closes_in_a_row >= CLOSES_MEAN_FENCED:
                self._conv.finish(job)
                fenced = fenced_by_closes(job.closes_in_a_row, error)
                self._transition(Input.RECV_FENCED, str(fenced), error=fenced, now=now)
                return
            self._ending = Ending(job.committed, EndOutcome.UNKNOWN)
            self._transition(Input.RECV_END_TXN_UNKNOWN, str(error or "EndTxn answer lost"),
                             now=now)
        self._conv.retry(job, now, lost=True, error=error)
