"""The transaction core's conversation: what it asks the coordinators, and what each answer does.

Private; :class:`eosclient._core._txn_engine.TxnEngine` (transitions, calls, waiters) builds on
this class, and ``txn.py``'s docstring is the theory of operation. Handlers read codes, classify
them only with :mod:`eosclient.errors`, and turn each error's *kind* into a retry or an input:
retriable -> retry with backoff; otherwise the kind's ``RECV_*`` input through ``_transition``.

Recovery rules kept here (the review that found each is in the tests' comments):

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
  A broker that does not recognise a retried bump (noida-db bumps again) makes a lost bump answer
  end in FENCED too: safe, and a new producer recovers. Apache Kafka (from reading its
  coordinator; no Kafka runs here) fences a transaction still open when the KIP-360 form comes,
  answers CONCURRENT_TRANSACTIONS, and then PRODUCER_FENCED to the retry, so re-initialising
  before the EndTxn landed ends in FENCED there too.
* **A broker that closes the connection on EndTxn** (Tansu, for a stale epoch) answers nothing:
  after :data:`CLOSES_MEAN_FENCED` such attempts in a row the producer is FENCED rather than
  retrying for ever.
* **An abort never waits on a registration it does not need.** In ABORTING and ABORTABLE_ERROR a
  registration the broker *answered* with a retriable error is dropped, not retried: nothing of it
  was applied. A commit whose EndTxn was not sent yet may be turned into an abort.
"""

from __future__ import annotations

from typing import Any

from eosclient._core import _txn_wire as wire
from eosclient._core._txn_conversation import Conversation
from eosclient._core._txn_table import Input, State, StateMachine
from eosclient._core._txn_values import (
    MAY_LAND_LATE,
    REGISTRATION,
    AbortHistory,
    Destination,
    EarlyAbort,
    Ending,
    EndOutcome,
    InitForm,
    Job,
    Recovery,
    SequencesReset,
    Step,
    Stragglers,
    TxnCounts,
    is_successor,
)
from eosclient._core._txn_wire import GroupMetadata
from eosclient._core.types import NO_IDENTITY, ProducerIdentity, TopicPartition
from eosclient.errors import (
    AbortableError,
    ApiKey,
    EosError,
    EpochBumpRequiredError,
    FencedError,
    KafkaConnectionError,
    ProtocolError,
    RequestNotSentError,
    RetriableError,
    error_for,
    error_for_codes,
    is_success,
)

__all__ = ["CLOSES_MEAN_FENCED", "TxnAnswers", "input_for"]

_CONCURRENT_TRANSACTIONS = 51
_INVALID_TXN_STATE = 48
# InitProducerId codes that reject the KIP-360 bump form (see _error_table's notes): Tansu answers
# UNKNOWN_SERVER_ERROR (-1), old brokers UNSUPPORTED_VERSION (35) or UNKNOWN_PRODUCER_ID (59).
_BUMP_FORM_REJECTED = frozenset({-1, 35, 59})
_ABANDONING = frozenset({State.ABORTING, State.ABORTABLE_ERROR})
"""States in which registrations are no longer needed (the transaction will be aborted)."""
# CONCURRENT_TRANSACTIONS (51) on these before any partition of the transaction is registered
# means the previous transaction's end is still completing (Java's rule: no partition in the
# transaction yet). A group registered first does not change that: pre-registration sends
# AddPartitionsToTxn and AddOffsetsToTxn together, and either may be answered first.
_REGISTERING = frozenset({Step.ADD_PARTITIONS, Step.ADD_OFFSETS})
CLOSES_MEAN_FENCED = 3
"""EndTxn attempts in a row answered by the broker closing the connection that mean "fenced"."""


def input_for(error: EosError) -> Input:
    """The broker event an error's kind is (retriable errors never get here)."""
    if isinstance(error, FencedError):
        return Input.RECV_FENCED
    if isinstance(error, EpochBumpRequiredError):
        return Input.RECV_BUMP_REQUIRED
    if isinstance(error, AbortableError):
        return Input.RECV_ABORTABLE
    return Input.RECV_FATAL


