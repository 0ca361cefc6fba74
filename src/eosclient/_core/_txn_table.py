"""The producer's state machine, whole: states, inputs, the two tables, guards, actions.

Private; :mod:`eosclient._core.txn` explains the protocol around it and re-exports what callers
use. Everything the machine does is here as data: a row per edge ``(state, input) -> target``,
the edge's named :class:`Guard` (if any) and its named :class:`Action` (if any), and
:data:`ON_ENTRY`, what entering a state does. A missing ``(state, input)`` key *is* the error,
and a guard that does not hold is a missing key (h11's ``_state.py`` and h2's stream machine
are the models). The actions' bodies are ``TransactionCore``'s methods, one per action, looked
up in a dict; none of them changes the state: only a row does.

One change, in order: the row is followed and recorded (:attr:`StateMachine.history`); if the
state changed, the entered state's entry action runs; then the row's own action. So a row's
action sees the state it leads to, already entered.

Regenerate ``docs/producer-states.md`` with ``scripts/gen_docs.py``; a unit test
compares the file with :func:`producer_states_markdown`, so the docs cannot drift from the table.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from eosclient.errors import IllegalStateError

__all__ = [
    "ABSORBING",
    "IDEMPOTENT_TABLE",
    "ON_ENTRY",
    "TRANSACTIONAL_TABLE",
    "Action",
    "Edge",
    "Guard",
    "Input",
    "State",
    "StateMachine",
    "Table",
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


class Guard(enum.Enum):
    """A condition a row needs besides its state; the core judges it (one method per guard,
    ``TransactionCore._guards``). Where it does not hold the row is missing: a call is refused,
    naming the guard's reason, and a timer is dropped."""

    END_TXN_UNSENT = "no EndTxn(commit) has been sent: the commit may still become an abort"


_REFUSED_BY: Mapping[Guard, str] = {
    Guard.END_TXN_UNSENT: "once EndTxn(commit) was sent: an unconfirmed commit may only be "
    "retried as a commit; call commit_transaction() to resume it, or init_transactions() to "
    "re-initialise",
}


class Action(enum.Enum):
    """What a change does besides changing the state: an entered state's (:data:`ON_ENTRY`)
    or a row's. Each is one method of ``TransactionCore``."""

    # Entering a state.
    FINISH = ("the call the left state worked for succeeds (init, commit or abort; commits and "
              "aborts are counted); the transaction's facts are reset")
    START_COMMIT = "EndTxn(commit) is due once every registration and batch is settled"
    START_ABORT = ("unsent batches and registrations fail, and EndTxn(abort) is due once the "
                   "batches are settled; or the client's own abort, running or done, is taken on")
    FAIL_TRANSACTION = "the error is kept (calls raise it); waiting commit and offsets calls fail"
    STOP = ("the error is kept (an illegal broker event becomes a FatalError); every request is "
            "dropped, every waiting call and unsent batch fails with it")
    CLOSE = "every request is dropped; waiting calls and unsent batches fail as closed"
    # A row's own.
    ASK_PRODUCER_ID = "InitProducerId: any producer id and epoch will do (the plain form)"
    REINITIALISE = ("the open transaction is abandoned (its calls and unsent batches fail); "
                    "InitProducerId in the KIP-360 form: this identity's successor, or FENCED")
    RESUME = "the same call again: every request waiting out its backoff goes now"
    DROP_COMMIT = "the waiting commit_transaction() fails: the transaction is aborted instead"
    OWE_BUMP = "the abort will bump the epoch (KIP-360)"
    ABORT_EXPIRED = ("TransactionExpired, and the client aborts the transaction itself, at once "
                     "(EndTxn(abort) once its batches are settled)")
    BUMP_EPOCH = ("the end is confirmed; InitProducerId in the KIP-360 form bumps the epoch "
                  "first (KIP-360 asked for it, or a lost request may land late)")
    SETTLE_EARLY = "the client's own abort, if one ran, is over: abort_transaction() acknowledges"


class Edge(NamedTuple):
    """One row's right-hand side: where the input leads, on what condition, doing what."""

    target: State
    guard: Guard | None = None
    then: Action | None = None


