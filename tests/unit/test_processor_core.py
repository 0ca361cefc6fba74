"""The processor's steps without a broker: scripted conversations with ProcessorCore (each I/O it
asks for is answered by the script, in order), driven by both fronts' drivers.

The core is what both processors run; the conversation is its whole contract with a front, so
these read as the processor's rules: what is asked, in which order, after which answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from eosclient import OutputRecord, TopicPartition, Watermarks
from eosclient._core.decode import RecordColumns
from eosclient._processor.core import SOURCE_HEADER, ProcessorCore, ProcessorSettings
from eosclient._processor.steps import drive
from eosclient.aio.processor import adrive
from eosclient.errors import AbortableError, FencedError, KafkaTimeoutError, RetriableError

TP = TopicPartition("in", 0)


def settings(**overrides: Any) -> ProcessorSettings:
    given: dict[str, Any] = {
        "bootstrap_servers": "127.0.0.1:1", "input_topics": ["in"], "output_topic": "out",
        "group_id": "g", "transactional_id": "t", "fn": None, "batch_fn": None,
        "max_records_per_transaction": 500, "commit_interval_ms": 100,
        "preregister_partitions": False, "max_consecutive_aborts": 10, "config": None,
        "producer_config": None, "consumer_config": None, **overrides}
    return ProcessorSettings.of(**given)


def columns(first: int, count: int) -> RecordColumns:
    offsets = list(range(first, first + count))
    return RecordColumns("in", 0, offsets, [None] * count, [b"%d" % o for o in offsets],
                         [0] * count, [()] * count)


def ends(high: int, stable: int) -> Callable[..., dict[TopicPartition, Watermarks]]:
    """A ``consumer.watermarks`` answer: every partition asked for at ``high`` / ``stable``."""
    return lambda tps, *_: {tp: Watermarks(0, high, stable) for tp in tps}


class Each(list[Any]):
    """Answers for successive calls of one method."""


class Script:
    """The ports: each call is logged as ``port.method`` and answered by ``answers[name]``
    (a value, a callable of the arguments, or an exception to raise); :class:`Each` holds one
    answer per call, the last one repeated."""

    def __init__(self, **answers: Any) -> None:
        self.answers = {name.replace("__", "."): answer for name, answer in answers.items()}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def args(self, name: str) -> list[tuple[Any, ...]]:
        return [args for called, args in self.calls if called == name]

    def __getitem__(self, port: str) -> object:
        return SimpleNamespace(__getattr__=None, **{
            method: self._method(f"{port}.{method}") for method in _METHODS[port]})

    def _method(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, (*args, *kwargs.values())))
            answer = self.answers.get(name, _DEFAULTS.get(name))
            if isinstance(answer, Each):
                answer = answer.pop(0) if len(answer) > 1 else answer[0]
            if isinstance(answer, BaseException):
                raise answer
            return answer(*args, *kwargs.values()) if callable(answer) else answer
        return call


class AsyncScript(Script):
    """The same script, every method a coroutine function (as the asyncio front's are)."""

    def _method(self, name: str) -> Callable[..., Any]:
        sync = super()._method(name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0)
            return sync(*args, **kwargs)
        return call


_METHODS = {
    "front": ["open_producer", "open_consumer", "transform_each", "transform_batch", "send_all",
              "send_copies", "probe", "backoff", "sleep", "close_clients"],
    "producer": ["init_transactions", "partitions_for", "begin_transaction",
                 "send_offsets_to_transaction", "commit_transaction", "abort_transaction"],
    "consumer": ["poll_batch", "assignment", "committed", "start_commit", "finish_commit",
                 "seek", "seek_to_beginning",
                 "group_metadata", "in_generation", "watermarks", "topic_metadata"],
}
_DEFAULTS: dict[str, Any] = {
    "front.open_producer": SimpleNamespace(transaction_timeout_ms=60000),
    "front.open_consumer": SimpleNamespace(session_timeout_ms=10000),
    "front.backoff": False,
    "producer.partitions_for": [TopicPartition("out", 0)],
    "consumer.assignment": [TP],
    "consumer.group_metadata": "metadata",
    "consumer.start_commit": "plain commit",  # the job finish_commit waits for
    "consumer.in_generation": True,
    "consumer.committed": lambda tps, *_: dict.fromkeys(tps, 0),
    "consumer.poll_batch": lambda timeout, most: {},
}


def run(script: Script, core: ProcessorCore, **limits: Any) -> Any:
    return steps_on(script, core.run(limits.get("max_records"), limits.get("timeout", 5.0),
                                     limits.get("idle_timeout")))


def steps_on(script: Script, steps: Any) -> Any:
    """Drive ``steps`` with the script, by the driver of its kind (sync or asyncio)."""
    if isinstance(script, AsyncScript):
        return asyncio.run(adrive(steps, script))
    return drive(steps, script)


@pytest.fixture(params=[Script, AsyncScript], ids=["drive", "adrive"])
def kind(request: pytest.FixtureRequest) -> type[Script]:
    return request.param  # type: ignore[no-any-return]


def test_a_poll_becomes_one_transaction_with_its_offsets(kind: type[Script]) -> None:
    script = kind(consumer__poll_batch=Each([{TP: columns(0, 3)}, {}]))
    stats = run(script, ProcessorCore(settings()), max_records=3)
    assert script.names() == [
        "front.open_producer", "producer.init_transactions", "producer.partitions_for",
        "front.open_consumer", "consumer.poll_batch", "producer.begin_transaction",
        "front.send_copies", "consumer.group_metadata", "producer.send_offsets_to_transaction",
        "consumer.in_generation", "producer.commit_transaction",
        "consumer.in_generation", "consumer.start_commit",  # the offsets again, plainly
        "consumer.assignment", "consumer.finish_commit", "front.close_clients"]
    [(topic, runs)] = script.args("front.send_copies")  # one run per input partition
    assert topic == "out"
    assert runs == [([b"%d" % o for o in range(3)], None,  # keyless: the keys left out
                     [[(SOURCE_HEADER, b"in/0/%d" % o)] for o in range(3)])]
    assert script.args("producer.send_offsets_to_transaction") == [({TP: 3}, "metadata")]
    assert (stats.records_in, stats.records_out, stats.transactions_committed) == (3, 3, 1)


def test_a_commit_that_timed_out_is_resumed_by_calling_it_again(kind: type[Script]) -> None:
    script = kind(consumer__poll_batch=Each([{TP: columns(0, 3)}, {}]),
                  producer__commit_transaction=Each([KafkaTimeoutError("slow"),
                                                     KafkaTimeoutError("slow"), None]))
    stats = run(script, ProcessorCore(settings()), max_records=3)
    assert script.names().count("producer.commit_transaction") == 3
    assert script.names().count("producer.abort_transaction") == 0
    assert stats.transactions_committed == 1


@pytest.mark.parametrize("interruption", [asyncio.CancelledError, KeyboardInterrupt])
def test_a_commit_interrupted_in_flight_is_finished_and_counted_then_the_run_ends(
        kind: type[Script], interruption: type[BaseException]) -> None:
    # The EndTxn may have landed before the interruption: a commit asked for can only be
    # finished, never aborted, and what it committed counts.
    script = kind(consumer__poll_batch=Each([{TP: columns(0, 3)}, {}]),
                  producer__commit_transaction=Each([interruption(), None]))
    core = ProcessorCore(settings())
    with pytest.raises(interruption):
        run(script, core, max_records=3)
    assert script.names().count("producer.commit_transaction") == 2
    assert "producer.abort_transaction" not in script.names()
    stats = core.counter.snapshot()
    assert (stats.records_in, stats.transactions_committed, stats.transactions_aborted) == (
        3, 1, 0)


def test_an_interrupted_commit_that_then_fails_is_aborted(kind: type[Script]) -> None:
    script = kind(consumer__poll_batch=Each([{TP: columns(0, 3)}, {}]),
                  producer__commit_transaction=Each([KeyboardInterrupt(),
                                                     AbortableError("refused")]))
    core = ProcessorCore(settings())
    with pytest.raises(KeyboardInterrupt):
        run(script, core, max_records=3)
    assert script.names().count("producer.abort_transaction") == 1
    stats = core.counter.snapshot()
    assert (stats.records_in, stats.transactions_committed, stats.transactions_aborted) == (
        0, 0, 1)


def test_a_transaction_past_its_generation_is_aborted_rewound_and_redone(
        kind: type[Script]) -> None:
    # Used to break (before the clock check): a stalled member committed after the group
    # had moved its partitions on.
    script = kind(consumer__poll_batch=Each([{TP: columns(0, 3)}, {TP: columns(0, 3)}, {}]),
                  consumer__in_generation=Each([False, True]))
    stats = run(script, ProcessorCore(settings()), max_records=3)
    names = script.names()
    first_commit = names.index("producer.commit_transaction")
    assert names.index("producer.abort_transaction") < first_commit  # never committed first
    assert script.args("consumer.seek") == [(TP, 0)]  # back to what the group committed
    assert script.args("front.backoff") == [(0.0,)]  # none before the first retry
    assert (stats.transactions_aborted, stats.transactions_committed) == (1, 1)


def test_aborts_in_a_row_give_up_after_max_consecutive_aborts(kind: type[Script]) -> None:
    script = kind(consumer__poll_batch=lambda timeout, most: {TP: columns(0, 1)},
                  producer__commit_transaction=AbortableError("refused"))
    core = ProcessorCore(settings(max_consecutive_aborts=3, max_records_per_transaction=1))
    with pytest.raises(AbortableError, match="refused") as failed:
        run(script, core)
    assert "3 transactions in a row were aborted" in "".join(failed.value.__notes__)
    first, second = (d for (d,) in script.args("front.backoff"))
    assert first == 0 and second > 0  # none before the first retry, then a growing one
    assert script.names()[-1] == "front.close_clients"


def test_a_failing_transform_aborts_closes_and_propagates(kind: type[Script]) -> None:
    script = kind(consumer__poll_batch=lambda timeout, most: {TP: columns(0, 2)},
                  front__transform_each=RuntimeError("boom"))
    core = ProcessorCore(settings(fn=lambda record: [OutputRecord(record.value)]))
    with pytest.raises(RuntimeError, match="boom"):
        run(script, core)
    assert script.names()[-2:] == ["producer.abort_transaction", "front.close_clients"]
    assert "producer.commit_transaction" not in script.names()


def test_revoking_commits_the_open_transaction_and_awaits_its_offsets() -> None:
    core = ProcessorCore(settings())
    polls: list[int] = []

    def poll(timeout: float, most: int) -> dict[TopicPartition, RecordColumns]:
        polls.append(most)
        if len(polls) == 1:
            return {TP: columns(0, 2)}
        if len(polls) == 2:  # the group revokes TP inside this poll, as the consumer does
            drive(core.on_revoke([TP]), script)
        return {}

    script = Script(consumer__poll_batch=poll, consumer__committed=lambda tps, *_: {TP: 2})
    stats = run(script, core, max_records=3, timeout=0.3)
    names = script.names()
    commit = names.index("producer.commit_transaction")
    assert names[commit - 1] == "consumer.in_generation"
    assert names[commit + 1:commit + 4] == ["consumer.in_generation", "consumer.start_commit",
                                            "consumer.finish_commit"]
    assert names[commit + 4] == "consumer.committed"  # the hand-over waits for the group
    assert stats.transactions_committed == 1


def test_partitions_handed_over_and_given_back_start_past_what_this_instance_committed() -> None:
    # Tansu settles a transaction's deferred offsets only once no overlapping transaction is
    # open, and then only the first overlapping epoch of each transactional.id: an older
    # epoch's offsets were applied after a newer epoch's, so the group went back from 2 to 0
    # after this instance had handed the partition over (nemesis Tansu seed 1: 494 copied
    # twice). Given the partition back, it starts past what it committed itself.
    core = ProcessorCore(settings())
    polls: list[float] = []
    shown = [2]

    def poll(timeout: float, most: int) -> dict[TopicPartition, RecordColumns]:
        polls.append(timeout)
        if len(polls) == 1:
            return {TP: columns(0, 2)}
        if len(polls) == 2:
            time.sleep(0.15)  # past commit_interval_ms: the transaction commits
        if len(polls) == 3:  # a rebalance hands TP over (the group shows 2), then back
            drive(core.on_revoke([TP]), script)
            shown[0] = 0
            drive(core.on_assign([TP]), script)
        return {}

    script = Script(consumer__poll_batch=poll,
                    consumer__committed=lambda tps, *_: dict.fromkeys(tps, shown[0]),
                    consumer__watermarks=ends(5, 5))
    run(script, core, max_records=3, timeout=0.5)
    assert script.args("consumer.seek") == [(TP, 2)]


def test_partitions_assigned_beside_kept_ones_end_the_transaction_and_only_they_rewind() -> None:
    # Cooperative (KIP-429): a partition arrives while the kept one's transaction is open.
    # Rewinding every assigned partition read the kept one's records again into the next
    # transaction (they were already in the open one), and the open transaction's own records
    # held the output's LSO back, so the wait for it to settle lasted the transaction timeout.
    new = TopicPartition("in", 1)
    core = ProcessorCore(settings(commit_interval_ms=60_000))
    polls: list[float] = []

    def poll(timeout: float, most: int) -> dict[TopicPartition, RecordColumns]:
        polls.append(timeout)
        if len(polls) == 1:
            return {TP: columns(0, 2)}
        if len(polls) == 2:  # the group adds a partition inside this poll, as the consumer does
            drive(core.on_assign([new]), script)
        return {}

    script = Script(consumer__poll_batch=poll, consumer__assignment=[TP, new],
                  consumer__watermarks=ends(5, 5))
    stats = run(script, core, max_records=10, timeout=0.3)
    names = script.names()
    assert names.index("producer.commit_transaction") < names.index("front.probe")
    assert script.args("consumer.committed") == [([new],)]
    assert script.args("consumer.seek") == [(new, 0)]  # the kept partition goes on from 2
    assert stats.transactions_aborted == 0


def test_new_partitions_wait_for_every_output_partition_asking_all_at_once(
        kind: type[Script]) -> None:
    # The output's ends are asked in one call for every partition (one request per leader),
    # not one call per partition: a thousand partitions were two thousand round trips before
    # the first record. Asked again, only the partitions still open are named.
    outputs = [TopicPartition("out", p) for p in range(1000)]
    stable = Each([{tp: Watermarks(0, 5, 5) for tp in outputs},  # the marks of now
                   {tp: Watermarks(0, 5, 3 if tp.partition in (7, 9) else 5) for tp in outputs},
                   {tp: Watermarks(0, 5, 3 if tp.partition == 9 else 5) for tp in outputs[7:10]},
                   {outputs[9]: Watermarks(0, 5, 5)}])
    script = kind(producer__partitions_for=outputs, consumer__watermarks=stable)
    core = ProcessorCore(settings())
    steps_on(script, core.run(0, 1.0, None))  # opens the clients: the outputs are known
    steps_on(script, core.on_assign([TP]))
    asked = script.args("consumer.watermarks")
    assert [len(a[0]) for a in asked] == [1000, 1000, 2, 1]
    assert asked[2][0] == [outputs[7], outputs[9]]


def test_a_committed_transactions_offsets_are_committed_again_plainly() -> None:
    # Tansu can defer a committed transaction's offsets and then drop them with the same
    # producer's next transaction (aborted, or aborted by a successor's InitProducerId): the
    # processor commits them once more outside the transaction, and waits for that before
    # it writes offsets again: the next transaction is read and written meanwhile.
    script = Script(consumer__poll_batch=Each([{TP: columns(0, 3)}, {TP: columns(3, 2)}, {}]),
                    consumer__in_generation=Each([True, True, True, False]))
    stats = run(script, ProcessorCore(settings(max_records_per_transaction=3)), max_records=5)
    assert stats.transactions_committed == 2
    # the first transaction's offsets; the second finished after the generation ran out
    # (checked by the clock after its commit): not this member's to commit any more
    assert script.args("consumer.start_commit") == [({TP: 3},)]
    assert script.args("consumer.finish_commit") == [("plain commit", 10.0)]
    names = script.names()
    start, finish = names.index("consumer.start_commit"), names.index("consumer.finish_commit")
    assert start < names.index("producer.begin_transaction", 6) < finish
    assert finish < names.index("producer.send_offsets_to_transaction", start)


@pytest.mark.parametrize("refusal", [AbortableError("ILLEGAL_GENERATION"),
                                     RetriableError("REBALANCE_IN_PROGRESS"),
                                     KafkaTimeoutError("coordinator gone")])
def test_a_refused_plain_commit_is_logged_and_the_run_goes_on(
        refusal: Exception, caplog: pytest.LogCaptureFixture) -> None:
    script = Script(consumer__poll_batch=Each([{TP: columns(0, 3)}, {TP: columns(3, 3)}, {}]),
                    consumer__finish_commit=refusal)
    with caplog.at_level(logging.INFO, "eosclient.processor"):
        stats = run(script, ProcessorCore(settings(max_records_per_transaction=3)),
                    max_records=6)
    assert stats.transactions_committed == 2
    assert "not secured outside the transaction" in caplog.text


def test_a_fenced_plain_commit_ends_the_run() -> None:
    script = Script(consumer__poll_batch=Each([{TP: columns(0, 3)}, {}]),
                    consumer__finish_commit=FencedError("FENCED_INSTANCE_ID"))
    with pytest.raises(FencedError):
        run(script, ProcessorCore(settings()), max_records=3)


def test_partitions_lost_and_given_back_start_past_what_this_instance_committed() -> None:
    # Tansu applies a committed transaction's offsets late, and drops them for good when the
    # same producer's next transaction is aborted meanwhile (as after a lost generation): the
    # group then shows an offset from before records this instance committed. Going back
    # there copied 104 records twice (nemesis Tansu seed 5).
    core = ProcessorCore(settings())
    polls: list[float] = []

    def poll(timeout: float, most: int) -> dict[TopicPartition, RecordColumns]:
        polls.append(timeout)
        if len(polls) == 1:
            return {TP: columns(0, 2)}
        if len(polls) == 2:
            time.sleep(0.15)  # past commit_interval_ms: the transaction commits
        if len(polls) == 3:  # committed by now; the group moves on and gives TP back
            drive(core.on_lost([TP]), script)
            drive(core.on_assign([TP]), script)
        return {}

    script = Script(consumer__poll_batch=poll, consumer__committed=lambda tps, *_: {TP: 0},
                    consumer__watermarks=ends(5, 5),
                    front__sleep=lambda seconds: None)
    run(script, core, max_records=3, timeout=0.5)
    names = script.names()
    assert "producer.commit_transaction" in names
    assert names.index("producer.commit_transaction") < names.index("front.probe")
    assert script.args("consumer.seek") == [(TP, 2)]
    # and the group is told again (its plain commit after the transaction may have been
    # refused: the generation had moved on), or the next owner would copy those records again
    assert script.args("consumer.start_commit")[-1] == ({TP: 2},)
    assert names.index("consumer.seek") < len(names) - 1 - names[::-1].index(
        "consumer.start_commit")


def test_a_member_that_lost_its_generation_proves_it_was_not_replaced(
        kind: type[Script]) -> None:
    script = kind(front__probe=FencedError("newer epoch"))
    with pytest.raises(FencedError):
        steps_on(script, ProcessorCore(settings()).on_lost([TP]))
    assert script.names() == ["producer.begin_transaction", "front.probe"]


def test_partitions_assigned_are_taken_only_after_proving_this_instance_was_not_replaced(
        kind: type[Script]) -> None:
    # Tansu gives a static member that joins again under its instance id the member id of
    # the one it replaces: a zombie paused for less than its session and its replacement
    # were one member, both given its partitions, and with no input left the zombie held
    # them, never fenced (nemesis Tansu seed 17, asyncio).
    script = kind(front__probe=FencedError("newer epoch"))
    with pytest.raises(FencedError):
        steps_on(script, ProcessorCore(settings()).on_assign([TP]))
    assert script.names() == ["producer.begin_transaction", "front.probe"]  # nothing read


@pytest.mark.parametrize("error", [FencedError("newer epoch"), AbortableError("refused")])
def test_a_fenced_instance_leaves_the_group_as_it_closes(kind: type[Script],
                                                         error: Exception) -> None:
    # A static member keeps its place when it closes, for a restart to take over; a fenced
    # one was replaced, and Tansu, which may never expire it, kept partitions assigned to
    # it for good (nemesis Tansu seed 2, asyncio).
    script = kind(consumer__poll_batch=lambda timeout, most: {TP: columns(0, 1)},
                  producer__commit_transaction=error)
    with pytest.raises(type(error)):
        run(script, ProcessorCore(settings(max_consecutive_aborts=1)))
    assert script.args("front.close_clients") == [(isinstance(error, FencedError),)]
