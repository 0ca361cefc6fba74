"""Which declared partitions ``begin`` registers at once (KIP-609 style), sans-IO.

noida-db 0.2.3 answers EndTxn(commit) with INVALID_TXN_STATE after committing part of the
transaction when a registered partition got no record and the producer id ever aborted records
there (``txn.py``, Decisions: pre-registration). So a declared partition is registered at
``begin`` only while the client knows every transaction its producer id had (a new producer id,
epoch 0) and none of its aborts left records there; every other one with its first record.
"""

from __future__ import annotations

from _txn_driver import ADD_PARTS, END, FIND, INIT, TP0, TP1, TP2, Driver, api_of

from eosclient._core.txn import ProducerIdentity, SendRequest, State, TopicPartition
from eosclient.errors import FatalError


def registered(send: SendRequest) -> list[TopicPartition]:
    """The partitions an AddPartitionsToTxn request asks for."""
    assert api_of(send) is ADD_PARTS
    return [TopicPartition(t.name, p) for t in send.request.v3_and_below_topics
            for p in t.partitions]


def taken_over() -> Driver:
    """A producer whose InitProducerId fenced an earlier instance (epoch 3, not 0)."""
    driver = Driver()
    driver.broker.epoch = 2
    return driver.ready()


def test_a_new_producer_id_registers_every_declared_partition_at_begin() -> None:
    driver = Driver().ready()
    assert driver.core.identity == ProducerIdentity(4000, 0)
    driver.core.begin(0.0, partitions=[TP0, TP1, TP2])
    (add,) = driver.expect(ADD_PARTS)  # at once, before any record: the round trip overlaps
    assert registered(add) == [TP0, TP1, TP2]


def test_after_a_takeover_a_declared_partition_waits_for_its_first_record() -> None:
    # The report: the new instance pre-registered p0, the takeover had aborted the old
    # instance's records there, p0 got no record, and noida-db's EndTxn(commit) answered 48
    # after committing p1 (a FatalError; the application redid the work: duplicates).
    driver = taken_over()
    core = driver.core
    core.begin(0.0, partitions=[TP0, TP1])
    assert driver.poll() == []  # nothing registered yet
    core.send(TP1)
    (add,) = driver.expect(ADD_PARTS)
    assert registered(add) == [TP1]
    driver.respond(add)
    done = core.commit(0.0, 30.0)
    (end,) = driver.expect(END)  # TP0, declared and empty, was never in the transaction
    assert end.request.committed is True
    driver.respond(end)
    assert done.done and done.error is None and core.state is State.READY


def test_after_a_takeover_a_declared_transaction_without_records_needs_no_end_txn() -> None:
    driver = taken_over()
    driver.core.begin(0.0, partitions=[TP0, TP1])
    done = driver.core.commit(0.0, 30.0)
    assert driver.poll() == [] and done.done and done.error is None
    assert driver.core.state is State.READY and driver.core.counts.committed == 1


def test_a_declared_partition_registered_on_send_joins_one_request_at_a_time() -> None:
    # The lazy rule (Java's): partitions asked for while a registration is in flight go next.
    driver = Driver().ready()
    core = driver.core
    core.begin(0.0, partitions=[TP0])
    driver.run(ADD_PARTS)
    core.send(TP0)
    core.send(TP0)
    core.abort(0.0, 30.0)
    driver.run(END)
    core.begin(0.0, partitions=[TP0, TP1, TP2])
    (early,) = driver.expect(ADD_PARTS)
    core.send(TP0)  # aborted records of this producer id are there: registered now, next
    core.send(TP2)  # registered at begin, on its way: nothing to ask
    assert registered(early) == [TP1, TP2] and driver.poll() == []
    driver.respond(early)
    (late,) = driver.expect(ADD_PARTS)
    assert registered(late) == [TP0]


def test_an_abort_keeps_only_the_partitions_it_wrote_out_of_pre_registration() -> None:
    # noida-db: a partition registered and left empty in an aborted transaction holds no
    # aborted record, and commits empty later; one that was written does not.
    driver = Driver().ready()
    core = driver.core
    core.begin(0.0, partitions=[TP0, TP1, TP2])
    driver.run(ADD_PARTS)
    core.send(TP1)
    core.abort(0.0, 30.0)
    driver.run(END)
    core.begin(0.0, partitions=[TP0, TP1, TP2])
    (add,) = driver.expect(ADD_PARTS)
    assert registered(add) == [TP0, TP2]


