"""The transaction core's machinery: transitions, what entering a state does, the calls' waits.

Private; :class:`eosclient._core.txn.TransactionCore` is this class plus its public surface, and
``txn.py``'s docstring is the theory of operation. Here every state change goes through
:meth:`TxnEngine._transition`, which looks the edge up in the table and then runs the one
``_enter_*`` effect of the state entered (self-loops have no effect). What is asked of the
coordinators and what their answers do is :mod:`eosclient._core._txn_answers`, the base class.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable

from eosclient._core._txn_answers import CLOSES_MEAN_FENCED, TxnAnswers, input_for
from eosclient._core._txn_conversation import Conversation
from eosclient._core._txn_table import (
    ABSORBING,
    IDEMPOTENT_TABLE,
    TRANSACTIONAL_TABLE,
    Input,
    State,
    StateMachine,
)
from eosclient._core._txn_values import (
    REGISTRATION,
    WAIT_OF,
    AbortHistory,
    Completion,
    Destination,
    EarlyAbort,
    Ending,
    EndOutcome,
    FailUnsent,
    Job,
    Recovery,
    Step,
    Stragglers,
    TransactionExpired,
    TxnCounts,
    Wait,
)
from eosclient._core.types import NO_IDENTITY, ProducerIdentity, TopicPartition
from eosclient.errors import (
    AbortableError,
    EosError,
    FatalError,
    IllegalStateError,
    KafkaTimeoutError,
)

__all__ = ["CLOSES_MEAN_FENCED", "DRAINING", "OPEN", "TxnEngine", "input_for"]

DRAINING = frozenset({State.IN_TRANSACTION, State.COMMITTING})
"""States in which registered partitions may be produced to."""
OPEN = frozenset({State.IN_TRANSACTION, State.COMMITTING, State.ABORTING, State.ABORTABLE_ERROR})
"""States with a transaction whose batches' failures still matter."""

_TXN_CALLS = frozenset({Input.CALL_BEGIN, Input.CALL_SEND_OFFSETS, Input.CALL_COMMIT,
                        Input.CALL_ABORT})
_RESUMABLE = frozenset({Input.CALL_INIT, Input.CALL_COMMIT, Input.CALL_ABORT})
_ERROR_STATES = frozenset({State.ABORTABLE_ERROR, State.FENCED, State.FATAL})
_FINISHES = {State.INITIALIZING: Input.CALL_INIT, State.COMMITTING: Input.CALL_COMMIT,
             State.ABORTING: Input.CALL_ABORT}


def _again(error: EosError) -> EosError:
    """A fresh copy of a stored error, to raise once more without growing its traceback."""
    twin = copy.copy(error)
    twin.__cause__ = error.__cause__
    return twin


