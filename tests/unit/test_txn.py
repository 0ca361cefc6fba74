"""The transaction state machine (eosclient._core.txn), sans-IO: calls and responses in, requests
out, time passed in. No broker; state is reached only through public inputs.

The conversations that go right: init, partition registration, send_offsets, commit, and the
idempotent-only producer. The table is in test_txn_table.py, failures in test_txn_failures.py,
random conversations in test_txn_random.py."""

from __future__ import annotations

import pytest
from _txn_driver import (
    ADD_OFFS,
    ADD_PARTS,
    END,
    FIND,
    IN0,
    INIT,
    OFFSETS,
    TP0,
    TP1,
    TP2,
    TXN,
    Driver,
)

from eosclient._core.txn import (
    Completion,
    Destination,
    GroupMetadata,
    Input,
    Node,
    ProducerIdentity,
    Recovery,
    SequencesReset,
    State,
    Wait,
)
from eosclient._protocol.apis import APIS
from eosclient.errors import (
    AbortableError,
    EosError,
    EpochBumpRequiredError,
    FatalError,
    FencedError,
    IllegalStateError,
    InvalidGroupIdError,
    KafkaTimeoutError,
    UnknownPartitionError,
)

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
    # one poll, pipelined; the group's coordinator is looked up meanwhile
    add_parts, add_offs, find = driver.expect(ADD_PARTS, ADD_OFFS, FIND)
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
    driver.respond(find)
    assert driver.poll() == [] and core.state is State.IN_TRANSACTION


def test_undeclared_partition_and_group_fail_locally_and_change_nothing() -> None:
    driver = Driver().ready()
    core = driver.core
    core.begin(0.0, partitions=[TP0], group_id="copier")
    driver.expect(ADD_PARTS, ADD_OFFS, FIND)
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
    # TxnOffsetCommit waits for AddOffsetsToTxn; its coordinator is looked up meanwhile
    add, find = driver.expect(ADD_OFFS, FIND)
    assert (find.request.key, find.request.key_type) == ("copier", 0)
    driver.respond(find)
    assert driver.poll() == []  # found, but the group is not in the transaction yet
    driver.respond(add)
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
    for send in driver.expect(ADD_OFFS, FIND):
        driver.respond(send)
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

