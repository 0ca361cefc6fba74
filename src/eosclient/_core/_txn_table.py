"""The producer's transition tables, the tiny machine that walks them, and the docs' diagrams.

Private; :mod:`eosclient._core.txn` explains the protocol around these tables and re-exports what
callers use. Everything here is data plus ~40 lines that look things up in it: a missing
``(state, input)`` key *is* the error (h11's ``_state.py`` and h2's stream machine are the models).

Regenerate ``docs/producer-states.md`` with ``scripts/gen_docs.py``; a unit test
compares the file with :func:`producer_states_markdown`, so the docs cannot drift from the table.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Mapping
from typing import NamedTuple

from eosclient.errors import IllegalStateError

__all__ = [
    "IDEMPOTENT_TABLE",
    "TRANSACTIONAL_TABLE",
    "Input",
    "State",
    "StateMachine",
    "Transition",
    "mermaid_diagram",
    "producer_states_markdown",
]


class State(enum.Enum):
    """Where the producer is. Java's set, plus CLOSED."""

    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FENCED = "fenced"
    FATAL = "fatal"
    CLOSED = "closed"


ABSORBING = frozenset({State.FENCED, State.FATAL, State.CLOSED})
"""States nothing leaves: broker events are dropped there and only ``close()`` is accepted."""


class Input(enum.Enum):
    """What moves the machine, named by cause: ``CALL_*`` the application, ``RECV_*`` a broker,
    ``TIMER_*`` the client's own clock."""

    CALL_INIT = "init_transactions()"
    CALL_BEGIN = "begin_transaction()"
    CALL_SEND = "send()"
    CALL_SEND_OFFSETS = "send_offsets_to_transaction()"
    CALL_COMMIT = "commit_transaction()"
    CALL_ABORT = "abort_transaction()"
    CALL_CLOSE = "close()"
    RECV_INIT_OK = "InitProducerId answered: a producer id and epoch"
    RECV_REGISTERED = "AddPartitionsToTxn, AddOffsetsToTxn or TxnOffsetCommit succeeded"
    RECV_ABORTABLE = "an AbortableError: the transaction is lost"
    RECV_BUMP_REQUIRED = "an EpochBumpRequiredError (KIP-360): lost, and the abort must bump"
    RECV_END_TXN_OK = "EndTxn succeeded (or there was nothing to end)"
    RECV_END_TXN_BUMP = "EndTxn is over; bump first: KIP-360, or a lost request may land late"
    RECV_END_TXN_UNKNOWN = "EndTxn timed out or its connection dropped: outcome unknown"
    RECV_FENCED = "a FencedError: another instance owns the transactional.id"
    RECV_FATAL = "a FatalError, or a broker event the table does not allow"
    TIMER_TXN_EXPIRED = "transaction.timeout.ms passed since the transaction's first registration"

    @property
    def is_call(self) -> bool:
        """True for inputs caused by the application (``CALL_*``)."""
        return self.name.startswith("CALL_")

    @property
    def is_timer(self) -> bool:
        """True for inputs caused by the client's own clock (``TIMER_*``)."""
        return self.name.startswith("TIMER_")


class Transition(NamedTuple):
    """One entry of the machine's history: what happened, and why."""

    source: State
    input: Input
    target: State
    cause: str


S, In = State, Input  # the tables below read as rows