class TxnEngine(TxnAnswers):
    """State, table, conversation, handlers: :class:`eosclient._core.txn.TransactionCore`."""

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
        self._machine = StateMachine(table, history_size=history_size)
        self._conv = Conversation(backoff=retry_backoff_ms / 1000,
                                  backoff_max=retry_backoff_max_ms / 1000)
        self._grace = unknown_outcome_grace_ms / 1000
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
        self._reset_transaction()

    def _reset_transaction(self) -> None:
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

    def _preregistrable(self, declared: frozenset[TopicPartition]) -> frozenset[TopicPartition]:
        """The declared partitions to register at ``begin``, before their first record: those
        the client knows this producer id never aborted records on (``txn.py``, Decisions:
        pre-registration). The others are registered with their first record."""
        if self._abort_history is not AbortHistory.KNOWN:
            return frozenset()
        return declared - self._aborted_on

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

    # -- calls ----------------------------------------------------------------------------

    def _claim(self, call: Input) -> Completion | None:
        """A done completion if ``call`` timed out earlier and its work has since succeeded."""
        claimed, self._unclaimed = self._unclaimed is call, None
        if not claimed:
            return None
        done = Completion(call, math.inf)
        done._finish(None)
        return done

    def _check(self, call: Input) -> None:
        """Raise, changing nothing, unless the table allows ``call`` here."""
        if self._machine.allows(call):
            self._check_commit_turns_abort(call)
            return
        state = self._machine.state
        if state in _ERROR_STATES and self._error is not None:
            raise _again(self._error)
        if self.transactional_id is None and call in _TXN_CALLS:
            raise IllegalStateError(f"{call.value} needs a transactional_id; this producer "
                                    "is idempotent only")
        raise IllegalStateError(self._machine.refusal(call))

    def _check_commit_turns_abort(self, call: Input) -> None:
        """COMMITTING -> abort only while no EndTxn(commit) went out: once one may have reached
        the coordinator, an unconfirmed commit may only be retried as a commit."""
        if call is not Input.CALL_ABORT or self._machine.state is not State.COMMITTING:
            return
        if self._ending is None or self._ending.outcome is not EndOutcome.UNSENT:
            raise IllegalStateError(
                f"{call.value} is not allowed in state COMMITTING once EndTxn(commit) was sent: "
                "an unconfirmed commit may only be retried as a commit; call "
                "commit_transaction() to resume it, or init_transactions() to re-initialise")

    def _call(self, call: Input, cause: str, now: float) -> None:
        self._check(call)
        before = self._machine.state
        self._transition(call, cause, now=now)
        if self._machine.state is before and call in _RESUMABLE:
            self._conv.resume(now)

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

    # -- transitions ----------------------------------------------------------------------

    def _transition(
        self, event: Input, cause: str, *, error: EosError | None = None, now: float = 0.0
    ) -> None:
        """The one way the state changes: the table's edge, then the entered state's effect."""
        before = self._machine.state
        after = self._machine.process(event, cause)
        if event is Input.RECV_BUMP_REQUIRED and self.transactional_id is not None:
            self._recovery = Recovery.BUMP_EPOCH
        if event is Input.TIMER_TXN_EXPIRED and after is State.ABORTABLE_ERROR:
            if after is not before:
                self._enter_abortable(error)
            self._abort_early(cause)
            return
        if after is before:
            return
        if after is State.READY and before in (State.COMMITTING, State.ABORTING):
            if before is State.COMMITTING:
                self.counts.committed += 1
            else:
                self.counts.aborted += 1
        if after is State.FATAL and not isinstance(error, FatalError):
            fatal = FatalError(f"unexpected in state {before.name}: {event.name} ({cause})")
            fatal.__cause__, error = error, fatal
        self._enter(before, after, error, now)

    def _enter(self, before: State, after: State, error: EosError | None, now: float) -> None:
        if after in ABSORBING:
            self._enter_terminal(after, error)
        elif after is State.READY:
            self._enter_ready(before)
        elif after is State.INITIALIZING:
            self._enter_initializing(before, now)
        elif after is State.ABORTABLE_ERROR:
            self._enter_abortable(error)
        elif after is State.ABORTING:
            self._enter_aborting(before)
        elif after is State.COMMITTING:
            self._ending = Ending(committed=True)

    def _enter_terminal(self, after: State, error: EosError | None) -> None:
        if after is State.CLOSED:
            error = IllegalStateError("the producer was closed")
        else:
            error = error or FatalError(f"entered {after.name}")
            self._error = error
        self._conv.cancel_all()
        self._resolve(Input, error)
        self._conv.outbox.append(FailUnsent(self.generation, error))

    def _enter_ready(self, before: State) -> None:
        call = _FINISHES[before]
        if not self._resolve({call}, None) and call in self._timed_out:
            self._unclaimed = call  # the caller gave up waiting; the same call gets the success
        self._timed_out.discard(call)
        self._error = None
        if before is State.ABORTING:
            self._aborted_on |= self._sent_to  # its records may be in the log, aborted
        self._reset_transaction()

    def _enter_initializing(self, before: State, now: float) -> None:
        successor_of = NO_IDENTITY  # a first init (or an idempotent one): any identity will do
        if before in (State.COMMITTING, State.ABORTING):
            error = AbortableError("init_transactions() re-initialised the producer: this "
                                   "client does not know the transaction's outcome")
            self._conv.cancel_all()
            self._resolve({Input.CALL_COMMIT, Input.CALL_ABORT, Input.CALL_SEND_OFFSETS}, error)
            self._conv.outbox.append(FailUnsent(self.generation, error))
            self._aborted_on |= self._sent_to  # the coordinator may abort it
            self._reset_transaction()
            successor_of = self.identity  # the same instance: bump it, never take the id back
        self._conv.add(Job(Step.INIT, self._txn_destination(), key=self.transactional_id or "",
                           bump_from=successor_of, not_before=now))

    def _enter_abortable(self, error: EosError | None) -> None:
        self._error = error
        self._ending = None
        self._resolve({Input.CALL_COMMIT, Input.CALL_SEND_OFFSETS}, error)

    def _enter_aborting(self, before: State) -> None:
        error = self._error or AbortableError("the transaction was aborted")
        if before is State.COMMITTING:  # turned into an abort before EndTxn(commit) went out
            self._resolve({Input.CALL_COMMIT}, AbortableError(
                "abort_transaction() was called while the commit waited: the transaction is "
                "aborted"))
            self._timed_out.discard(Input.CALL_COMMIT)
        if self._early is EarlyAbort.RUNNING:
            return  # the client's own abort goes on; abort_transaction() waits for it
        if self._early is EarlyAbort.DONE:
            self._ending = Ending(committed=False)  # nothing is registered: READY at next poll
            return
        self._start_abort(error)

    def _abort_early(self, cause: str) -> None:
        """TIMER_TXN_EXPIRED: abort the transaction now, without waiting for the application.

        Why the client does what Java's client leaves to the broker is in ``txn.py``
        (Decisions: transaction timeout). The state stays ABORTABLE_ERROR, so the application's
        next call still raises, and ``abort_transaction()`` then finds this abort running or done.
        """
        self._conv.outbox.append(TransactionExpired(self.generation, cause))
        if self._early is not EarlyAbort.NONE:
            return
        self._early = EarlyAbort.RUNNING
        self._start_abort(self._error or AbortableError(cause))

    def _start_abort(self, error: EosError) -> None:
        """What every abort starts with: fail the unsent, drop unsent registrations, EndTxn."""
        self._conv.outbox.append(FailUnsent(self.generation, error))
        for job in self._conv.drop_unsent(REGISTRATION | {Step.FIND}):
            self._adding -= job.partitions  # never sent: the broker cannot have acted on it
            if job.waiter is not None:
                job.waiter._finish(error)
        self._pending.clear()
        self._ending = Ending(committed=False)
        self._resolve({Input.CALL_SEND_OFFSETS}, error)

    def _settle_early(self) -> None:
        """The client's own abort is over at the coordinator (and bumped, if it had to be)."""
        if self._early is EarlyAbort.NONE:
            return
        self._early = EarlyAbort.DONE
        self._registered.clear()
        self._groups.clear()
        self._recovery = Recovery.ABORT
        self._stragglers = Stragglers.NONE

    def _check_expiry(self, now: float) -> None:
        """Fire TIMER_TXN_EXPIRED once the transaction's deadline passed (once per transaction)."""
        deadline = self._txn_deadline
        if deadline is None or now < deadline:
            return
        self._txn_deadline = None
        state, ending = self._machine.state, self._ending
        sent = ending is None or ending.outcome is not EndOutcome.UNSENT
        if state is State.COMMITTING and sent:
            return  # EndTxn(commit) may have landed: an unconfirmed commit is only retried as one
        if not self._machine.allows(Input.TIMER_TXN_EXPIRED):
            return
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