class TxnAnswers:
    """Requests out, answers in; the state they read is set up by the engine's ``__init__``."""

    transactional_id: str | None
    transaction_timeout_ms: int
    identity: ProducerIdentity
    counts: TxnCounts
    _machine: StateMachine
    _conv: Conversation
    _error: EosError | None
    _incomplete: bool
    _registered: set[TopicPartition]
    _adding: set[TopicPartition]
    _pending: set[TopicPartition]
    _sent_to: set[TopicPartition]
    _abort_history: AbortHistory
    _aborted_on: set[TopicPartition]
    _groups: set[str]
    _ending: Ending | None
    _recovery: Recovery
    _stragglers: Stragglers
    _quiet_until: float
    _txn_deadline: float | None
    _early: EarlyAbort

    def _transition(
        self, event: Input, cause: str, *, error: EosError | None = None, now: float = 0.0
    ) -> None:
        raise NotImplementedError  # the engine's: the one way the state changes

    def _settle_early(self) -> None:
        raise NotImplementedError  # the engine's: the client's own abort is over

    def _arm(self, now: float) -> None:
        """Start the transaction's clock at its first registration, as the coordinator does
        (it starts when it first hears of the transaction, a little later: so ours ends first)."""
        if self._txn_deadline is None and self.transactional_id is not None:
            self._txn_deadline = now + self.transaction_timeout_ms / 1000

    # -- asking ---------------------------------------------------------------------------

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
        if not bump:
            self._transition(Input.RECV_END_TXN_OK, cause, now=now)
            self._settle_early()  # (in ABORTABLE_ERROR: the client's own abort)
            return
        self._registered.clear()  # the transaction is over: nothing of it is sent again
        self._transition(Input.RECV_END_TXN_BUMP, cause, now=now)
        self._conv.add(Job(Step.INIT, Destination.TXN_COORDINATOR,
                           key=self.transactional_id or "", bump_from=self.identity,
                           not_before=now))

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
        # in that form, so a zombie's probe would fence the live instance too (txn.py).
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
            job.waiter._finish(error)

    def _handle(self, job: Job, response: Any, now: float) -> None:
        if job.step is Step.FIND:
            self._on_find(job, response, now)
        elif job.step is Step.INIT:
            self._on_init(job, response, now)
        elif job.step is Step.ADD_PARTITIONS:
            self._on_add_partitions(job, response, now)
        elif job.step is Step.ADD_OFFSETS:
            self._on_add_offsets(job, response, now)
        elif job.step is Step.OFFSETS:
            self._on_offsets(job, response, now)
        else:
            self._on_end_txn(job, response, now)

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
        elif form is InitForm.BUMP and code in _BUMP_FORM_REJECTED:
            self._conv.reject_bump_form(job)  # KIP-360 fallback: this broker gets the plain form
            job.not_before = now
        else:
            self._failed(job, error_for(ApiKey.INIT_PRODUCER_ID, code), now)

    def _new_identity(self, job: Job, new: ProducerIdentity, form: InitForm, now: float) -> None:
        old, wanted = self.identity, job.bump_from
        if wanted != NO_IDENTITY and not is_successor(wanted, new):
            fenced = FencedError(
                f"InitProducerId ({form.name.lower()} form) from producer id "
                f"{wanted.producer_id}, epoch {wanted.epoch} returned producer id "
                f"{new.producer_id}, epoch {new.epoch}: another instance re-initialised the "
                "transactional.id meanwhile, so this one is fenced", api=ApiKey.INIT_PRODUCER_ID)
            self._transition(Input.RECV_FENCED, str(fenced), error=fenced, now=now)
            return
        self.identity = new
        if old != NO_IDENTITY:  # a successor (the same id bumped, or a new id at epoch 0)
            self.counts.epoch_bumps += 1
        self._conv.outbox.append(SequencesReset(old, new))
        self._transition(Input.RECV_INIT_OK, f"producer id {new.producer_id}, epoch "
                         f"{new.epoch} ({form.name.lower()} form)", now=now)
        if self._machine.state is State.ABORTABLE_ERROR:
            self._settle_early()  # the bump that ended the client's own abort
        if new.producer_id != old.producer_id:  # (after READY noted the old id's abort)
            # Epoch 0: no transaction of this producer id came before this client's; a higher
            # epoch: an earlier instance held it, and aborted records who knows where (txn.py,
            # Decisions: pre-registration). The same id bumped keeps what the client knew.
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
            job.waiter._finish(None)
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
            # Pre-registration avoids this (txn.py, Decisions); should it come all the same, the
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

    # -- lost answers -----------------------------------------------------------------------

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
            closed = _closed_by_broker(error)
            job.closes_in_a_row = job.closes_in_a_row + 1 if closed else 0
            if job.closes_in_a_row >= CLOSES_MEAN_FENCED:
                self._conv.finish(job)
                fenced = _fenced_by_closes(job.closes_in_a_row, error)
                self._transition(Input.RECV_FENCED, str(fenced), error=fenced, now=now)
                return
            self._ending = Ending(job.committed, EndOutcome.UNKNOWN)
            self._transition(Input.RECV_END_TXN_UNKNOWN, str(error or "EndTxn answer lost"),
                             now=now)
        self._conv.retry(job, now, lost=True, error=error)


def _closed_by_broker(error: EosError | None) -> bool:
    """Whether the connection ended because the broker closed it (EOF or reset), rather than a
    request timeout or a failed connect: the I/O layer chains the socket's reason as the cause."""
    return isinstance(error, KafkaConnectionError) and isinstance(
        error.__cause__, (EOFError, ConnectionResetError))


def _fenced_by_closes(count: int, last: EosError | None) -> FencedError:
    fenced = FencedError(
        f"EndTxn: the broker closed the connection instead of answering, {count} attempts in "
        "a row; taken as a fence (another instance owns the transactional.id)",
        api=ApiKey.END_TXN)
    cause = KafkaConnectionError(
        "the broker closes the connection on EndTxn, as Tansu does for an EndTxn with a stale "
        "producer epoch", api=ApiKey.END_TXN)
    cause.__cause__ = last
    fenced.__cause__ = cause
    return fenced