ON_ENTRY: Mapping[State, Action] = {
    State.READY: Action.FINISH,
    State.COMMITTING: Action.START_COMMIT,
    State.ABORTING: Action.START_ABORT,
    State.ABORTABLE_ERROR: Action.FAIL_TRANSACTION,
    State.FENCED: Action.STOP,
    State.FATAL: Action.STOP,
    State.CLOSED: Action.CLOSE,
}
"""What entering a state does (only when the state changes). UNINITIALIZED is never entered;
INITIALIZING's work depends on where it is entered from (a first init or a re-initialisation),
so its rows carry it; IN_TRANSACTION's is ``begin()``'s, which takes the call's arguments."""


class Table(Mapping[tuple[State, Input], State]):
    """One producer kind's rows, read as ``(state, input) -> target``; :meth:`edge` gives a
    row whole (with its guard and action)."""

    def __init__(self, rows: Mapping[tuple[State, Input], Edge]) -> None:
        self._rows = dict(rows)

    def __getitem__(self, key: tuple[State, Input]) -> State:
        return self._rows[key].target

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def __iter__(self) -> Iterator[tuple[State, Input]]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def edge(self, key: tuple[State, Input]) -> Edge | None:
        """The row for ``key`` whole, or None."""
        return self._rows.get(key)


S, In, E, If, Do = State, Input, Edge, Guard, Action  # the tables below read as rows

