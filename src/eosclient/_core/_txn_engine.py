"""The transaction core's machinery: transitions and what entering a state does, and responses.

Private; :class:`eosclient._core.txn.TransactionCore` is this class plus its public surface, and
``txn.py``'s docstring is the theory of operation. Here every state change goes through
:meth:`TxnEngine._transition`, which looks the edge up in the table and then runs the one
``_enter_*`` effect of the state entered (self-loops have no effect). Response handlers read
codes, classify them only with :mod:`eosclient.errors`, and turn each error's *kind* into a
retry or an input: retriable -> retry with backoff; otherwise the kind's ``RECV_*`` input.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from typing import Any

from eosclient._core import _txn_wire as wire
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
    Completion,
    Destination,
    Ending,
    EndOutcome,
    FailUnsent,
    Job,
    Recovery,
    SequencesReset,
    Step,
    Wait,
)
from eosclient._core._txn_wire import GroupMetadata
from eosclient._core.types import NO_IDENTITY, ProducerIdentity, TopicPartition
from eosclient.errors import (
    AbortableError,
    ApiKey,
    EosError,
    EpochBumpRequiredError,
    FatalError,
    FencedError,
    IllegalStateError,
    KafkaTimeoutError,
    ProtocolError,
    RetriableError,
    error_for,
    error_for_codes,
    is_success,
)

__all__ = ["DRAINING", "OPEN", "TxnEngine", "input_for"]

DRAINING = frozenset({State.IN_TRANSACTION, State.COMMITTING})
"""States in which registered partitions may be produced to."""
OPEN = frozenset({State.IN_TRANSACTION, State.COMMITTING, State.ABORTING, State.ABORTABLE_ERROR})
"""States with a transaction whose batches' failures still matter."""

_CONCURRENT_TRANSACTIONS = 51
# InitProducerId codes that reject the KIP-360 bump form (see _error_table's notes): Tansu answers
# UNKNOWN_SERVER_ERROR (-1), old brokers UNSUPPORTED_VERSION (35) or UNKNOWN_PRODUCER_ID (59).
_BUMP_FORM_REJECTED = frozenset({-1, 35, 59})
_TXN_CALLS = frozenset({Input.CALL_BEGIN, Input.CALL_SEND_OFFSETS, Input.CALL_COMMIT,
                        Input.CALL_ABORT})
_RESUMABLE = frozenset({Input.CALL_INIT, Input.CALL_COMMIT, Input.CALL_ABORT})
_ERROR_STATES = frozenset({State.ABORTABLE_ERROR, State.FENCED, State.FATAL})
_FINISHES = {State.INITIALIZING: Input.CALL_INIT, State.COMMITTING: Input.CALL_COMMIT,
             State.ABORTING: Input.CALL_ABORT}


def input_for(error: EosError) -> Input:
    """The broker event an error's kind is (retriable errors never get here)."""
    if isinstance(error, FencedError):
        return Input.RECV_FENCED
    if isinstance(error, EpochBumpRequiredError):
        return Input.RECV_BUMP_REQUIRED
    if isinstance(error, AbortableError):
        return Input.RECV_ABORTABLE
    return Input.RECV_FATAL


def _again(error: EosError) -> EosError:
    """A fresh copy of a stored error, to raise once more without growing its traceback."""
    twin = copy.copy(error)
    twin.__cause__ = error.__cause__
    return twin


