"""The transaction state machine's table (eosclient._core._txn_table), sans-IO: every state and
input against the table and against the core, refusals, the diagram."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from _txn_driver import END, IN0, TP0, TXN, Driver

from eosclient._core._txn_table import ABSORBING, ON_ENTRY, Action, Guard, StateMachine
from eosclient._core.txn import IDEMPOTENT_TABLE, TRANSACTIONAL_TABLE, Input, State, mermaid_diagram
from eosclient.errors import EpochBumpRequiredError, FatalError, FencedError, IllegalStateError

TABLES = {"transactional": TRANSACTIONAL_TABLE, "idempotent": IDEMPOTENT_TABLE}


def _paths(table: Any) -> dict[State, list[Input]]:
    """The shortest input sequence from UNINITIALIZED to every reachable state (BFS)."""
    paths: dict[State, list[Input]] = {State.UNINITIALIZED: []}
    queue = deque([State.UNINITIALIZED])
    while queue:
        state = queue.popleft()
        for (source, event), target in table.items():
            if source is state and target not in paths:
                paths[target] = [*paths[state], event]
                queue.append(target)
    return paths


MACHINE_CASES = [
    pytest.param(name, state, event, id=f"{name}-{state.name}-{event.name}")
    for name, table in TABLES.items()
    for state in _paths(table)
    for event in Input
]


@pytest.mark.parametrize(("name", "state", "event"), MACHINE_CASES)
def test_every_state_input_pair(name: str, state: State, event: Input) -> None:
    table = TABLES[name]
    machine = StateMachine(table)
    for step in _paths(table)[state]:
        machine.process(step, "setup")
    assert machine.state is state
    before = list(machine.history)
    target = table.get((state, event))
    if target is not None:
        assert machine.process(event, "test") is target
    elif event.is_call:
        with pytest.raises(IllegalStateError, match=state.name):
            machine.process(event, "test")
        assert machine.state is state and list(machine.history) == before
    else:
        expected = state if state in ABSORBING or event.is_timer else State.FATAL
        assert machine.process(event, "test") is expected
        if event.is_timer:  # a timer with nothing to do is dropped, not recorded
            assert list(machine.history) == before


def test_every_state_is_reachable_and_absorbing_states_only_close() -> None:
    assert set(_paths(TRANSACTIONAL_TABLE)) == set(State)
    for table in TABLES.values():
        for (source, event), target in table.items():
            if source in ABSORBING:
                assert (event, target) == (Input.CALL_CLOSE, source)


def test_refusal_names_the_state_and_what_is_allowed() -> None:
    core = Driver().ready().core
    with pytest.raises(IllegalStateError) as caught:
        core.commit(0, 1)
    message = str(caught.value)
    assert "READY" in message and "begin_transaction()" in message and "close()" in message


@pytest.mark.parametrize("transactional", [True, False])
def test_diagram_draws_every_edge(transactional: bool) -> None:
    table = TRANSACTIONAL_TABLE if transactional else IDEMPOTENT_TABLE
    lines = mermaid_diagram(transactional).splitlines()
    for (source, event), target in table.items():
        prefix = f"    {source.name} --> {target.name}: "
        assert any(line.startswith(prefix) and event.name in line.split(": ")[1].split(" / ")
                   for line in lines), (source, event, target)


def _reach(state: State, transactional: bool) -> Driver:
    """A driver whose core is in ``state``, reached through public calls and answers only."""
    driver = Driver(TXN if transactional else None)
    core = driver.core
    if state is State.INITIALIZING:
        core.init(0, 30)
    elif state is State.CLOSED:
        core.close()
    elif state is not State.UNINITIALIZED:
        driver.ready() if not transactional else driver.in_txn(TP0)
        driver.batches = True
        if state is State.READY and transactional:
            core.commit(0, 30)
            driver.batches = False
            driver.run(END)
        elif state in (State.COMMITTING, State.ABORTING):
            (core.commit if state is State.COMMITTING else core.abort)(0, 30)
        elif state in (State.ABORTABLE_ERROR, State.FENCED, State.FATAL):
            driver.produce_error({State.ABORTABLE_ERROR: 45, State.FENCED: 90,
                                  State.FATAL: 21}[state])
    assert core.state is state
    return driver


_CALLS = {
    Input.CALL_INIT: lambda core: core.init(1.0, 31.0),
    Input.CALL_BEGIN: lambda core: core.begin(1.0),
    Input.CALL_SEND: lambda core: core.send(TP0),
    Input.CALL_SEND_OFFSETS: lambda core: core.send_offsets({IN0: 5}, "copier", 1.0, 31.0),
    Input.CALL_COMMIT: lambda core: core.commit(1.0, 31.0),
    Input.CALL_ABORT: lambda core: core.abort(1.0, 31.0),
    Input.CALL_CLOSE: lambda core: core.close(),
}
_REFUSED_WITH = {State.ABORTABLE_ERROR: EpochBumpRequiredError, State.FENCED: FencedError,
                 State.FATAL: FatalError}
# The states in their dict's insertion order, never a set's: a set of enum members is ordered by
# the members' string hashes, which differ per process, and pytest-xdist's workers must all
# collect the same list.
CORE_CASES = [
    pytest.param(name, state, call, id=f"{name}-{state.name}-{call.name}")
    for name, table in TABLES.items()
    for state in (_paths(table) if name == "transactional" else
                  (State.UNINITIALIZED, State.INITIALIZING, State.READY, State.FENCED,
                   State.FATAL, State.CLOSED))
    for call in _CALLS
]


@pytest.mark.parametrize(("name", "state", "call"), CORE_CASES)
def test_every_state_call_pair_on_the_core(name: str, state: State, call: Input) -> None:
    driver = _reach(state, name == "transactional")
    core, table = driver.core, TABLES[name]
    history = core.history
    target = table.get((state, call))
    if target is not None:
        _CALLS[call](core)
        assert core.state is target
    else:
        with pytest.raises(_REFUSED_WITH.get(state, IllegalStateError)):
            _CALLS[call](core)
        assert core.state is state and core.history == history



def test_a_guard_that_does_not_hold_is_a_missing_row() -> None:
    # A guard judged outside the table (a check before the call, a test before the timer) once
    # let a reader of the table believe an abort was always allowed while committing.
    machine = StateMachine(TRANSACTIONAL_TABLE, holds=lambda guard: False)
    for step in _paths(TRANSACTIONAL_TABLE)[State.COMMITTING]:
        machine.process(step, "setup")
    history = list(machine.history)
    with pytest.raises(IllegalStateError, match="only be retried as a commit"):
        machine.process(Input.CALL_ABORT, "test")
    assert machine.process(Input.TIMER_TXN_EXPIRED, "test") is State.COMMITTING
    assert machine.state is State.COMMITTING and list(machine.history) == history
    assert machine.allows(Input.CALL_ABORT) and not machine.permits(Input.CALL_ABORT)


def test_every_guard_and_action_is_named_by_a_row_or_an_entry() -> None:
    # A name no row uses is a rule that silently stopped applying when a row was edited.
    edges = [table.edge(key) for table in TABLES.values() for key in table]
    assert {edge.guard for edge in edges if edge and edge.guard} == set(Guard)
    assert {edge.then for edge in edges if edge and edge.then} | set(ON_ENTRY.values()) == set(
        Action)


def test_the_core_has_a_body_for_every_guard_and_action() -> None:
    # The table names what a change does; a name without a body would fail only when reached.
    core = Driver().core
    assert set(core._guards) == set(Guard)
    assert set(core._actions) == set(Action)