# Every edge of a transactional producer (transactional_id set). Self-loops say "allowed here,
# nothing changes" unless they name an action. ABSORBING states accept only close(); broker
# events are dropped there.
TRANSACTIONAL_TABLE = Table({
    (S.UNINITIALIZED, In.CALL_INIT): E(S.INITIALIZING, then=Do.ASK_PRODUCER_ID),
    (S.UNINITIALIZED, In.CALL_CLOSE): E(S.CLOSED),
    (S.INITIALIZING, In.CALL_INIT): E(S.INITIALIZING, then=Do.RESUME),  # after a timeout
    (S.INITIALIZING, In.RECV_INIT_OK): E(S.READY),
    (S.INITIALIZING, In.RECV_FENCED): E(S.FENCED),
    (S.INITIALIZING, In.RECV_FATAL): E(S.FATAL),
    (S.INITIALIZING, In.CALL_CLOSE): E(S.CLOSED),
    (S.READY, In.CALL_BEGIN): E(S.IN_TRANSACTION),
    (S.READY, In.CALL_CLOSE): E(S.CLOSED),
    (S.IN_TRANSACTION, In.CALL_SEND): E(S.IN_TRANSACTION),
    (S.IN_TRANSACTION, In.CALL_SEND_OFFSETS): E(S.IN_TRANSACTION),
    (S.IN_TRANSACTION, In.CALL_COMMIT): E(S.COMMITTING),
    (S.IN_TRANSACTION, In.CALL_ABORT): E(S.ABORTING),
    (S.IN_TRANSACTION, In.CALL_CLOSE): E(S.CLOSED),
    (S.IN_TRANSACTION, In.RECV_REGISTERED): E(S.IN_TRANSACTION),
    (S.IN_TRANSACTION, In.RECV_ABORTABLE): E(S.ABORTABLE_ERROR),
    (S.IN_TRANSACTION, In.RECV_BUMP_REQUIRED): E(S.ABORTABLE_ERROR, then=Do.OWE_BUMP),
    (S.IN_TRANSACTION, In.RECV_FENCED): E(S.FENCED),
    (S.IN_TRANSACTION, In.RECV_FATAL): E(S.FATAL),
    (S.IN_TRANSACTION, In.TIMER_TXN_EXPIRED): E(S.ABORTABLE_ERROR, then=Do.ABORT_EXPIRED),
    (S.COMMITTING, In.CALL_COMMIT): E(S.COMMITTING, then=Do.RESUME),  # the same EndTxn(commit)
    (S.COMMITTING, In.CALL_ABORT): E(S.ABORTING, If.END_TXN_UNSENT, Do.DROP_COMMIT),
    (S.COMMITTING, In.CALL_INIT): E(S.INITIALIZING, then=Do.REINITIALISE),  # give up on it
    (S.COMMITTING, In.CALL_CLOSE): E(S.CLOSED),
    (S.COMMITTING, In.RECV_REGISTERED): E(S.COMMITTING),
    (S.COMMITTING, In.RECV_END_TXN_OK): E(S.READY),
    (S.COMMITTING, In.RECV_END_TXN_BUMP): E(S.COMMITTING, then=Do.BUMP_EPOCH),  # committed
    (S.COMMITTING, In.RECV_INIT_OK): E(S.READY),  # bumped: a late copy now has a stale epoch
    (S.COMMITTING, In.RECV_END_TXN_UNKNOWN): E(S.COMMITTING),
    (S.COMMITTING, In.RECV_ABORTABLE): E(S.ABORTABLE_ERROR),
    (S.COMMITTING, In.RECV_BUMP_REQUIRED): E(S.ABORTABLE_ERROR, then=Do.OWE_BUMP),
    (S.COMMITTING, In.RECV_FENCED): E(S.FENCED),
    (S.COMMITTING, In.RECV_FATAL): E(S.FATAL),
    (S.COMMITTING, In.TIMER_TXN_EXPIRED): E(S.ABORTABLE_ERROR, If.END_TXN_UNSENT,
                                           Do.ABORT_EXPIRED),
    (S.ABORTING, In.CALL_ABORT): E(S.ABORTING, then=Do.RESUME),  # the same abort (and bump)
    (S.ABORTING, In.CALL_INIT): E(S.INITIALIZING, then=Do.REINITIALISE),
    (S.ABORTING, In.CALL_CLOSE): E(S.CLOSED),
    (S.ABORTING, In.RECV_REGISTERED): E(S.ABORTING),
    (S.ABORTING, In.RECV_ABORTABLE): E(S.ABORTING),
    (S.ABORTING, In.RECV_BUMP_REQUIRED): E(S.ABORTING, then=Do.OWE_BUMP),
    (S.ABORTING, In.RECV_END_TXN_OK): E(S.READY),
    (S.ABORTING, In.RECV_END_TXN_BUMP): E(S.ABORTING, then=Do.BUMP_EPOCH),
    (S.ABORTING, In.RECV_END_TXN_UNKNOWN): E(S.ABORTING),
    (S.ABORTING, In.RECV_INIT_OK): E(S.READY),  # bumped: new epoch, sequences at 0
    (S.ABORTING, In.RECV_FENCED): E(S.FENCED),
    (S.ABORTING, In.RECV_FATAL): E(S.FATAL),
    (S.ABORTABLE_ERROR, In.CALL_ABORT): E(S.ABORTING),
    (S.ABORTABLE_ERROR, In.CALL_CLOSE): E(S.CLOSED),
    (S.ABORTABLE_ERROR, In.RECV_REGISTERED): E(S.ABORTABLE_ERROR),
    (S.ABORTABLE_ERROR, In.RECV_ABORTABLE): E(S.ABORTABLE_ERROR),
    (S.ABORTABLE_ERROR, In.RECV_BUMP_REQUIRED): E(S.ABORTABLE_ERROR, then=Do.OWE_BUMP),
    (S.ABORTABLE_ERROR, In.RECV_FENCED): E(S.FENCED),
    (S.ABORTABLE_ERROR, In.RECV_FATAL): E(S.FATAL),
    # The client aborts an expired transaction itself (the application may be hung); the state
    # stays ABORTABLE_ERROR until abort_transaction(), so the application still learns of it.
    (S.ABORTABLE_ERROR, In.TIMER_TXN_EXPIRED): E(S.ABORTABLE_ERROR, then=Do.ABORT_EXPIRED),
    (S.ABORTABLE_ERROR, In.RECV_END_TXN_OK): E(S.ABORTABLE_ERROR, then=Do.SETTLE_EARLY),
    (S.ABORTABLE_ERROR, In.RECV_END_TXN_BUMP): E(S.ABORTABLE_ERROR, then=Do.BUMP_EPOCH),
    (S.ABORTABLE_ERROR, In.RECV_END_TXN_UNKNOWN): E(S.ABORTABLE_ERROR),
    (S.ABORTABLE_ERROR, In.RECV_INIT_OK): E(S.ABORTABLE_ERROR, then=Do.SETTLE_EARLY),
    (S.FENCED, In.CALL_CLOSE): E(S.FENCED),
    (S.FATAL, In.CALL_CLOSE): E(S.FATAL),
    (S.CLOSED, In.CALL_CLOSE): E(S.CLOSED),
})

