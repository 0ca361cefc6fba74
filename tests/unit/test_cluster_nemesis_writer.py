"""The cluster nemesis's application loop, sans-IO: its decisions (``Writer``) carried out by
both drivers, the sync ``Loop`` and the asyncio ``AsyncLoop``, on a scripted client that
raises the error kinds the real clients' errors are read as. Both fronts must make the very
same calls and write down the same outcome.
"""

from __future__ import annotations

from typing import Literal

import pytest

from eosclient.testing.cluster_nemesis._schedule import make_schedule
from eosclient.testing.cluster_nemesis._verdict import ClusterNemesisResult, Txn
from eosclient.testing.cluster_nemesis._writer import (
    RECORDS_PER_TRANSACTION,
    Abort,
    AsyncLoop,
    Fatal,
    Loop,
    Retry,
)

Front = Literal["sync", "asyncio"]
SENDS = ["send"] * RECORDS_PER_TRANSACTION


class Script:
    """What every producer of a run was asked, in order (``make`` for each one made), and the
    errors to raise: method -> one entry per call (None: that call succeeds)."""

    def __init__(self, **raises: list[Exception | None]) -> None:
        self.calls: list[str] = []
        self._raises = raises

    def call(self, method: str) -> None:
        self.calls.append(method)
        pending = self._raises.get(method)
        if pending and (exc := pending.pop(0)) is not None:
            raise exc


class SyncClient:
    def __init__(self, script: Script) -> None:
        self._s = script
        script.call("make")

    def init(self, timeout: float) -> None:
        self._s.call("init")

    def begin(self) -> None:
        self._s.call("begin")

    def send(self, partition: int, value: bytes) -> None:
        self._s.call("send")

    def commit(self, timeout: float) -> None:
        self._s.call("commit")

    def abort(self, timeout: float) -> None:
        self._s.call("abort")

    def close(self, timeout: float) -> None:
        self._s.call("close")


class AsyncClient:
    def __init__(self, script: Script) -> None:
        self._s = script
        script.call("make")

    async def init(self, timeout: float) -> None:
        self._s.call("init")

    def begin(self) -> None:
        self._s.call("begin")

    async def send(self, partition: int, value: bytes) -> None:
        self._s.call("send")

    async def commit(self, timeout: float) -> None:
        self._s.call("commit")

    async def abort(self, timeout: float) -> None:
        self._s.call("abort")

    async def close(self, timeout: float) -> None:
        self._s.call("close")


def one_transaction(front: Front, script: Script) -> tuple[Txn, ClusterNemesisResult]:
    """Init a producer, run one transaction, close: on ``front``'s driver."""
    result = ClusterNemesisResult("eosclient", make_schedule(1, duration=1))
    if front == "sync":
        loop: Loop | AsyncLoop = Loop(result, lambda: SyncClient(script), 1.0)
    else:
        loop = AsyncLoop(result, lambda: AsyncClient(script), 1.0)
    txn = Txn(0, 0.0)
    result.txns.append(txn)
    try:
        loop.init()
        loop.transaction(txn)
    finally:
        loop.close(1.0)
    return txn, result


fronts = pytest.mark.parametrize("front", ["sync", "asyncio"])


@fronts
def test_a_clean_transaction_commits(front: Front) -> None:
    script = Script()
    txn, result = one_transaction(front, script)
    assert script.calls == ["make", "init", "begin", *SENDS, "commit", "close"]
    assert (txn.outcome, txn.sent, result.wedges) == ("committed", 20, [])


@fronts
def test_a_commit_that_timed_out_is_called_again(front: Front) -> None:
    script = Script(commit=[Retry("KafkaTimeoutError"), None], init=[Retry("load"), None])
    txn, result = one_transaction(front, script)
    assert script.calls == ["make", "init", "init", "begin", *SENDS, "commit", "commit",
                            "close"]
    assert txn.outcome == "committed"
    assert result.wedges == []


@fronts
def test_an_abortable_send_aborts_the_transaction(front: Front) -> None:
    script = Script(send=[None, None, Abort("AbortableError")])
    txn, _ = one_transaction(front, script)
    assert script.calls == ["make", "init", "begin", "send", "send", "send", "abort", "close"]
    assert (txn.outcome, txn.sent, txn.note) == ("aborted", 2, "send: AbortableError")


@fronts
def test_a_fatal_commit_is_unknown_and_makes_a_new_producer(front: Front) -> None:
    script = Script(commit=[Fatal("FatalError")])
    txn, result = one_transaction(front, script)
    assert script.calls == ["make", "init", "begin", *SENDS, "commit", "close", "make",
                            "init", "close"]
    assert txn.outcome == "unknown"
    assert result.recreated == 1
    assert [w.what for w in result.wedges] == ["commit_transaction() raised FatalError"]


@fronts
def test_an_abort_that_fails_makes_a_new_producer(front: Front) -> None:
    script = Script(commit=[Abort("AbortableError")], abort=[Fatal("FatalError")])
    txn, result = one_transaction(front, script)
    assert script.calls == ["make", "init", "begin", *SENDS, "commit", "abort", "close",
                            "make", "init", "close"]
    assert txn.outcome == "failed"  # neither committed nor aborted, as far as it knows
    assert result.recreated == 1


def test_the_asyncio_loop_is_closed_once() -> None:
    script = Script()
    result = ClusterNemesisResult("eosclient", make_schedule(1, duration=1))
    loop = AsyncLoop(result, lambda: AsyncClient(script), 1.0)
    loop.close(1.0)
    loop.close(1.0)
    assert script.calls == ["make", "close"]
    with pytest.raises(RuntimeError, match="closed"):
        loop.init()
