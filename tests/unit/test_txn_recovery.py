"""Recovery rules of the transaction core, sans-IO: lost answers, bumps, fences, wedged aborts.

Each test reproduces one finding of the producer review (the scripts in its notes: r1, r2c, r2d,
r3, r3c, r3d, r4) as a conversation with a fake coordinator; the broker-level twins are in
``tests/faults/test_txn_recovery_faults.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from eosclient._core._txn_wire import CLOSES_MEAN_FENCED
from eosclient._core.txn import (
    EndOutcome,
    Node,
    ProducerIdentity,
    SendRequest,
    State,
    TopicPartition,
    TransactionCore,
)
from eosclient._protocol.apis import APIS
from eosclient.errors import (
    AbortableError,
    ApiKey,
    EosError,
    FatalError,
    FencedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    error_for,
)

TXN = "recovery-1"
TP0, TP1 = TopicPartition("out", 0), TopicPartition("out", 1)
IN0 = TopicPartition("in", 0)
FIND, INIT = ApiKey.FIND_COORDINATOR, ApiKey.INIT_PRODUCER_ID
ADD_PARTS, ADD_OFFS = ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN
OFFSETS, END = ApiKey.TXN_OFFSET_COMMIT, ApiKey.END_TXN
UNKNOWN_TOPIC_OR_PARTITION = 3
PID = 4000


def api_of(send: SendRequest) -> ApiKey:
    return ApiKey(send.request.API_KEY)


def closed_by_broker() -> KafkaConnectionError:
    """What the I/O layer reports when the broker closed the connection (EOF)."""
    error = KafkaConnectionError("node 1 (broker-1:9092): the broker closed the connection")
    error.__cause__ = EOFError("the socket reached end of file")
    return error


class Coordinator:
    """Answers like a transaction coordinator: one producer id, epoch + 1 per InitProducerId.

    ``epoch`` is the coordinator's current epoch; a test moves it to play another instance.
    """

    def __init__(self) -> None:
        self.node = Node(1, "broker-1", 9092)
        self.producer_id, self.epoch = PID, -1

    def response(self, send: SendRequest, code: int = 0) -> Any:
        request, api = send.request, api_of(send)
        cls = APIS[api].response
        if api is FIND:
            return cls(error_code=code, node_id=self.node.node_id, host=self.node.host,
                       port=self.node.port)
        if api is INIT:
            if code == 0:
                self.epoch += 1
            return cls(error_code=code, producer_id=self.producer_id, producer_epoch=self.epoch)
        if api is ADD_PARTS:
            result = cls.AddPartitionsToTxnTopicResult
            return cls(results_by_topic_v3_and_below=[result(name=t.name, results_by_partition=[
                result.AddPartitionsToTxnPartitionResult(partition_index=p,
                                                         partition_error_code=code)
                for p in t.partitions]) for t in request.v3_and_below_topics])
        if api is OFFSETS:
            topic = cls.TxnOffsetCommitResponseTopic
            return cls(topics=[topic(name=t.name, partitions=[
                topic.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                                       error_code=code)
                for p in t.partitions]) for t in request.topics])
        return cls(error_code=code)


class Driver:
    """One TransactionCore talking to one Coordinator; time is ``now``."""

    def __init__(self) -> None:
        self.core = TransactionCore(transactional_id=TXN)
        self.coordinator = Coordinator()
        self.now = 0.0
        self.batches = False

    def poll(self) -> list[SendRequest]:
        outputs = self.core.poll(self.now, incomplete_batches=self.batches)
        return [out for out in outputs if isinstance(out, SendRequest)]

    def expect(self, *apis: ApiKey) -> list[SendRequest]:
        sends = self.poll()
        assert [api_of(s) for s in sends] == list(apis)
        return sends

    def respond(self, send: SendRequest, code: int = 0) -> None:
        self.core.on_response(send.request, self.coordinator.response(send, code), self.now)

    def run(self, api: ApiKey, code: int = 0) -> SendRequest:
        (send,) = self.expect(api)
        self.respond(send, code)
        return send

    def lose(self, send: SendRequest, error: EosError | None = None) -> None:
        self.core.on_request_failed(send.request, self.now, error)

    def in_txn(self, *tps: TopicPartition) -> Driver:
        if self.core.state is State.UNINITIALIZED:
            self.core.init(self.now, self.now + 30)
            self.run(FIND)
            self.run(INIT)
        self.core.begin(self.now)
        if tps:
            self.core.add_partitions(tps)
            self.run(ADD_PARTS)
        return self

    def produce_error(self, code: int) -> None:
        error = error_for(ApiKey.PRODUCE, code)
        self.core.on_produce_error(error, self.core.identity, self.core.generation, self.now)


def assert_bump_form(send: SendRequest, epoch: int) -> None:
    request = send.request
    assert (request.transactional_id, request.producer_id, request.producer_epoch) == (
        TXN, PID, epoch)


# -- finding 1: a lost answer may land on the next transaction -----------------------------------


@pytest.mark.parametrize("committed", [True, False], ids=["commit", "abort"])
def test_lost_end_txn_bumps_the_epoch_before_the_next_transaction(committed: bool) -> None:
    # r3/r3d: READY kept the epoch, so the lost EndTxn, landing late, ended the next transaction
    driver = Driver().in_txn(TP0)
    core = driver.core
    done = (core.commit if committed else core.abort)(0.0, 30.0)
    (end,) = driver.expect(END)
    driver.lose(end, KafkaTimeoutError("no answer to EndTxnRequest within 1.5 s"))
    driver.run(FIND)
    again = driver.run(END)
    assert again.request.committed is committed and not done.done
    assert core.state is (State.COMMITTING if committed else State.ABORTING)
    with pytest.raises(IllegalStateError):
        core.begin(0.0)  # not before the bump
    assert_bump_form(driver.run(INIT), epoch=0)
    assert done.done and done.error is None and core.state is State.READY
    assert core.identity == ProducerIdentity(PID, 1)  # a late EndTxn now has a stale epoch
    core.begin(1.0)
    core.add_partitions([TP0])
    (add,) = driver.expect(ADD_PARTS)
    assert add.request.v3_and_below_producer_epoch == 1


@pytest.mark.parametrize("lost", [OFFSETS, ADD_OFFS, ADD_PARTS, None])
def test_lost_registration_or_offsets_bump_the_epoch_after_the_commit(lost: ApiKey | None) -> None:
    # r3c: a lost TxnOffsetCommit landed late in the next transaction and rewound its offsets
    driver = Driver().in_txn()
    core = driver.core
    core.send_offsets({IN0: 10}, "group", 0.0, 30.0)
    core.add_partitions([TP0])
    done = core.commit(0.0, 30.0)
    sent: list[SendRequest] = []
    while sends := driver.poll():
        for send in sends:
            if api_of(send) is lost and lost not in map(api_of, sent):
                driver.lose(send)  # the first attempt: its answer never comes
            else:
                driver.respond(send)
            sent.append(send)
    inits = [send for send in sent if api_of(send) is INIT]
    assert done.done and done.error is None and core.state is State.READY
    if lost is None:
        assert inits == [] and core.identity.epoch == 0
    else:
        assert [api_of(s) for s in sent].count(lost) == 2  # lost, then answered
        (bump,) = inits
        assert_bump_form(bump, epoch=0)
        assert core.identity.epoch == 1


def test_every_answer_received_keeps_the_epoch() -> None:
    driver = Driver().in_txn(TP0)
    done = driver.core.commit(0.0, 30.0)
    driver.run(END)
    assert done.done and driver.core.state is State.READY and driver.core.identity.epoch == 0
    assert driver.poll() == []


def test_bump_after_a_commit_falls_back_to_the_plain_form_where_rejected() -> None:
    # Tansu answers the KIP-360 form with UNKNOWN_SERVER_ERROR (-1)
    driver = Driver().in_txn(TP0)
    done = driver.core.commit(0.0, 30.0)
    (end,) = driver.expect(END)
    driver.lose(end)
    driver.run(FIND)
    driver.run(END)
    driver.run(INIT, -1)
    (plain,) = driver.expect(INIT)
    assert (plain.request.producer_id, plain.request.producer_epoch) == (-1, -1)
    driver.respond(plain)
    assert done.done and done.error is None and driver.core.identity.epoch == 1


# -- finding 2: a bump must give the successor identity ------------------------------------------


def kip360_abort_until_the_bump(driver: Driver) -> tuple[Any, SendRequest]:
    """IN_TRANSACTION -> OUT_OF_ORDER_SEQUENCE_NUMBER -> abort -> EndTxn -> the bump in flight."""
    driver.in_txn(TP0).produce_error(45)
    done = driver.core.abort(0.0, 30.0)
    driver.run(END)
    (bump,) = driver.expect(INIT)
    return done, bump


@pytest.mark.parametrize("rejected", [False, True], ids=["bump-form", "plain-fallback"])
def test_a_bump_that_skips_an_epoch_is_a_fence(rejected: bool) -> None:
    # r1: a bump answered with epoch + 2 (another instance had re-initialised) was taken: zombie
    driver = Driver()
    done, bump = kip360_abort_until_the_bump(driver)
    if rejected:
        driver.respond(bump, -1)
        (bump,) = driver.expect(INIT)
    driver.coordinator.epoch += 1  # the other instance's init_transactions()
    driver.respond(bump)
    core = driver.core
    assert core.state is State.FENCED and isinstance(done.error, FencedError)
    assert "epoch 0 returned producer id 4000, epoch 2" in str(done.error)
    assert core.identity == ProducerIdentity(PID, 0)  # the other instance's epoch is not taken
    with pytest.raises(FencedError):
        core.begin(1.0)
    assert driver.poll() == []


@pytest.mark.parametrize(("lost", "others", "fenced"), [
    (1, 0, False),  # the lost attempt bumped, the retry bumped again: epoch 2 is this one's
    (2, 0, False),  # two lost, each bumped: epoch 3
    (1, 1, True),  # one lost, and another instance's init_transactions() too: epoch 3
])
def test_a_retried_bump_may_skip_the_epochs_its_lost_attempts_took(
        lost: int, others: int, fenced: bool) -> None:
    # noida-db bumps again on a retried KIP-360 bump (Kafka answers the epoch it gave): a
    # cluster nemesis run lost a bump's answer to a node going down, and the retry's epoch + 2
    # fenced a producer that no other instance had touched
    driver = Driver()
    done, bump = kip360_abort_until_the_bump(driver)
    for _ in range(lost):
        driver.coordinator.epoch += 1  # it landed; its answer did not come back
        driver.lose(bump)
        driver.run(FIND)
        (bump,) = driver.expect(INIT)
        assert_bump_form(bump, epoch=0)  # the retry still bumps from what this one holds
    driver.coordinator.epoch += others
    driver.respond(bump)
    core = driver.core
    if fenced:
        assert core.state is State.FENCED and isinstance(done.error, FencedError)
        assert core.identity == ProducerIdentity(PID, 0)
    else:
        assert done.done and done.error is None and core.state is State.READY
        assert core.identity == ProducerIdentity(PID, lost + 1)


def test_a_new_producer_id_at_epoch_zero_is_a_successor() -> None:
    # Kafka rotates the producer id when the epoch runs out (KIP-360)
    driver = Driver()
    done, bump = kip360_abort_until_the_bump(driver)
    driver.coordinator.producer_id, driver.coordinator.epoch = PID + 1, -1
    driver.respond(bump)
    assert done.done and done.error is None
    assert driver.core.identity == ProducerIdentity(PID + 1, 0)


def test_a_first_init_takes_whatever_identity_comes() -> None:
    driver = Driver()
    driver.coordinator.epoch = 41  # an earlier instance's epoch: this init fences it
    driver.in_txn()
    assert driver.core.identity == ProducerIdentity(PID, 42)


def test_the_plain_form_is_chosen_per_broker_not_for_life() -> None:
    # one UNKNOWN_SERVER_ERROR made every later bump go plain, to any broker, for ever
    driver = Driver()
    _, bump = kip360_abort_until_the_bump(driver)
    driver.respond(bump, -1)
    driver.run(INIT)  # plain, to broker-1
    driver.in_txn(TP0).produce_error(45)
    driver.core.abort(0.0, 30.0)
    driver.run(END)
    (again,) = driver.expect(INIT)
    assert again.request.producer_id == -1  # broker-1 is known to reject the KIP-360 form
    driver.lose(again)
    driver.coordinator.node = Node(2, "broker-2", 9092)  # the coordinator moved
    driver.run(FIND)
    (moved,) = driver.expect(INIT)
    assert_bump_form(moved, epoch=1)
    assert moved.node == Node(2, "broker-2", 9092)


def test_below_init_producer_id_v3_the_answer_is_checked_as_a_plain_init() -> None:
    # kafka-python drops the KIP-360 fields below v3: the broker bumped whoever asked
    driver = Driver()
    done, bump = kip360_abort_until_the_bump(driver)
    bump.request.API_VERSION = 2  # as the I/O layer negotiated it with an old broker
    driver.coordinator.epoch += 1
    driver.respond(bump)
    assert isinstance(done.error, FencedError) and "plain form" in str(done.error)


def test_below_v3_an_unknown_server_error_is_not_a_rejected_bump_form() -> None:
    driver = Driver()
    done, bump = kip360_abort_until_the_bump(driver)
    bump.request.API_VERSION = 2
    driver.respond(bump, -1)
    assert driver.core.state is State.FATAL and isinstance(done.error, FatalError)


# -- finding 4: re-initialising, and a broker that closes the connection on EndTxn ---------------


def test_reinit_after_an_unknown_commit_uses_the_bump_form_and_checks_it() -> None:
    # r4: re-init after an unknown EndTxn used the plain form and took the id back from its owner
    driver = Driver().in_txn(TP0)
    core = driver.core
    core.commit(0.0, 30.0)
    driver.lose(driver.expect(END)[0], closed_by_broker())
    init = core.init(0.0, 30.0)
    driver.run(FIND)  # the connection dropped: the coordinator is looked up again
    (reinit,) = driver.expect(INIT)
    assert_bump_form(reinit, epoch=0)
    driver.coordinator.epoch += 1  # the instance that fenced this one
    driver.respond(reinit)
    assert core.state is State.FENCED and isinstance(init.error, FencedError)


def test_reinit_of_the_owner_succeeds() -> None:
    driver = Driver().in_txn(TP0)
    driver.core.abort(0.0, 30.0)
    driver.lose(driver.expect(END)[0])
    init = driver.core.init(0.0, 30.0)
    driver.run(FIND)
    driver.run(INIT)
    assert init.done and init.error is None and driver.core.identity.epoch == 1


def test_end_txn_answered_by_closed_connections_in_a_row_is_a_fence() -> None:
    # r4 on Tansu: EndTxn answered by closed connections was retried for ever by a fenced zombie
    driver = Driver().in_txn(TP0)
    core = driver.core
    done = core.commit(0.0, 30.0)
    for attempt in range(CLOSES_MEAN_FENCED):
        if attempt:
            driver.now += 1.0
            driver.run(FIND)
        assert core.state is State.COMMITTING
        driver.lose(driver.expect(END)[0], closed_by_broker())
    assert core.state is State.FENCED and isinstance(done.error, FencedError)
    assert "closed the connection" in str(done.error)
    assert "as Tansu does for an EndTxn with a stale producer epoch" in str(done.error.__cause__)
    assert driver.poll() == []


@pytest.mark.parametrize("between", ["timeout", "answer"])
def test_only_closes_in_a_row_count(between: str) -> None:
    driver = Driver().in_txn(TP0)
    core = driver.core
    done = core.commit(0.0, 30.0)
    losses: list[EosError | None] = [closed_by_broker()] * (CLOSES_MEAN_FENCED - 1)
    for error in [*losses, None, *losses]:
        driver.now += 1.0
        (end,) = driver.expect(END)
        if error is not None:
            driver.lose(end, error)
            driver.run(FIND)
        elif between == "timeout":
            driver.lose(end, KafkaTimeoutError("no answer within 1.5 s"))
            driver.run(FIND)
        else:
            driver.respond(end, 51)  # CONCURRENT_TRANSACTIONS: answered, retried
    assert core.state is State.COMMITTING and not done.done
    driver.now += 1.0
    driver.run(END)
    driver.run(INIT)  # answers were lost: bump
    assert done.done and done.error is None


# -- finding 5: aborts that waited for ever on a registration ------------------------------------


def test_abort_drops_a_registration_answered_with_a_retriable_error() -> None:
    # r2c: a registration answered with a retriable code was retried for ever; the abort hung
    driver = Driver().in_txn()
    core = driver.core
    core.add_partitions([TopicPartition("out", 7)])
    (add,) = driver.expect(ADD_PARTS)
    done = core.abort(0.0, 30.0)
    driver.respond(add, UNKNOWN_TOPIC_OR_PARTITION)
    assert driver.poll() == []  # neither a retry nor an EndTxn: nothing was registered
    assert done.done and done.error is None and core.state is State.READY


def test_a_registration_failing_while_abortable_is_dropped_and_partial_success_kept() -> None:
    driver = Driver().in_txn()
    core = driver.core
    core.add_partitions([TP0, TP1])
    (add,) = driver.expect(ADD_PARTS)
    driver.produce_error(45)  # the transaction fails while the registration is in flight
    answer = driver.coordinator.response(add)
    [topic] = answer.results_by_topic_v3_and_below
    topic.results_by_partition[1].partition_error_code = UNKNOWN_TOPIC_OR_PARTITION
    core.on_response(add.request, answer, 0.0)
    assert core.state is State.ABORTABLE_ERROR and driver.poll() == []  # not retried
    done = core.abort(0.0, 30.0)
    end = driver.run(END)  # TP0 was added: the abort must end it
    assert end.request.committed is False
    driver.run(INIT)  # KIP-360 bump
    assert done.done and core.state is State.READY


def test_a_commit_waiting_on_registrations_can_be_turned_into_an_abort() -> None:
    # r2d: a commit waiting for ever on a failing registration could not be turned into an abort
    driver = Driver().in_txn()
    core = driver.core
    core.add_partitions([TopicPartition("out", 7)])
    commit = core.commit(0.0, 1.0)
    driver.run(ADD_PARTS, UNKNOWN_TOPIC_OR_PARTITION)
    driver.now = 2.0
    (add,) = driver.expect(ADD_PARTS)  # retried: the commit still needs it
    assert isinstance(commit.error, KafkaTimeoutError) and core.ending is not None
    assert core.ending.outcome is EndOutcome.UNSENT
    abort = core.abort(2.0, 30.0)
    assert core.state is State.ABORTING and isinstance(commit.error, KafkaTimeoutError)
    driver.respond(add, UNKNOWN_TOPIC_OR_PARTITION)
    assert driver.poll() == []
    assert abort.done and abort.error is None and core.state is State.READY


def test_the_waiting_commit_fails_when_it_is_turned_into_an_abort() -> None:
    driver = Driver().in_txn(TP0)
    core = driver.core
    driver.batches = True  # a batch still in flight: no EndTxn yet
    commit = core.commit(0.0, 30.0)
    assert driver.poll() == []
    abort = core.abort(0.0, 30.0)
    assert isinstance(commit.error, AbortableError) and not abort.done
    driver.batches = False
    assert driver.run(END).request.committed is False
    assert abort.done and core.state is State.READY


@pytest.mark.parametrize("stage", ["sent", "lost", "bumping"])
def test_a_commit_whose_end_txn_was_sent_cannot_become_an_abort(stage: str) -> None:
    driver = Driver().in_txn(TP0)
    core = driver.core
    core.commit(0.0, 30.0)
    (end,) = driver.expect(END)
    if stage != "sent":
        driver.lose(end)
    if stage == "bumping":
        driver.run(FIND)
        driver.run(END)
        assert core.state is State.COMMITTING and core.ending is None  # committed; bumping
    with pytest.raises(IllegalStateError, match="only be retried as a commit"):
        core.abort(0.0, 30.0)
    assert core.state is State.COMMITTING


def test_a_batch_failure_reported_while_bumping_after_the_commit_is_ignored() -> None:
    # the commit is confirmed; a late report for its generation must not make it abortable
    driver = Driver().in_txn(TP0)
    core = driver.core
    done = core.commit(0.0, 30.0)
    driver.lose(driver.expect(END)[0])
    driver.run(FIND)
    driver.run(END)
    assert core.state is State.COMMITTING and not core.may_resend(TP0)
    driver.produce_error(45)
    core.on_batch_expired(core.identity, core.generation, 0.0)
    assert core.state is State.COMMITTING
    driver.run(INIT)
    assert done.done and done.error is None and core.state is State.READY


def test_counts_follow_commits_aborts_retries_and_bumps() -> None:
    # stats(): what the core counts, driven through a lost EndTxn and its KIP-360 bump
    driver = Driver().in_txn(TP0)
    core = driver.core
    assert (core.counts.committed, core.counts.epoch_bumps) == (0, 0)  # the first init: no bump
    retries = core.retries
    core.commit(0.0, 30.0)
    (end,) = driver.expect(END)
    driver.lose(end, KafkaTimeoutError("no answer to EndTxnRequest within 1.5 s"))
    driver.run(FIND)
    driver.run(END)
    driver.run(INIT)
    assert core.retries > retries
    assert (core.counts.committed, core.counts.aborted, core.counts.epoch_bumps) == (1, 0, 1)
    core.begin(1.0)
    core.add_partitions([TP0])
    driver.run(ADD_PARTS)
    core.abort(1.0, 30.0)
    driver.run(END)
    assert (core.counts.committed, core.counts.aborted, core.counts.epoch_bumps) == (1, 1, 1)