# An idempotent producer (no transactional_id): sends once initialised; a broken sequence
# re-initialises it (a new producer id, sequences at 0) while the application keeps sending.
IDEMPOTENT_TABLE = Table({
    (S.UNINITIALIZED, In.CALL_INIT): E(S.INITIALIZING, then=Do.ASK_PRODUCER_ID),
    (S.UNINITIALIZED, In.CALL_CLOSE): E(S.CLOSED),
    (S.INITIALIZING, In.CALL_INIT): E(S.INITIALIZING, then=Do.RESUME),
    (S.INITIALIZING, In.CALL_SEND): E(S.INITIALIZING),  # queued until the producer id arrives
    (S.INITIALIZING, In.CALL_CLOSE): E(S.CLOSED),
    (S.INITIALIZING, In.RECV_INIT_OK): E(S.READY),
    (S.INITIALIZING, In.RECV_BUMP_REQUIRED): E(S.INITIALIZING),  # another partition broke too
    (S.INITIALIZING, In.RECV_FENCED): E(S.FENCED),
    (S.INITIALIZING, In.RECV_FATAL): E(S.FATAL),
    (S.READY, In.CALL_SEND): E(S.READY),
    (S.READY, In.CALL_CLOSE): E(S.CLOSED),
    (S.READY, In.RECV_BUMP_REQUIRED): E(S.INITIALIZING, then=Do.ASK_PRODUCER_ID),
    (S.READY, In.RECV_FENCED): E(S.FENCED),
    (S.READY, In.RECV_FATAL): E(S.FATAL),
    (S.FENCED, In.CALL_CLOSE): E(S.FENCED),
    (S.FATAL, In.CALL_CLOSE): E(S.FATAL),
    (S.CLOSED, In.CALL_CLOSE): E(S.CLOSED),
})

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
    """A state and one table; every change goes through :meth:`step`.

    Args:
        table: ``TRANSACTIONAL_TABLE`` or ``IDEMPOTENT_TABLE``.
        history_size: How many transitions :attr:`history` keeps (oldest dropped first).
        holds: Judges a row's :class:`Guard`; without it every guard holds (the table alone).
    """

    def __init__(
        self,
        table: Table,
        *,
        history_size: int = 64,
        holds: Callable[[Guard], bool] | None = None,
    ) -> None:
        self.table = table
        self.state = State.UNINITIALIZED
        self.history: deque[Transition] = deque(maxlen=history_size)
        self._holds = holds

    def allows(self, input: Input) -> bool:
        """Whether ``input`` has a row from the current state, whatever its guard."""
        return (self.state, input) in self.table

    def permits(self, input: Input) -> bool:
        """Whether ``input`` has a row from the current state whose guard holds."""
        edge = self.table.edge((self.state, input))
        return edge is not None and self._passes(edge)

    def allowed_calls(self) -> list[Input]:
        """The application calls the current state has rows for, in declaration order."""
        return [i for i in Input if i.is_call and (self.state, i) in self.table]

    def step(self, input: Input, cause: str = "") -> Edge | None:
        """Follow the row for ``input`` and record it; return the row followed, None if the
        input was dropped.

        A broker event without a row moves to FATAL (the peer broke the protocol; the row
        returned is a bare ``Edge(FATAL)``), except in an absorbing state, which drops it. A
        timer without a row has nothing to do: dropped. A row whose guard does not hold is
        missing.

        Raises:
            IllegalStateError: ``input`` is an application call without a row here (or its
                guard does not hold); the state is unchanged.
        """
        edge = self.table.edge((self.state, input))
        if edge is None or not self._passes(edge):
            if input.is_call:
                raise IllegalStateError(self.refusal(input), api=None)
            if self.state in ABSORBING or input.is_timer:
                return None
            edge, cause = Edge(State.FATAL), f"illegal broker event {input.name}: {cause}"
        self.history.append(Transition(self.state, input, edge.target, cause))
        self.state = edge.target
        return edge

    def process(self, input: Input, cause: str = "") -> State:
        """:meth:`step`, returning the state it leaves the machine in.

        Raises:
            IllegalStateError: as :meth:`step`; the state is unchanged.
        """
        self.step(input, cause)
        return self.state

    def refusal(self, input: Input) -> str:
        """The message for a call the current state refuses: the state, why, what is allowed."""
        edge = self.table.edge((self.state, input))
        if edge is not None and edge.guard is not None:
            return f"{input.value} is not allowed in state {self.state.name} " + _REFUSED_BY[
                edge.guard]
        allowed = ", ".join(i.value for i in self.allowed_calls()) or "nothing"
        return (
            f"{input.value} is not allowed in state {self.state.name}: "
            f"{_HINTS[self.state]} (allowed here: {allowed})"
        )

    def _passes(self, edge: Edge) -> bool:
        return edge.guard is None or self._holds is None or self._holds(edge.guard)


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
edge is dropped. An edge whose guard does not hold is a missing edge. What each change does is
listed below the diagrams: the entered state's entry action, then the edge's own. The theory of
operation is in `eosclient/_core/txn.py`, the recovery rules beside the answers they read in
`TransactionCore`'s "answers" section; in short:

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
  abort; `abort_transaction()` then finds it done.