# Every edge of a transactional producer (transactional_id set). Self-loops say "allowed here,
# nothing changes". ABSORBING states accept only close(); broker events are dropped there.
TRANSACTIONAL_TABLE: Mapping[tuple[State, Input], State] = {
    (S.UNINITIALIZED, In.CALL_INIT): S.INITIALIZING,
    (S.UNINITIALIZED, In.CALL_CLOSE): S.CLOSED,
    (S.INITIALIZING, In.CALL_INIT): S.INITIALIZING,  # resume after a timeout
    (S.INITIALIZING, In.RECV_INIT_OK): S.READY,
    (S.INITIALIZING, In.RECV_FENCED): S.FENCED,
    (S.INITIALIZING, In.RECV_FATAL): S.FATAL,
    (S.INITIALIZING, In.CALL_CLOSE): S.CLOSED,
    (S.READY, In.CALL_BEGIN): S.IN_TRANSACTION,
    (S.READY, In.CALL_CLOSE): S.CLOSED,
    (S.IN_TRANSACTION, In.CALL_SEND): S.IN_TRANSACTION,
    (S.IN_TRANSACTION, In.CALL_SEND_OFFSETS): S.IN_TRANSACTION,
    (S.IN_TRANSACTION, In.CALL_COMMIT): S.COMMITTING,
    (S.IN_TRANSACTION, In.CALL_ABORT): S.ABORTING,
    (S.IN_TRANSACTION, In.CALL_CLOSE): S.CLOSED,
    (S.IN_TRANSACTION, In.RECV_REGISTERED): S.IN_TRANSACTION,
    (S.IN_TRANSACTION, In.RECV_ABORTABLE): S.ABORTABLE_ERROR,
    (S.IN_TRANSACTION, In.RECV_BUMP_REQUIRED): S.ABORTABLE_ERROR,
    (S.IN_TRANSACTION, In.RECV_FENCED): S.FENCED,
    (S.IN_TRANSACTION, In.RECV_FATAL): S.FATAL,
    (S.IN_TRANSACTION, In.TIMER_TXN_EXPIRED): S.ABORTABLE_ERROR,  # and the client aborts it
    (S.COMMITTING, In.CALL_COMMIT): S.COMMITTING,  # resume the same EndTxn(commit)
    (S.COMMITTING, In.CALL_ABORT): S.ABORTING,  # only while no EndTxn(commit) was sent (guard)
    (S.COMMITTING, In.CALL_INIT): S.INITIALIZING,  # give up on the outcome; re-initialise (bump)
    (S.COMMITTING, In.CALL_CLOSE): S.CLOSED,
    (S.COMMITTING, In.RECV_REGISTERED): S.COMMITTING,
    (S.COMMITTING, In.RECV_END_TXN_OK): S.READY,
    (S.COMMITTING, In.RECV_END_TXN_BUMP): S.COMMITTING,  # committed; a lost request may land
    (S.COMMITTING, In.RECV_INIT_OK): S.READY,  # bumped: a late copy now has a stale epoch
    (S.COMMITTING, In.RECV_END_TXN_UNKNOWN): S.COMMITTING,
    (S.COMMITTING, In.RECV_ABORTABLE): S.ABORTABLE_ERROR,
    (S.COMMITTING, In.RECV_BUMP_REQUIRED): S.ABORTABLE_ERROR,
    (S.COMMITTING, In.RECV_FENCED): S.FENCED,
    (S.COMMITTING, In.RECV_FATAL): S.FATAL,
    (S.COMMITTING, In.TIMER_TXN_EXPIRED): S.ABORTABLE_ERROR,  # only while EndTxn is unsent (guard)
    (S.ABORTING, In.CALL_ABORT): S.ABORTING,  # resume the same abort (and its bump)
    (S.ABORTING, In.CALL_INIT): S.INITIALIZING,
    (S.ABORTING, In.CALL_CLOSE): S.CLOSED,
    (S.ABORTING, In.RECV_REGISTERED): S.ABORTING,
    (S.ABORTING, In.RECV_ABORTABLE): S.ABORTING,
    (S.ABORTING, In.RECV_BUMP_REQUIRED): S.ABORTING,  # the abort will bump (KIP-360)
    (S.ABORTING, In.RECV_END_TXN_OK): S.READY,
    (S.ABORTING, In.RECV_END_TXN_BUMP): S.ABORTING,  # now InitProducerId(id, epoch)
    (S.ABORTING, In.RECV_END_TXN_UNKNOWN): S.ABORTING,
    (S.ABORTING, In.RECV_INIT_OK): S.READY,  # bumped: new epoch, sequences at 0
    (S.ABORTING, In.RECV_FENCED): S.FENCED,
    (S.ABORTING, In.RECV_FATAL): S.FATAL,
    (S.ABORTABLE_ERROR, In.CALL_ABORT): S.ABORTING,
    (S.ABORTABLE_ERROR, In.CALL_CLOSE): S.CLOSED,
    (S.ABORTABLE_ERROR, In.RECV_REGISTERED): S.ABORTABLE_ERROR,
    (S.ABORTABLE_ERROR, In.RECV_ABORTABLE): S.ABORTABLE_ERROR,
    (S.ABORTABLE_ERROR, In.RECV_BUMP_REQUIRED): S.ABORTABLE_ERROR,
    (S.ABORTABLE_ERROR, In.RECV_FENCED): S.FENCED,
    (S.ABORTABLE_ERROR, In.RECV_FATAL): S.FATAL,
    # The client aborts an expired transaction itself (the application may be hung); the state
    # stays ABORTABLE_ERROR until abort_transaction(), so the application still learns of it.
    (S.ABORTABLE_ERROR, In.TIMER_TXN_EXPIRED): S.ABORTABLE_ERROR,
    (S.ABORTABLE_ERROR, In.RECV_END_TXN_OK): S.ABORTABLE_ERROR,
    (S.ABORTABLE_ERROR, In.RECV_END_TXN_BUMP): S.ABORTABLE_ERROR,
    (S.ABORTABLE_ERROR, In.RECV_END_TXN_UNKNOWN): S.ABORTABLE_ERROR,
    (S.ABORTABLE_ERROR, In.RECV_INIT_OK): S.ABORTABLE_ERROR,
    (S.FENCED, In.CALL_CLOSE): S.FENCED,
    (S.FATAL, In.CALL_CLOSE): S.FATAL,
    (S.CLOSED, In.CALL_CLOSE): S.CLOSED,
}

