"""The producer session (eosclient._producer.session): one producer, both fronts thin over it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from eosclient import TransactionalProducer
from eosclient._net.steps import Block, adrive
from eosclient._producer.session import ProducerSession
from eosclient.config import ProducerConfig
from eosclient.errors import IllegalStateError, KafkaTimeoutError

_CLOSED_PORT = "127.0.0.1:1"


class _CancellingDriver:
    """A LoopDriver whose every wait for a turn is cancelled (the awaiting task was)."""

    def __init__(self) -> None:
        self.waits = 0

    async def changed(self, timeout: float) -> None:
        self.waits += 1
        raise asyncio.CancelledError


def _session(**settings: Any) -> ProducerSession:
    return ProducerSession(ProducerConfig(bootstrap_servers=_CLOSED_PORT, **settings))


def test_the_sync_front_sends_through_the_session_with_no_call_in_between() -> None:
    # send() is the hot path (~0.7 us a record): a front method that called the session's
    # would cost a Python call a record.
    producer = TransactionalProducer(_CLOSED_PORT)
    try:
        assert producer.send.__func__ is ProducerSession.send  # type: ignore[attr-defined]
    finally:
        producer.close(0)


def test_a_cancelled_flush_stops_flushing() -> None:
    session = _session()
    session.sender.incomplete = lambda: True  # type: ignore[method-assign]  # records pending
    driver = _CancellingDriver()
    steps = session.flush(time.monotonic() + 5, 5)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(adrive(steps, driver))  # type: ignore[arg-type]
    assert driver.waits == 1
    assert session.sender.flushing == 0  # else the I/O loop would drain as if flushing for good
    session.close_unstarted()


def test_a_flush_past_its_deadline_says_what_stays_queued_and_stops_flushing() -> None:
    session = _session()
    session.sender.incomplete = lambda: True  # type: ignore[method-assign]
    with session.lock, pytest.raises(KafkaTimeoutError,
                                     match=r"flush\(\) did not finish in time; records still "
                                           r"pending after 0.05 s; they stay queued"):
        session.sender.drive(session.flush(time.monotonic() + 0.05, 0.05))
    assert session.sender.flushing == 0
    session.close_unstarted()


def test_the_steps_of_a_closed_session_refuse_before_they_wait() -> None:
    session = _session()
    session.close_unstarted()
    for steps in (session.flush(time.monotonic() + 5, 5), session.partitions("t"),
                  session.prepare(time.monotonic() + 5, 5)):
        with pytest.raises(IllegalStateError, match="closed"):
            next(steps)


def test_room_has_nothing_to_wait_for_once_the_topic_is_known_and_the_buffer_free() -> None:
    session = _session()
    session.sender.metadata.partition_count = lambda topic: 3  # type: ignore[method-assign]
    steps = session.room("t")
    with pytest.raises(StopIteration) as done:
        next(steps)
    assert done.value.value is False
    session.close_unstarted()


def test_room_waits_for_an_unknown_topic() -> None:
    session = _session()
    steps = session.room("t")
    assert isinstance(next(steps), Block)  # (and asked the cluster for it)
    steps.close()
    session.close_unstarted()
