"""Random conversations with the transaction core (a hypothesis RuleBasedStateMachine): calls,
answers, lost requests, produce errors and clock ticks, with invariants checked after each."""

from __future__ import annotations

from typing import Any

import pytest
from _txn_driver import ADD_OFFS, ADD_PARTS, END, FIND, IN0, INIT, OFFSETS, TP0, TP1, Driver, api_of
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from eosclient._core._txn_table import ABSORBING
from eosclient._core.txn import Destination, SendRequest, State, TopicPartition
from eosclient.errors import (
    AbortableError,
    EosError,
    FatalError,
    FencedError,
    IllegalStateError,
    InvalidGroupIdError,
    UnknownPartitionError,
)

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