# An idempotent producer (no transactional_id): sends once initialised; a broken sequence
# re-initialises it (a new producer id, sequences at 0) while the application keeps sending.
IDEMPOTENT_TABLE: Mapping[tuple[State, Input], State] = {
    (S.UNINITIALIZED, In.CALL_INIT): S.INITIALIZING,
    (S.UNINITIALIZED, In.CALL_CLOSE): S.CLOSED,
    (S.INITIALIZING, In.CALL_INIT): S.INITIALIZING,
    (S.INITIALIZING, In.CALL_SEND): S.INITIALIZING,  # queued until the producer id arrives
    (S.INITIALIZING, In.CALL_CLOSE): S.CLOSED,
    (S.INITIALIZING, In.RECV_INIT_OK): S.READY,
    (S.INITIALIZING, In.RECV_BUMP_REQUIRED): S.INITIALIZING,  # another partition broke too
    (S.INITIALIZING, In.RECV_FENCED): S.FENCED,
    (S.INITIALIZING, In.RECV_FATAL): S.FATAL,
    (S.READY, In.CALL_SEND): S.READY,
    (S.READY, In.CALL_CLOSE): S.CLOSED,
    (S.READY, In.RECV_BUMP_REQUIRED): S.INITIALIZING,
    (S.READY, In.RECV_FENCED): S.FENCED,
    (S.READY, In.RECV_FATAL): S.FATAL,
    (S.FENCED, In.CALL_CLOSE): S.FENCED,
    (S.FATAL, In.CALL_CLOSE): S.FATAL,
    (S.CLOSED, In.CALL_CLOSE): S.CLOSED,
}

_HINTS: Mapping[State, str] = {
    S.UNINITIALIZED: "call init_transactions() first",
    S.INITIALIZING: "init_transactions() has not finished; call it again to resume",
    S.READY: "no transaction is open; call begin_transaction() first",
    S.IN_TRANSACTION: "a transaction is open",
    S.COMMITTING: "a commit is in progress; commit_transaction() resumes it, abort_transaction() "
    "aborts it until EndTxn(commit) is sent (then an unconfirmed commit may only be retried as a "
    "commit), init_transactions() re-initialises",
    S.ABORTING: "an abort is in progress; abort_transaction() resumes it",
    S.ABORTABLE_ERROR: "the transaction failed; call abort_transaction()",
    S.FENCED: "the producer was fenced; close it",
    S.FATAL: "the producer failed fatally; close it",
    S.CLOSED: "the producer is closed",
}


class StateMachine:
    """A state and one table; every change goes through :meth:`process`.

    Args:
        table: ``TRANSACTIONAL_TABLE`` or ``IDEMPOTENT_TABLE``.
        history_size: How many transitions :attr:`history` keeps (oldest dropped first).
    """

    def __init__(
        self, table: Mapping[tuple[State, Input], State], *, history_size: int = 64
    ) -> None:
        self.table = table
        self.state = State.UNINITIALIZED
        self.history: deque[Transition] = deque(maxlen=history_size)

    def allows(self, input: Input) -> bool:
        """Whether ``input`` has an edge from the current state."""
        return (self.state, input) in self.table

    def allowed_calls(self) -> list[Input]:
        """The application calls the current state accepts, in declaration order."""
        return [i for i in Input if i.is_call and (self.state, i) in self.table]

    def process(self, input: Input, cause: str = "") -> State:
        """Follow the edge for ``input``; return the new state.

        A broker event without an edge moves to FATAL (the peer broke the protocol), except in an
        absorbing state, which drops it. A timer without an edge has nothing to do: dropped.

        Raises:
            IllegalStateError: ``input`` is an application call without an edge here; the state
                is unchanged.
        """
        target = self.table.get((self.state, input))
        if target is None:
            if input.is_call:
                raise IllegalStateError(self.refusal(input), api=None)
            if self.state in ABSORBING or input.is_timer:
                return self.state
            target, cause = State.FATAL, f"illegal broker event {input.name}: {cause}"
        self.history.append(Transition(self.state, input, target, cause))
        self.state = target
        return target

    def refusal(self, input: Input) -> str:
        """The message for a call the current state refuses: the state, why, what is allowed."""
        allowed = ", ".join(i.value for i in self.allowed_calls()) or "nothing"
        return (
            f"{input.value} is not allowed in state {self.state.name}: "
            f"{_HINTS[self.state]} (allowed here: {allowed})"
        )


