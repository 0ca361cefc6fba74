"""The transaction state machine (eosclient._core.txn), sans-IO: calls and responses in, requests
out, time passed in. No broker; state is reached only through public inputs."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from eosclient._core._txn_table import ABSORBING, StateMachine
from eosclient._core.accumulator import AccumulatorSettings, RecordAccumulator
from eosclient._core.txn import (
    IDEMPOTENT_TABLE,
    TRANSACTIONAL_TABLE,
    Completion,
    Destination,
    EndOutcome,
    FailUnsent,
    GroupMetadata,
    Input,
    Node,
    ProducerIdentity,
    Recovery,
    SendRequest,
    SequencesReset,
    State,
    TopicPartition,
    TransactionCore,
    Wait,
    mermaid_diagram,
)
from eosclient._protocol.apis import APIS
from eosclient.errors import (
    AbortableError,
    ApiKey,
    EosError,
    EpochBumpRequiredError,
    FatalError,
    FencedError,
    IllegalStateError,
    InvalidGroupIdError,
    KafkaConnectionError,
    KafkaTimeoutError,
    UnknownPartitionError,
    error_for,
)

TXN = "orders-1"
TP0, TP1, TP2 = TopicPartition("out", 0), TopicPartition("out", 1), TopicPartition("out", 2)
IN0 = TopicPartition("in", 0)
FIND, INIT = ApiKey.FIND_COORDINATOR, ApiKey.INIT_PRODUCER_ID
ADD_PARTS, ADD_OFFS = ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN
OFFSETS, END = ApiKey.TXN_OFFSET_COMMIT, ApiKey.END_TXN


def api_of(send: SendRequest) -> ApiKey:
    return ApiKey(send.request.API_KEY)


class Broker:
    """Answers the core's requests the way a coordinator would (same producer id, epoch + 1)."""

    def __init__(self) -> None:
        self.node = Node(1, "broker-1", 9092)
        self.producer_id, self.epoch = 4000, -1

    def response(self, send: SendRequest, code: int = 0, **fields: Any) -> Any:
        request, api = send.request, api_of(send)
        cls = APIS[api].response
        if api is FIND:
            node = fields.pop("node", self.node)
            return cls(error_code=code, node_id=node.node_id, host=node.host, port=node.port)
        if api is INIT:
            if code == 0:
                self.epoch += 1
            return cls(error_code=code, producer_id=self.producer_id, producer_epoch=self.epoch)
        if api is ADD_PARTS:
            return cls(results_by_topic_v3_and_below=[
                cls.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
                    cls.AddPartitionsToTxnTopicResult.AddPartitionsToTxnPartitionResult(
                        partition_index=p, partition_error_code=code) for p in t.partitions])
                for t in request.v3_and_below_topics])
        if api is OFFSETS:
            topic = cls.TxnOffsetCommitResponseTopic
            return cls(topics=[topic(name=t.name, partitions=[
                topic.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                                       error_code=code)
                for p in t.partitions]) for t in request.topics])
        return cls(error_code=code, **fields)


class Driver:
    """Drives one TransactionCore through a conversation with a fake Broker."""

    def __init__(self, transactional_id: str | None = TXN, **settings: Any) -> None:
        self.core = TransactionCore(transactional_id=transactional_id, **settings)
        self.broker = Broker()
        self.now = 0.0
        self.batches = False  # the accumulator's "incomplete batches" flag
        self.events: list[FailUnsent | SequencesReset] = []

    def poll(self) -> list[SendRequest]:
        sends = []
        for out in self.core.poll(self.now, incomplete_batches=self.batches):
            if isinstance(out, SendRequest):
                sends.append(out)
            else:
                self.events.append(out)
        return sends

    def expect(self, *apis: ApiKey) -> list[SendRequest]:
        sends = self.poll()
        assert [api_of(s) for s in sends] == list(apis)
        return sends

    def respond(self, send: SendRequest, code: int = 0, **fields: Any) -> None:
        self.core.on_response(send.request, self.broker.response(send, code, **fields), self.now)

    def run(self, api: ApiKey, code: int = 0, **fields: Any) -> SendRequest:
        (send,) = self.expect(api)
        self.respond(send, code, **fields)
        return send

    def ready(self) -> Driver:
        self.core.init(self.now, self.now + 30)
        if self.core.transactional:
            self.run(FIND)
        self.run(INIT)
        return self

    def in_txn(self, *tps: TopicPartition) -> Driver:
        """READY, then begin and lazily register ``tps``."""
        if self.core.state is State.UNINITIALIZED:
            self.ready()
        self.core.begin(self.now)
        if tps:
            self.core.add_partitions(tps)
            self.run(ADD_PARTS)
        return self

    def produce_error(self, code: int) -> None:
        error = error_for(ApiKey.PRODUCE, code)
        self.core.on_produce_error(error, self.core.identity, self.core.generation, self.now)