class TxnEngine:
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
        self._error: EosError | None = None
        self._waiters: list[Completion] = []
        self._timed_out: set[Input] = set()
        self._unclaimed: Input | None = None  # a call that timed out, then succeeded
        self._bump_form_rejected = False
        self._incomplete = False
        self._reset_transaction()

    def _reset_transaction(self) -> None:
        self._declared: frozenset[TopicPartition] | None = None
        self._declared_group: str | None = None
        self._registered: set[TopicPartition] = set()
        self._adding: set[TopicPartition] = set()  # in an AddPartitionsToTxn not yet answered
        self._pending: set[TopicPartition] = set()  # lazily added, not yet asked for
        self._groups: set[str] = set()  # groups whose AddOffsetsToTxn succeeded
        self._ending: Ending | None = None
        self._recovery = Recovery.ABORT
        self._quiet_until = 0.0

    def _current(self, identity: ProducerIdentity, generation: int) -> bool:
        """Whether a batch of ``identity`` and ``generation`` still matters."""
        if identity != self.identity:
            return False
        if self.transactional_id is None:
            return self._machine.state in (State.READY, State.INITIALIZING)
        return generation == self.generation and self._machine.state in OPEN

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
        if after is before:
            return
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
            self._enter_aborting()
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
        self._reset_transaction()

    def _enter_initializing(self, before: State, now: float) -> None:
        if before in (State.COMMITTING, State.ABORTING):
            error = AbortableError("init_transactions() re-initialised the producer: this "
                                   "client does not know the transaction's outcome")
            self._conv.cancel_all()
            self._resolve({Input.CALL_COMMIT, Input.CALL_ABORT, Input.CALL_SEND_OFFSETS}, error)
            self._conv.outbox.append(FailUnsent(self.generation, error))
            self._reset_transaction()
        self._conv.add(Job(Step.INIT, self._txn_destination(), key=self.transactional_id or "",
                           not_before=now))

    def _enter_abortable(self, error: EosError | None) -> None:
        self._error = error
        self._ending = None
        self._resolve({Input.CALL_COMMIT, Input.CALL_SEND_OFFSETS}, error)

    def _enter_aborting(self) -> None:
        error = self._error or AbortableError("the transaction was aborted")
        self._conv.outbox.append(FailUnsent(self.generation, error))
        for job in self._conv.drop_unsent(REGISTRATION | {Step.FIND}):
            self._adding -= job.partitions  # never sent: the broker cannot have acted on it
            if job.waiter is not None:
                job.waiter._finish(error)
        self._pending.clear()
        self._ending = Ending(committed=False)
        self._resolve({Input.CALL_SEND_OFFSETS}, error)

    def _txn_destination(self) -> Destination:
        if self.transactional_id is None:
            return Destination.ANY_BROKER
        return Destination.TXN_COORDINATOR

    # -- the conversation -----------------------------------------------------------------

    def _add_partitions_job(self, partitions: frozenset[TopicPartition], now: float) -> None:
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
        self._conv.add(Job(Step.ADD_OFFSETS, Destination.TXN_COORDINATOR,
                           key=self.transactional_id or "", group=GroupMetadata(group_id),
                           not_before=now))

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
        self._ending = None
        if self._machine.state is State.ABORTING and self._recovery is Recovery.BUMP_EPOCH:
            self._transition(Input.RECV_END_TXN_BUMP, cause, now=now)
            self._conv.add(Job(Step.INIT, Destination.TXN_COORDINATOR,
                               key=self.transactional_id or "",
                               bump=not self._bump_form_rejected, not_before=now))
        else:
            self._transition(Input.RECV_END_TXN_OK, cause, now=now)

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
            bump_from = me if job.bump else NO_IDENTITY
            return wire.init_producer_id(self.transactional_id, self.transaction_timeout_ms,
                                         bump_from)
        if job.step is Step.ADD_PARTITIONS:
            return wire.add_partitions(txn, me, job.partitions)
        assert job.group is not None or job.step is Step.END_TXN
        if job.step is Step.ADD_OFFSETS and job.group is not None:
            return wire.add_offsets(txn, me, job.group.group_id)
        if job.step is Step.OFFSETS and job.group is not None:
            return wire.txn_offset_commit(txn, me, job.group, job.offsets)
        return wire.end_txn(txn, me, committed=job.committed)

    def _failed(self, job: Job, error: EosError, now: float) -> None:
        """A job's answer carried ``error``: retry it, or feed the error's kind to the table."""
        if isinstance(error, RetriableError):
            quick = error.code == _CONCURRENT_TRANSACTIONS and (
                job.step is Step.INIT or not (self._registered or self._groups)
            )  # the previous transaction is still completing: retry soon (KAFKA-5482)
            self._conv.retry(job, now, quick=quick, error=error)
            return
        ending = job.step in (Step.END_TXN, Step.INIT)
        aborting = self._machine.state is State.ABORTING
        if aborting and ending and input_for(error) is Input.RECV_ABORTABLE:
            self._transition(Input.RECV_ABORTABLE, str(error), error=error, now=now)
            self._conv.retry(job, now, error=error)  # the abort itself must still finish
            return
        self._conv.finish(job)
        self._adding -= job.partitions
        if job.waiter is not None:
            job.waiter._finish(error)
        self._transition(input_for(error), str(error), error=error, now=now)

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
        code = response.error_code
        if is_success(ApiKey.INIT_PRODUCER_ID, code):
            self._conv.finish(job)
            new = ProducerIdentity(response.producer_id, response.producer_epoch)
            old, self.identity = self.identity, new
            self._conv.outbox.append(SequencesReset(old, new))
            self._transition(Input.RECV_INIT_OK, f"producer id {new.producer_id}, epoch "
                             f"{new.epoch}", now=now)
        elif job.bump and code in _BUMP_FORM_REJECTED:
            job.bump, self._bump_form_rejected = False, True  # KIP-360 fallback: the plain form
            job.not_before = now
        else:
            self._failed(job, error_for(ApiKey.INIT_PRODUCER_ID, code), now)

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
        code = response.error_code
        word = "commit" if job.committed else "abort"
        if is_success(ApiKey.END_TXN, code):
            self._conv.finish(job)
            self._end_confirmed(f"EndTxn({word}) succeeded", now)
            return
        error = error_for(ApiKey.END_TXN, code)
        if isinstance(error, EpochBumpRequiredError) and not job.committed:
            # KIP-360: the coordinator lost this producer id, so there is nothing to end: bump.
            self._recovery = Recovery.BUMP_EPOCH
            self._conv.finish(job)
            self._end_confirmed(str(error), now)
            return
        self._failed(job, error, now)