* `RECV_FENCED` from INVALID_PRODUCER_EPOCH (47) or PRODUCER_FENCED (90) on a coordinator
  request is final, also when the transaction had outlived `transaction.timeout.ms`: no KIP-588
  re-claim of a coordinator's timeout bump (InitProducerId with the old epoch) is tried.
  noida-db is lax, it bumps for a stale epoch in that form, so a zombie's probe would fence the
  live instance that took the transactional.id over; Tansu refuses the form; neither aborts on
  timeout. The argument is in `eosclient/_core/txn.py` (Decisions).
* `RECV_FENCED` also follows three EndTxn attempts in a row answered by the broker closing the
  connection (Tansu's answer to a stale epoch).
"""


def _actions_markdown(table: Table) -> str:
    """The rows of ``table`` that carry a guard or an action, as a Markdown table."""
    lines = ["| state | input | to | guard | then |", "|---|---|---|---|---|"]
    for (source, input) in table:
        edge = table.edge((source, input))
        if edge is None or (edge.guard is None and edge.then is None):
            continue
        guard = f"`{edge.guard.name}`" if edge.guard else ""
        then = f"`{edge.then.name}`" if edge.then else ""
        lines.append(f"| {source.name} | `{input.name}` | {edge.target.name} | {guard} | {then} |")
    return "\n".join(lines) + "\n"


def _legend_markdown() -> str:
    """Every guard and action, what it means, and which states run which action on entry."""
    entries = {action: [s.name for s, a in ON_ENTRY.items() if a is action] for action in Action}
    lines = ["| name | kind | meaning |", "|---|---|---|"]
    lines += [f"| `{g.name}` | guard | {g.value} |" for g in Guard]
    for action in Action:
        kind = f"entering {', '.join(entries[action])}" if entries[action] else "an edge's"
        lines.append(f"| `{action.name}` | {kind} | {action.value} |")
    return "\n".join(lines) + "\n"


def producer_states_markdown() -> str:
    """The whole of ``docs/producer-states.md``: the intro, both diagrams, guards and actions."""
    return (
        f"{_INTRO}\n## Transactional producer ({len(TRANSACTIONAL_TABLE)} edges)\n\n"
        f"```mermaid\n{mermaid_diagram(True)}```\n\n"
        f"## Idempotent producer, no transactional.id ({len(IDEMPOTENT_TABLE)} edges)\n\n"
        f"```mermaid\n{mermaid_diagram(False)}```\n\n"
        "## What a change does\n\n"
        "The edge is followed and recorded; if the state changed, the entered state's entry "
        "action runs; then the edge's own action. Edges not listed only change the state (and "
        "run the entry action).\n\n"
        f"### Transactional edges with a guard or an action\n\n"
        f"{_actions_markdown(TRANSACTIONAL_TABLE)}\n"
        f"### Idempotent edges with an action\n\n{_actions_markdown(IDEMPOTENT_TABLE)}\n"
        f"### Guards and actions\n\n{_legend_markdown()}"
    )