def mermaid_diagram(transactional: bool = True) -> str:
    """Draw a table as a Mermaid ``stateDiagram-v2``; edges between the same states share a line.

    Args:
        transactional: The transactional table (default) or the idempotent one.

    Returns:
        The diagram's source, ending with a newline.
    """
    table = TRANSACTIONAL_TABLE if transactional else IDEMPOTENT_TABLE
    edges: dict[tuple[State, State], list[str]] = {}
    for (source, input), target in table.items():
        edges.setdefault((source, target), []).append(input.name)
    lines = ["stateDiagram-v2", f"    [*] --> {State.UNINITIALIZED.name}"]
    for (source, target), names in edges.items():
        lines.append(f"    {source.name} --> {target.name}: {' / '.join(names)}")
    return "\n".join(lines) + "\n"


_INTRO = """\
# Producer states

Generated from `eosclient/_core/_txn_table.py` by `scripts/gen_docs.py`; a unit
test regenerates it and compares, so do not edit by hand.

Application calls are `CALL_*`, broker events `RECV_*`, the client's own clock `TIMER_*`. A call
without an edge raises `IllegalStateError` and changes nothing (in ABORTABLE_ERROR, FENCED and
FATAL it raises the error that put the producer there). A broker event without an edge moves to
FATAL; FENCED, FATAL and CLOSED drop broker events and accept only `close()`; a timer without an
edge is dropped. The theory of operation is in `eosclient/_core/txn.py`, the recovery rules in
`eosclient/_core/_txn_answers.py`; in short:

* `abort_transaction()` in COMMITTING is allowed only while no EndTxn(commit) has been sent.
* `RECV_END_TXN_BUMP` (COMMITTING or ABORTING): the end is confirmed, and the epoch is bumped
  with InitProducerId(id, producer id, epoch) before READY, because KIP-360 asks for it or an
  answer of the transaction was lost and its request may still land on the next transaction.
* `RECV_INIT_OK` after a bump or a re-initialisation (`init_transactions()` in COMMITTING or
  ABORTING, which uses the same KIP-360 form) needs the same producer id with epoch + 1 (or a
  new producer id at epoch 0); any other answer is `RECV_FENCED`. A broker that rejects the
  KIP-360 form gets the plain form: it bumps for whoever asks, so a successor that took the
  transactional.id just before is fenced by it too (both stop; neither commits).
* `TIMER_TXN_EXPIRED`: the transaction was open `transaction.timeout.ms` since its first
  registration. No broker here aborts it, so the client does: ABORTABLE_ERROR, and the I/O thread
  sends EndTxn(abort) at once (after its batches are answered), so the LSO moves on even if the
  application hangs. The `RECV_END_TXN_*` / `RECV_INIT_OK` self-loops of ABORTABLE_ERROR are that
  abort; `abort_transaction()` then finds it done. In COMMITTING it fires only while EndTxn(commit)
  is unsent.
* `RECV_FENCED` from INVALID_PRODUCER_EPOCH (47) or PRODUCER_FENCED (90) on a coordinator
  request is final, also when the transaction had outlived `transaction.timeout.ms`: no KIP-588
  re-claim of a coordinator's timeout bump (InitProducerId with the old epoch) is tried.
  noida-db is lax, it bumps for a stale epoch in that form, so a zombie's probe would fence the
  live instance that took the transactional.id over; Tansu refuses the form; neither aborts on
  timeout. The argument is in `eosclient/_core/txn.py` (Decisions).
* `RECV_FENCED` also follows three EndTxn attempts in a row answered by the broker closing the
  connection (Tansu's answer to a stale epoch).
"""


def producer_states_markdown() -> str:
    """The whole of ``docs/producer-states.md``: the intro and both diagrams."""
    return (
        f"{_INTRO}\n## Transactional producer ({len(TRANSACTIONAL_TABLE)} edges)\n\n"
        f"```mermaid\n{mermaid_diagram(True)}```\n\n"
        f"## Idempotent producer, no transactional.id ({len(IDEMPOTENT_TABLE)} edges)\n\n"
        f"```mermaid\n{mermaid_diagram(False)}```\n"
    )
