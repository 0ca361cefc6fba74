"""How many rounds of requests a transaction takes: requests out, responses in.

A round is one poll's requests, all sent together; the next round needs an answer from it. The
floor without KIP-890 is three rounds (register, produce, end): a Produce never leaves before its
partition's AddPartitionsToTxn succeeded, and EndTxn never before every batch is answered.
"""

from __future__ import annotations

from _txn_driver import ADD_OFFS, ADD_PARTS, END, FIND, IN0, OFFSETS, TP0, TP1, Driver, api_of

from eosclient._core.txn import Destination, State


def test_a_pre_registered_transaction_with_offsets_takes_three_rounds() -> None:
    driver = Driver().ready()
    core = driver.core
    driver.now = 1.0
    core.begin(1.0, partitions=[TP0], group_id="copier")
    generation = core.send(TP0)
    offsets = core.send_offsets({IN0: 7}, "copier", 1.0, 31.0)
    # Round 1: both registrations and the group coordinator's lookup, at once.
    add_parts, add_offs, find = driver.expect(ADD_PARTS, ADD_OFFS, FIND)
    assert {add_parts.not_before, add_offs.not_before, find.not_before} == {1.0}
    assert find.destination is Destination.ANY_BROKER and find.request.key == "copier"
    assert not core.may_drain(TP0, generation)  # no Produce before its registration
    for send in (add_parts, add_offs, find):
        driver.respond(send)
    # Round 2: the Produce may go, and TxnOffsetCommit goes in the same poll.
    assert core.may_drain(TP0, generation)
    (commit_offsets,) = driver.expect(OFFSETS)
    assert commit_offsets.destination is Destination.GROUP_COORDINATOR
    driver.batches = True  # the Produce is on its way
    done = core.commit(1.0, 31.0)
    driver.respond(commit_offsets)
    assert offsets.done and driver.poll() == []  # EndTxn waits for the batch
    driver.batches = False
    # Round 3: EndTxn.
    driver.run(END)
    assert done.done and done.error is None and core.state is State.READY


def test_the_next_transaction_needs_no_lookup() -> None:
    driver = Driver().ready()
    core = driver.core
    core.begin(0.0, partitions=[TP0], group_id="copier")
    for send in driver.expect(ADD_PARTS, ADD_OFFS, FIND):
        driver.respond(send)
    core.commit(0.0, 30.0)
    driver.run(END)
    core.begin(0.0, partitions=[TP1], group_id="copier")
    driver.expect(ADD_PARTS, ADD_OFFS)  # the coordinator is known: two requests, one round


def test_send_offsets_looks_the_group_coordinator_up_beside_add_offsets() -> None:
    # The lookup used to go out only once AddOffsetsToTxn was answered: one round more.
    driver = Driver().in_txn(TP0)
    core = driver.core
    done = core.send_offsets({IN0: 1}, "copier", 0.0, 30.0)
    add_offs, find = driver.expect(ADD_OFFS, FIND)
    driver.respond(add_offs)
    assert driver.poll() == []  # registered, but the coordinator is not known yet
    driver.respond(find)
    (commit_offsets,) = driver.expect(OFFSETS)  # as soon as both are answered
    driver.respond(commit_offsets)
    assert done.done and done.error is None


def test_a_lookup_answered_first_still_waits_for_add_offsets() -> None:
    # TxnOffsetCommit before its group joined the transaction would be refused (or worse,
    # applied outside it): the early lookup must not open that gate.
    driver = Driver().in_txn(TP0)
    driver.core.send_offsets({IN0: 1}, "copier", 0.0, 30.0)
    add_offs, find = driver.expect(ADD_OFFS, FIND)
    driver.respond(find)
    assert driver.poll() == []
    driver.respond(add_offs)
    driver.expect(OFFSETS)


def test_a_failed_registration_keeps_the_partition_closed_to_produce() -> None:
    # Exactly once: a retriable AddPartitionsToTxn error registers nothing, so the Produce waits
    # for the retry's success, however the other requests of the round fared. (The retry used
    # to wait the full 100 ms once the pre-registered group was in: 20 rounds at 5 ms RTT.)
    driver = Driver().ready()
    core = driver.core
    core.begin(0.0, partitions=[TP0], group_id="copier")
    generation = core.send(TP0)
    add_parts, add_offs, find = driver.expect(ADD_PARTS, ADD_OFFS, FIND)
    driver.respond(add_offs)
    driver.respond(find)
    driver.respond(add_parts, 51)  # CONCURRENT_TRANSACTIONS: the previous end is completing
    assert not core.may_drain(TP0, generation)
    driver.now = 0.020
    (again,) = driver.poll()
    assert api_of(again) is ADD_PARTS and again.not_before == 0.0 + 0.020  # the quick retry
    assert not core.may_drain(TP0, generation)
    driver.respond(again)
    assert core.may_drain(TP0, generation)


def test_an_abort_before_any_request_went_out_sends_nothing() -> None:
    # The early lookup is dropped with the registrations it served.
    driver = Driver().ready()
    core = driver.core
    core.begin(0.0, partitions=[TP0], group_id="copier")
    done = core.abort(0.0, 30.0)
    assert driver.poll() == []
    assert done.done and done.error is None and core.state is State.READY


def test_concurrent_transactions_on_a_pre_registered_group_retries_quickly() -> None:
    driver = Driver().ready()
    core = driver.core
    core.begin(0.0, partitions=[TP0], group_id="copier")
    add_parts, add_offs, find = driver.expect(ADD_PARTS, ADD_OFFS, FIND)
    driver.respond(find)
    driver.respond(add_offs, 51)
    (again,) = driver.poll()
    assert api_of(again) is ADD_OFFS and again.not_before == 0.020
    driver.respond(add_parts)
    driver.respond(again, 51)  # a partition is in now: the previous end has completed
    (later,) = driver.poll()
    assert api_of(later) is ADD_OFFS and later.not_before == 0.2  # 100 ms, second attempt