def test_a_commit_keeps_its_partitions_pre_registrable() -> None:
    driver = Driver().ready()
    core = driver.core
    for _ in range(2):
        core.begin(0.0, partitions=[TP0, TP1])
        (add,) = driver.expect(ADD_PARTS)
        assert registered(add) == [TP0, TP1]
        driver.respond(add)
        core.send(TP0)
        core.commit(0.0, 30.0)
        driver.run(END)


def test_lazily_registered_partitions_of_an_abort_are_remembered_too() -> None:
    driver = Driver().ready()
    core = driver.core
    core.begin(0.0)
    core.send(TP2)
    driver.run(ADD_PARTS)
    core.abort(0.0, 30.0)
    driver.run(END)
    core.begin(0.0, partitions=[TP1, TP2])
    (add,) = driver.expect(ADD_PARTS)
    assert registered(add) == [TP1]


def test_an_epoch_bump_of_the_same_producer_id_keeps_what_the_client_knew() -> None:
    # KIP-360: the bump follows this client's own abort, so the producer id's past is still
    # known, epoch 1 or not; the abort's written partition is remembered.
    driver = Driver().in_txn(TP0)
    core = driver.core
    core.send(TP0)
    driver.produce_error(45)
    core.abort(0.0, 30.0)
    driver.run(END)
    driver.run(INIT)
    assert core.state is State.READY and core.identity == ProducerIdentity(4000, 1)
    core.begin(0.0, partitions=[TP0, TP1])
    (add,) = driver.expect(ADD_PARTS)
    assert registered(add) == [TP1]


def test_a_new_producer_id_at_epoch_zero_forgets_the_old_ones_aborts() -> None:
    # A bump may answer a new producer id at epoch 0 (Kafka, once the epoch ran out): nothing
    # of it was ever aborted.
    driver = Driver().in_txn(TP0)
    core = driver.core
    core.send(TP0)
    driver.produce_error(45)
    core.abort(0.0, 30.0)
    driver.run(END)
    driver.broker.producer_id, driver.broker.epoch = 4001, -1
    driver.run(INIT)
    assert core.identity == ProducerIdentity(4001, 0)
    core.begin(0.0, partitions=[TP0, TP1])
    (add,) = driver.expect(ADD_PARTS)
    assert registered(add) == [TP0, TP1]


def test_a_re_initialised_transaction_of_unknown_outcome_counts_as_aborted() -> None:
    # init_transactions() in COMMITTING gives the outcome up: the coordinator may abort it.
    driver = Driver().ready()
    core = driver.core
    core.begin(0.0, partitions=[TP0, TP1])
    driver.run(ADD_PARTS)
    core.send(TP0)
    core.commit(0.0, 30.0)
    core.on_request_failed(driver.expect(END)[0].request, 0.0)
    core.init(0.0, 30.0)
    driver.run(FIND)
    driver.run(INIT)
    assert core.state is State.READY and core.identity == ProducerIdentity(4000, 1)
    core.begin(0.0, partitions=[TP0, TP1])
    (add,) = driver.expect(ADD_PARTS)
    assert registered(add) == [TP1]


def test_the_clients_own_abort_on_timeout_is_remembered() -> None:
    driver = Driver(transaction_timeout_ms=10_000).ready()
    core = driver.core
    core.begin(0.0, partitions=[TP0, TP1])
    driver.run(ADD_PARTS)
    core.send(TP1)
    driver.now = 10.0
    driver.run(END)  # the I/O thread's EndTxn(abort)
    core.abort(driver.now, driver.now + 30)
    assert driver.poll() == [] and core.state is State.READY
    core.begin(driver.now, partitions=[TP0, TP1])
    (add,) = driver.expect(ADD_PARTS)
    assert registered(add) == [TP0]


def test_invalid_txn_state_on_a_commit_with_empty_partitions_says_it_may_be_half_done() -> None:
    # Should a broker still refuse an empty registered partition (one this client thought
    # safe), the FatalError used to read as if nothing was committed; noida-db commits part.
    driver = Driver().ready()
    core = driver.core
    core.begin(0.0, partitions=[TP0, TP1])
    driver.run(ADD_PARTS)
    core.send(TP0)
    done = core.commit(0.0, 30.0)
    driver.run(END, 48)
    assert core.state is State.FATAL and isinstance(done.error, FatalError)
    (note,) = done.error.__notes__
    assert "out[1]" in note and "out[0]" not in note and "partly committed" in note