# -- the table ------------------------------------------------------------------------------

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
        expected = state if state in ABSORBING else State.FATAL
        assert machine.process(event, "test") is expected


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
CORE_CASES = [
    pytest.param(name, state, call, id=f"{name}-{state.name}-{call.name}")
    for name, table in TABLES.items()
    for state in (set(_paths(table)) if name == "transactional" else
                  {State.UNINITIALIZED, State.INITIALIZING, State.READY, State.FENCED,
                   State.FATAL, State.CLOSED})
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


# -- init ------------------------------------------------------------------------------------


def test_init_happy_path() -> None:
    driver = Driver(transaction_timeout_ms=45_000)
    done = driver.core.init(0.0, 30.0)
    (find,) = driver.expect(FIND)
    assert (find.destination, find.node, find.request.key, find.request.key_type) == (
        Destination.ANY_BROKER, None, TXN, 1)
    driver.respond(find)
    (init,) = driver.expect(INIT)
    assert init.destination is Destination.TXN_COORDINATOR and init.node == driver.broker.node
    assert (init.request.transactional_id, init.request.transaction_timeout_ms) == (TXN, 45_000)
    assert (init.request.producer_id, init.request.producer_epoch) == (-1, -1)
    driver.respond(init)
    assert driver.core.state is State.READY and done.done and done.error is None
    assert driver.core.identity == ProducerIdentity(4000, 0)
    assert driver.poll() == []
    assert driver.events == [SequencesReset(ProducerIdentity(-1, -1), ProducerIdentity(4000, 0))]


def test_init_coordinator_moved_then_loading() -> None:
    # NOT_COORDINATOR (16) must find the coordinator again; LOAD_IN_PROGRESS (14) must not
    driver = Driver()
    driver.core.init(0.0, 30.0)
    driver.run(FIND)
    driver.now = 1.0
    driver.run(INIT, 16)
    moved = Node(2, "broker-2", 9093)
    (find,) = driver.expect(FIND)
    assert find.not_before == pytest.approx(1.1)
    driver.respond(find, node=moved)
    (init,) = driver.expect(INIT)
    assert init.node == moved and init.not_before == pytest.approx(1.1)
    driver.respond(init, 14)
    (init,) = driver.expect(INIT)  # same coordinator, after a longer backoff
    assert init.node == moved and init.not_before == pytest.approx(1.2)
    driver.respond(init)
    assert driver.core.state is State.READY


def test_find_coordinator_v4_answer_is_read_per_key() -> None:
    driver = Driver()
    driver.core.init(0.0, 30.0)
    (find,) = driver.expect(FIND)
    cls = APIS[FIND].response
    response = cls(coordinators=[cls.Coordinator(key=TXN, node_id=7, host="h7", port=1)])
    driver.core.on_response(find.request, response, 0.0)
    (init,) = driver.expect(INIT)
    assert init.node == Node(7, "h7", 1)


def test_init_deadline_then_resume() -> None:
    driver = Driver()
    first = driver.core.init(0.0, 1.0)
    (find,) = driver.expect(FIND)
    while not first.done:
        driver.respond(find, 15)  # COORDINATOR_NOT_AVAILABLE, retried with backoff
        driver.now += 0.4
        (find,) = driver.expect(FIND)
    assert isinstance(first.error, KafkaTimeoutError) and driver.core.state is State.INITIALIZING
    assert isinstance(first.error.__cause__, EosError) and first.error.__cause__.code == 15
    second = driver.core.init(driver.now, driver.now + 30)
    driver.respond(find)
    driver.run(INIT)
    assert second.done and second.error is None and driver.core.state is State.READY


def test_init_that_timed_out_and_then_succeeded_reports_success() -> None:
    # a repeated call after a timeout must not fail because the work finished meanwhile (Java's
    # pendingTransition)
    driver = Driver()
    first = driver.core.init(0.0, 1.0)
    (find,) = driver.expect(FIND)
    driver.now = 2.0
    driver.poll()
    assert isinstance(first.error, KafkaTimeoutError)
    driver.respond(find)
    driver.run(INIT)
    again = driver.core.init(driver.now, driver.now + 1)
    assert again.done and again.error is None and driver.core.state is State.READY


def test_init_fenced_and_fatal() -> None:
    for code, state, kind in ((90, State.FENCED, FencedError), (53, State.FATAL, FatalError)):
        driver = Driver()
        done = driver.core.init(0.0, 30.0)
        driver.run(FIND)
        driver.run(INIT, code)
        assert driver.core.state is state and isinstance(done.error, kind)
        with pytest.raises(kind):
            driver.core.begin(0.0)


# -- pre-registration (KIP-609 style) and lazy registration ----------------------------------


def test_pre_registration_sends_both_at_once_and_gates_produce() -> None:
    driver = Driver().ready()
    core = driver.core
    driver.now = 5.0
    core.begin(5.0, partitions=[TP0, TP1], group_id="copier")
    add_parts, add_offs = driver.expect(ADD_PARTS, ADD_OFFS)  # one poll, pipelined
    assert [(t.name, t.partitions) for t in add_parts.request.v3_and_below_topics] == [
        ("out", [0, 1])]
    assert add_offs.request.group_id == "copier"
    assert add_parts.not_before == add_offs.not_before == 5.0
    generation = core.send(TP0)
    assert not core.partition_ready(TP0) and not core.may_drain(TP0, generation)
    driver.respond(add_parts)
    assert core.partition_ready(TP0) and core.partition_ready(TP1)
    assert core.may_drain(TP0, generation) and not core.may_drain(TP0, generation - 1)
    driver.respond(add_offs)
    assert driver.poll() == [] and core.state is State.IN_TRANSACTION


def test_undeclared_partition_and_group_fail_locally_and_change_nothing() -> None:
    driver = Driver().ready()
    core = driver.core
    core.begin(0.0, partitions=[TP0], group_id="copier")
    driver.expect(ADD_PARTS, ADD_OFFS)
    history = core.history
    with pytest.raises(UnknownPartitionError, match=r"out\[1\]"):
        core.send(TP1)
    with pytest.raises(InvalidGroupIdError, match="other"):
        core.send_offsets({IN0: 1}, "other", 0.0, 30.0)
    assert core.state is State.IN_TRANSACTION and core.history == history
    assert driver.poll() == []


def test_lazy_registration_batches_pending_partitions() -> None:
    driver = Driver().in_txn()
    core = driver.core
    core.send(TP0)
    core.send(TP1)
    core.send(TP0)
    (first,) = driver.expect(ADD_PARTS)
    core.send(TP2)  # while the first is in flight: waits for the next request
    assert driver.poll() == []
    driver.respond(first)
    (second,) = driver.expect(ADD_PARTS)
    assert [t.partitions for t in first.request.v3_and_below_topics] == [[0, 1]]
    assert [t.partitions for t in second.request.v3_and_below_topics] == [[2]]


def test_concurrent_transactions_after_commit_retries_at_20ms() -> None:
    # CONCURRENT_TRANSACTIONS right after a commit used to wait the full 100 ms backoff
    driver = Driver().in_txn(TP0)
    driver.core.commit(0.0, 30.0)
    driver.run(END)
    driver.core.begin(1.0)
    driver.core.send(TP0)
    driver.now = 1.0
    driver.run(ADD_PARTS, 51)
    (again,) = driver.expect(ADD_PARTS)
    assert again.not_before == pytest.approx(1.020)
    driver.respond(again, 51)
    (third,) = driver.expect(ADD_PARTS)
    assert third.not_before == pytest.approx(1.040)
    driver.respond(third)
    driver.core.send(TP1)  # now something is registered: 51 is an ordinary retry
    driver.run(ADD_PARTS, 51)
    (later,) = driver.expect(ADD_PARTS)
    assert later.not_before == pytest.approx(1.1)


# -- send_offsets (KIP-447) -----------------------------------------------------------------


def test_send_offsets_registers_group_then_commits_with_group_metadata() -> None:
    driver = Driver().in_txn(TP0)
    core = driver.core
    group = GroupMetadata("copier", generation_id=3, member_id="m-1", group_instance_id="i-1")
    done = core.send_offsets({IN0: 42}, group, 0.0, 30.0)
    driver.run(ADD_OFFS)  # TxnOffsetCommit waits for AddOffsetsToTxn
    (find,) = driver.expect(FIND)
    assert (find.request.key, find.request.key_type) == ("copier", 0)
    driver.respond(find)
    (commit,) = driver.expect(OFFSETS)
    request = commit.request
    assert commit.destination is Destination.GROUP_COORDINATOR
    assert (request.group_id, request.generation_id, request.member_id,
            request.group_instance_id) == ("copier", 3, "m-1", "i-1")
    assert (request.producer_id, request.producer_epoch) == (4000, 0)
    assert request.topics[0].partitions[0].committed_offset == 42
    assert not done.done
    driver.respond(commit)
    assert done.done and done.error is None


def test_stale_generation_on_txn_offset_commit_is_abortable() -> None:
    driver = Driver().in_txn(TP0)
    done = driver.core.send_offsets({IN0: 1}, "copier", 0.0, 30.0)
    driver.run(ADD_OFFS)
    driver.run(FIND)
    driver.run(OFFSETS, 22)  # ILLEGAL_GENERATION (KIP-447)
    assert driver.core.state is State.ABORTABLE_ERROR and isinstance(done.error, AbortableError)
    assert driver.core.recovery is Recovery.ABORT


# -- commit ----------------------------------------------------------------------------------


def test_commit_waits_for_batches_and_registrations() -> None:
    driver = Driver().in_txn()
    core = driver.core
    core.send(TP0)
    driver.batches = True
    done = core.commit(0.0, 30.0)
    (add,) = driver.expect(ADD_PARTS)  # the lazy partition is still registered first
    assert core.waiting_for() == {Wait.REGISTRATION, Wait.BATCHES}
    driver.respond(add)
    assert driver.poll() == [] and core.waiting_for() == {Wait.BATCHES}
    driver.batches = False
    (end,) = driver.expect(END)
    assert end.request.committed is True and core.waiting_for() == {Wait.END_TXN}
    driver.respond(end)
    assert done.done and done.error is None and core.state is State.READY


def test_commit_with_nothing_registered_sends_no_end_txn() -> None:
    driver = Driver().in_txn()
    done = driver.core.commit(0.0, 30.0)
    assert driver.poll() == [] and done.done and driver.core.state is State.READY


def test_commit_in_abortable_error_raises_the_error_again() -> None:
    driver = Driver().in_txn(TP0)
    driver.produce_error(120)  # TRANSACTION_ABORTABLE (KIP-890): abortable with a bump
    history = driver.core.history
    for _ in range(2):
        with pytest.raises(EpochBumpRequiredError, match="TRANSACTION_ABORTABLE"):
            driver.core.commit(0.0, 30.0)
    assert driver.core.state is State.ABORTABLE_ERROR and driver.core.history == history


def test_batch_failing_during_commit_fails_the_commit() -> None:
    driver = Driver().in_txn(TP0)
    driver.batches = True
    done = driver.core.commit(0.0, 30.0)
    assert driver.poll() == []
    driver.produce_error(45)
    assert driver.core.state is State.ABORTABLE_ERROR
    assert isinstance(done.error, EpochBumpRequiredError) and driver.core.ending is None


# -- KIP-360: abort, fail unsent, EndTxn(abort), bump -----------------------------------------


@pytest.mark.parametrize("code", [45, 59, 10])
def test_kip360_abort_fails_unsent_ends_then_bumps(code: int) -> None:
    # kafka-python 3.0.12 bumped at once and drained the failed transaction's queued records
    # into the next transaction under the new epoch (45 OUT_OF_ORDER, 59 UNKNOWN_PRODUCER_ID,
    # 10 MESSAGE_TOO_LARGE)
    driver = Driver().in_txn(TP0)
    core = driver.core
    failed_generation = core.send(TP0)
    driver.produce_error(code)
    assert core.state is State.ABORTABLE_ERROR and core.recovery is Recovery.BUMP_EPOCH
    assert core.identity == ProducerIdentity(4000, 0)  # nothing bumped yet
    assert not core.may_drain(TP0, failed_generation)
    with pytest.raises(EpochBumpRequiredError):
        core.send(TP0)
    driver.batches = True  # one batch still in flight
    done = core.abort(1.0, 30.0)
    assert driver.poll() == []  # KAFKA-14053: no EndTxn while a batch is in flight
    assert driver.events[-1] == FailUnsent(failed_generation, core.error)  # type: ignore[arg-type]
    assert isinstance(core.error, EpochBumpRequiredError) and core.error.code == code
    driver.batches = False
    (end,) = driver.expect(END)
    assert (end.request.committed, end.request.producer_epoch) == (False, 0)
    driver.respond(end)
    assert core.state is State.ABORTING and not done.done
    (bump,) = driver.expect(INIT)
    assert (bump.request.transactional_id, bump.request.producer_id,
            bump.request.producer_epoch) == (TXN, 4000, 0)
    driver.respond(bump)
    assert core.state is State.READY and done.done and done.error is None
    assert core.identity == ProducerIdentity(4000, 1)
    assert driver.poll() == []
    assert driver.events[-1] == SequencesReset(ProducerIdentity(4000, 0), ProducerIdentity(4000, 1))
    core.begin(2.0)
    assert core.send(TP0) == failed_generation + 1
    driver.run(ADD_PARTS)
    assert core.may_drain(TP0, failed_generation + 1)
    assert not core.may_drain(TP0, failed_generation)  # the failed transaction's records never


def test_resends_are_allowed_while_failing_and_aborting_new_batches_are_not() -> None:
    # partition_ready() was False while ABORTING, so a batch due for a resend never drained and
    # EndTxn(abort), which must follow its answer (KAFKA-14053), waited forever.
    driver = Driver().in_txn(TP0)
    core = driver.core
    generation = core.send(TP0)
    assert core.may_resend(TP0) and not core.may_resend(TP1)  # TP1 was never registered
    driver.produce_error(45)  # another partition's sequence broke: the transaction is lost
    assert core.state is State.ABORTABLE_ERROR
    assert core.may_resend(TP0) and not core.may_drain(TP0, generation)
    driver.batches = True  # TP0's batch waits for its resend
    done = core.abort(1.0, 30.0)
    assert core.state is State.ABORTING and driver.poll() == []  # no EndTxn before its answer
    assert core.may_resend(TP0) and not core.may_drain(TP0, generation)
    driver.batches = False  # the resend was answered
    driver.run(END)
    driver.run(INIT)  # the KIP-360 bump
    assert done.done and core.state is State.READY
    assert not core.may_resend(TP0)  # the transaction is over: nothing of it goes out again


def test_nothing_is_resent_after_a_fence() -> None:
    driver = Driver().in_txn(TP0)
    driver.produce_error(90)  # PRODUCER_FENCED
    assert driver.core.state is State.FENCED and not driver.core.may_resend(TP0)


def test_idempotent_resends_only_while_ready() -> None:
    driver = Driver(None)
    driver.core.init(0.0, 30.0)
    assert not driver.core.may_resend(TP0)
    driver.run(INIT)
    assert driver.core.may_resend(TP0)
    driver.produce_error(45)  # re-initialising: the old identity's batches are dropped
    assert driver.core.state is State.INITIALIZING and not driver.core.may_resend(TP0)


def test_the_core_as_drain_gate_keeps_a_failed_transaction_out_of_the_next() -> None:
    # The accumulator used to take a partition-only predicate; a failed transaction's batch was
    # kept out of the next one only because the producer applied FailUnsent before any drain.
    driver = Driver().ready()
    core = driver.core
    acc = RecordAccumulator(AccumulatorSettings(), identity=core.identity)
    core.begin(0.0, partitions=[TP0])
    driver.run(ADD_PARTS)
    failed = core.send(TP0)
    acc.append(TP0, None, b"failed", timestamp_ms=0, now=0.0, generation=failed)
    core.abort(0.0, 30.0)
    driver.events.clear()  # FailUnsent(failed) is deliberately not applied
    driver.run(END)
    core.begin(1.0, partitions=[TP0])
    driver.run(ADD_PARTS)
    acc.append(TP0, None, b"next", timestamp_ms=0, now=1.0, generation=core.send(TP0))
    assert acc.drain(core, 1.0, flush=True) == {}  # the failed batch blocks; it never goes
    acc.fail_generation(failed, AbortableError("aborted"))
    (ready,) = acc.drain(core, 1.0, flush=True).values()
    assert ready.generation == core.generation


@pytest.mark.parametrize("code", [-1, 35, 59])
def test_bump_form_rejected_falls_back_to_plain_init(code: int) -> None:
    # Tansu answers the KIP-360 form with UNKNOWN_SERVER_ERROR (-1); old brokers 35 or 59
    driver = Driver().in_txn(TP0)
    driver.produce_error(45)
    done = driver.core.abort(0.0, 30.0)
    driver.run(END)
    driver.run(INIT, code)
    (plain,) = driver.expect(INIT)
    assert (plain.request.producer_id, plain.request.producer_epoch) == (-1, -1)
    driver.respond(plain)
    assert driver.core.state is State.READY and done.done and done.error is None
    driver.in_txn(TP0).produce_error(59)  # the next bump goes plain at once
    driver.core.abort(0.0, 30.0)
    driver.run(END)
    (again,) = driver.expect(INIT)
    assert again.request.producer_id == -1


def test_plain_init_also_failing_is_fatal() -> None:
    driver = Driver().in_txn(TP0)
    driver.produce_error(45)
    done = driver.core.abort(0.0, 30.0)
    driver.run(END)
    driver.run(INIT, -1)
    driver.run(INIT, -1)
    assert driver.core.state is State.FATAL and isinstance(done.error, FatalError)


def test_end_txn_abort_unknown_producer_goes_straight_to_the_bump() -> None:
    driver = Driver().in_txn(TP0)
    driver.core.abort(0.0, 30.0)
    driver.run(END, 59)  # the coordinator lost the producer id: nothing to end
    assert driver.core.recovery is Recovery.BUMP_EPOCH
    (bump,) = driver.expect(INIT)
    assert bump.request.producer_id == 4000


def test_expired_batch_bumps_and_delays_end_txn_by_the_grace() -> None:
    # KAFKA-14053: a batch whose answer never came may still be appended after the abort marker
    driver = Driver(unknown_outcome_grace_ms=500).in_txn(TP0)
    core = driver.core
    driver.now = 3.0
    core.on_produce_error(KafkaConnectionError("cut"), core.identity, core.generation, 3.0)
    assert core.recovery is Recovery.BUMP_EPOCH
    assert isinstance(core.error, EpochBumpRequiredError)
    assert isinstance(core.error.__cause__, KafkaConnectionError)
    core.abort(3.1, 30.0)
    driver.now = 3.1
    (end,) = driver.expect(END)
    assert end.not_before == pytest.approx(3.5)


def test_plain_abort_keeps_the_epoch() -> None:
    driver = Driver().in_txn(TP0)
    done = driver.core.abort(0.0, 30.0)
    driver.run(END)
    assert driver.core.state is State.READY and driver.core.identity.epoch == 0 and done.done


# -- unknown outcome --------------------------------------------------------------------------


def test_unknown_end_txn_is_resumed_by_a_second_commit() -> None:
    driver = Driver().in_txn(TP0)
    core = driver.core
    first = core.commit(0.0, 1.0)
    (end,) = driver.expect(END)
    driver.now = 0.5
    core.on_request_failed(end.request, 0.5, KafkaConnectionError("connection reset"))
    assert core.state is State.COMMITTING and core.ending is not None
    assert core.ending.outcome is EndOutcome.UNKNOWN and core.ending.committed
    with pytest.raises(IllegalStateError, match="COMMITTING"):
        core.begin(0.5)  # a delayed EndTxn could otherwise land on the next transaction
    with pytest.raises(IllegalStateError, match="only be retried as a commit"):
        core.abort(0.5, 30.0)
    driver.run(FIND)  # the connection dropped: find the coordinator again
    (again,) = driver.expect(END)
    driver.now = 2.0
    driver.poll()
    assert isinstance(first.error, KafkaTimeoutError) and "outcome is unknown" in str(first.error)
    second = core.commit(2.0, 30.0)
    assert not second.done and again.request.committed is True
    driver.respond(again)
    (bump,) = driver.expect(INIT)  # the lost EndTxn may still land: bump before READY
    assert (bump.request.producer_id, bump.request.producer_epoch) == (4000, 0)
    driver.respond(bump)
    assert second.done and second.error is None and core.state is State.READY


def test_unknown_end_txn_retried_after_backoff_is_sent_at_once_on_resume() -> None:
    driver = Driver().in_txn(TP0)
    driver.core.commit(0.0, 30.0)
    driver.run(END, 51)
    (again,) = driver.expect(END)
    assert again.not_before == pytest.approx(0.1)
    driver.core.on_request_failed(again.request, 0.2)
    driver.run(FIND)
    driver.now = 0.3
    driver.core.commit(0.3, 30.0)
    (third,) = driver.expect(END)
    assert third.not_before <= 0.3


def test_resent_end_txn_also_waits_for_incomplete_batches() -> None:
    # found by the random conversation: a lost EndTxn was re-sent while a batch was reported
    # incomplete
    driver = Driver().in_txn(TP0)
    driver.core.abort(0.0, 30.0)
    (end,) = driver.expect(END)
    driver.core.on_request_failed(end.request, 0.1)
    driver.run(FIND)
    driver.batches = True
    assert driver.poll() == []
    driver.batches = False
    (again,) = driver.expect(END)
    assert again.request.committed is False


def test_init_after_an_unanswered_commit_reinitialises_and_ignores_the_late_answer() -> None:
    driver = Driver().in_txn(TP0)
    core = driver.core
    commit = core.commit(0.0, 1.0)
    (end,) = driver.expect(END)
    driver.now = 1.5
    assert driver.poll() == [] and isinstance(commit.error, KafkaTimeoutError)
    generation = core.generation
    init = core.init(1.5, 30.0)
    assert core.state is State.INITIALIZING
    (reinit,) = driver.expect(INIT)
    assert reinit.request.producer_id == 4000  # the KIP-360 form: never takes the id back
    assert driver.events[-1].generation == generation  # type: ignore[union-attr]
    driver.respond(end, 47)  # the old epoch's EndTxn, answered late: not a fence of this one
    assert core.state is State.INITIALIZING
    driver.respond(reinit)
    assert core.state is State.READY and core.identity.epoch == 1 and init.done


# -- fencing and stale identities -------------------------------------------------------------


@pytest.mark.parametrize("code", [47, 90])
def test_fenced_by_end_txn(code: int) -> None:
    # noida-db answers INVALID_PRODUCER_EPOCH (47) where Kafka answers PRODUCER_FENCED (90)
    driver = Driver().in_txn(TP0)
    core = driver.core
    done = core.commit(0.0, 30.0)
    driver.run(END, code)
    assert core.state is State.FENCED and isinstance(done.error, FencedError)
    assert isinstance(driver.poll(), list) and isinstance(driver.events[-1], FailUnsent)
    for call in (lambda: core.send(TP0), lambda: core.begin(0.0),
                 lambda: core.commit(0.0, 1.0), lambda: core.init(0.0, 1.0)):
        with pytest.raises(FencedError, match=f"\\({code}\\)"):
            call()
    core.close()
    assert core.state is State.FENCED
    driver.produce_error(45)  # broker events are dropped in a terminal state
    assert core.state is State.FENCED


def test_produce_error_for_an_old_identity_is_ignored() -> None:
    # KAFKA-14830: a failure reported for the epoch before a bump moved the new epoch's state
    driver = Driver().in_txn(TP0)
    core = driver.core
    old, old_generation = core.identity, core.generation
    driver.produce_error(59)
    core.abort(0.0, 30.0)
    driver.run(END)
    driver.run(INIT)
    driver.in_txn(TP0)
    core.on_produce_error(error_for(ApiKey.PRODUCE, 45), old, core.generation, 0.0)
    core.on_produce_error(error_for(ApiKey.PRODUCE, 90), core.identity, old_generation, 0.0)
    core.on_batch_expired(old, core.generation, 0.0)
    assert core.state is State.IN_TRANSACTION and core.identity.epoch == 1


def test_answer_for_abandoned_work_is_ignored_and_unknown_requests_rejected() -> None:
    driver = Driver().in_txn(TP0)
    core = driver.core
    core.send(TP1)
    (add,) = driver.expect(ADD_PARTS)
    core.close()
    driver.respond(add, 90)
    assert core.state is State.CLOSED
    with pytest.raises(ValueError, match="not a request in flight"):
        core.on_response(add.request, object(), 0.0)


def test_close_fails_pending_calls_and_unsent_batches() -> None:
    driver = Driver().in_txn(TP0)
    driver.batches = True
    done = driver.core.commit(0.0, 30.0)
    driver.core.close()
    assert isinstance(done.error, IllegalStateError)
    driver.poll()
    assert isinstance(driver.events[-1], FailUnsent)
    with pytest.raises(IllegalStateError, match="CLOSED"):
        driver.core.begin(0.0)


def test_history_is_bounded_and_names_causes() -> None:
    driver = Driver(history_size=4).in_txn(TP0)
    assert len(driver.core.history) == 4
    last = driver.core.history[-1]
    assert (last.input, last.target) == (Input.RECV_REGISTERED, State.IN_TRANSACTION)
    assert "out" in last.cause


# -- idempotent only --------------------------------------------------------------------------


def test_idempotent_producer_has_no_transactions_and_reinitialises_on_a_broken_sequence() -> None:
    driver = Driver(None)
    core = driver.core
    core.init(0.0, 30.0)
    (init,) = driver.expect(INIT)
    assert init.destination is Destination.ANY_BROKER and init.request.transactional_id is None
    driver.respond(init)
    assert core.state is State.READY and core.partition_ready(TP0)
    with pytest.raises(IllegalStateError, match="transactional_id"):
        core.begin(0.0)
    assert core.send(TP0) == 0
    driver.produce_error(45)
    driver.produce_error(59)  # a second partition breaking while re-initialising
    assert core.state is State.INITIALIZING and not core.partition_ready(TP0)
    assert core.send(TP1) == 0  # records queue while the new producer id is fetched
    driver.run(INIT)
    assert core.state is State.READY and core.identity.epoch == 1


def test_completion_result_raises_until_done_then_the_error() -> None:
    waiter = Completion(Input.CALL_COMMIT, 1.0)
    with pytest.raises(IllegalStateError):
        waiter.result()
    driver = Driver().in_txn(TP0)
    done = driver.core.commit(0.0, 30.0)
    driver.run(END, 90)
    with pytest.raises(FencedError):
        done.result()
    assert driver.core.next_timer() is None


# -- random conversations ---------------------------------------------------------------------

_OK = [0] * 8  # answers succeed most of the time, so the conversation gets somewhere
_ANSWER_CODES = {
    FIND: [*_OK, 15, 14, 53],
    INIT: [*_OK, 51, 16, 90, -1],
    ADD_PARTS: [*_OK, 51, 16, 29, 59, 90],
    ADD_OFFS: [*_OK, 51, 14, 30],
    OFFSETS: [*_OK, 22, 16, 90],
    END: [*_OK, 51, 16, 59, 90, 47, 120],
}
_PRODUCE_CODES = [45, 45, 59, 10, 47, 120, 7, 90, 21]
_EXPECTED = (IllegalStateError, UnknownPartitionError, InvalidGroupIdError, AbortableError,
             FencedError, FatalError)


class RandomConversation(RuleBasedStateMachine):
    """Random calls, answers, lost requests, produce errors and clock ticks against one core."""

    def __init__(self) -> None:
        super().__init__()
        self.driver = Driver()
        self.core = self.driver.core
        self.in_flight: list[SendRequest] = []
        self.terminal: State | None = None
        self.generation = 0
        self.epochs: dict[int, int] = {}

    @initialize(ready=st.booleans())
    def start(self, ready: bool) -> None:
        if ready:
            self.driver.ready()

    def _try(self, call: Any) -> None:
        try:
            call()
        except EosError as error:
            assert isinstance(error, _EXPECTED), error

    @rule(incomplete=st.booleans())
    def poll(self, incomplete: bool) -> None:
        self.driver.batches = incomplete
        for send in self.driver.poll():
            assert not (incomplete and api_of(send) is END)  # EndTxn waits for every batch
            assert (send.node is None) == (send.destination is Destination.ANY_BROKER)
            self.in_flight.append(send)

    @rule()
    def init(self) -> None:
        self._try(lambda: self.core.init(self.driver.now, self.driver.now + 5))

    @rule(declare=st.booleans(), group=st.booleans())
    def begin(self, declare: bool, group: bool) -> None:
        self._try(lambda: self.core.begin(self.driver.now, partitions=[TP0] if declare else None,
                                          group_id="g" if group else None))

    @rule(tp=st.sampled_from([TP0, TP1]))
    def send(self, tp: TopicPartition) -> None:
        self._try(lambda: self.core.send(tp))

    @rule()
    def send_offsets(self) -> None:
        self._try(lambda: self.core.send_offsets({IN0: 1}, "g", self.driver.now, 1e9))

    @rule()
    def commit(self) -> None:
        self._try(lambda: self.core.commit(self.driver.now, self.driver.now + 5))

    @rule()
    def abort(self) -> None:
        self._try(lambda: self.core.abort(self.driver.now, self.driver.now + 5))

    def _take(self, data: st.DataObject) -> SendRequest:
        # by position: kafka-python requests compare equal by value, so twins are common
        return self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))

    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        if data.draw(st.integers(0, 9)) == 0:  # rarely: it ends the conversation
            self.core.close()

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def answer(self, data: st.DataObject) -> None:
        send = self._take(data)
        self.driver.respond(send, data.draw(st.sampled_from(_ANSWER_CODES[api_of(send)])))

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def lose(self, data: st.DataObject) -> None:
        send = self._take(data)
        self.core.on_request_failed(send.request, self.driver.now)

    @rule(data=st.data())
    def produce_error(self, data: st.DataObject) -> None:
        if data.draw(st.integers(0, 3)) == 0:
            self.driver.produce_error(data.draw(st.sampled_from(_PRODUCE_CODES)))

    @rule(seconds=st.sampled_from([0.01, 0.1, 1.0, 10.0]))
    def tick(self, seconds: float) -> None:
        self.driver.now += seconds

    @invariant()
    def terminal_states_stay(self) -> None:
        state = self.core.state
        if self.terminal is not None:
            assert state is self.terminal
        elif state in ABSORBING:
            self.terminal = state

    @invariant()
    def nothing_is_sent_after_a_fence(self) -> None:
        if self.core.state is State.FENCED:
            with pytest.raises(FencedError):
                self.core.send(TP0)
        if self.core.state not in (State.IN_TRANSACTION, State.COMMITTING):
            assert not self.core.partition_ready(TP0) and not self.core.partition_ready(TP1)
        if self.core.state not in (State.IN_TRANSACTION, State.COMMITTING, State.ABORTING,
                                   State.ABORTABLE_ERROR):
            assert not self.core.may_resend(TP0) and not self.core.may_resend(TP1)

    @invariant()
    def generations_and_epochs_only_grow(self) -> None:
        assert self.core.generation >= self.generation
        self.generation = self.core.generation
        producer_id, epoch = self.core.identity
        assert epoch >= self.epochs.get(producer_id, -1)
        self.epochs[producer_id] = epoch

    @invariant()
    def named_data_matches_the_state(self) -> None:
        state = self.core.state
        if state is State.READY:
            assert self.core.ending is None and self.core.recovery is None
            assert self.core.error is None
        if state in (State.ABORTABLE_ERROR, State.FENCED, State.FATAL):
            assert self.core.error is not None
        assert len(self.core.history) <= 64


TestRandomConversation = RandomConversation.TestCase
TestRandomConversation.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
