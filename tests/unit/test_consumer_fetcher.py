"""The consumer's fetcher, sans-IO: Fetch requests out, answers (or their failures) in.

The network client is a fake that records what is sent; answers are fed back through the
callback the fetcher gave, as the I/O thread would. The rule under test: a broker whose answers
are too large to read (noida-db ignores Fetch byte limits) is asked for less, with a WARNING at
once, and after a bounded number of steps the partition fails with a typed error, never a
silent retry loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from eosclient._consumer.fetcher import Cap, Fetcher
from eosclient._consumer.partitions import Assignment, Phase
from eosclient._core.isolation import Isolation
from eosclient._core.types import TopicPartition as TP
from eosclient._net.client import Answer
from eosclient.config import ConsumerConfig
from eosclient.errors import ApiKey, KafkaConnectionError, ResponseTooLargeError

NODE = 1
LIMIT = 100_000_000


class FakeMetadata:
    def __init__(self) -> None:
        self.epochs: dict[TP, int] = {}
        self.version = 1

    def leader(self, tp: TP) -> int:
        return NODE

    def leader_epochs(self) -> dict[TP, int]:
        return self.epochs

    def want(self, topics: Any) -> None:
        pass

    def request_update(self) -> None:
        pass


class FakeClient:
    def __init__(self) -> None:
        self.metadata = FakeMetadata()
        self.sent: list[tuple[Any, Callable[[Answer], None]]] = []

    def send(self, node: int, request: Any, on_done: Callable[[Answer], None], *,
             timeout: float | None = None) -> int:
        self.sent.append((request, on_done))
        return node


def setup(partitions: int, **config: Any) -> tuple[Fetcher, FakeClient, Assignment]:
    cfg = ConsumerConfig(bootstrap_servers=("127.0.0.1:9092",), **config)
    assignment = Assignment(Isolation.READ_COMMITTED, max_held_bytes=1 << 20,
                            max_partition_bytes=cfg.max_partition_fetch_bytes,
                            reset_policy="earliest")
    assignment.replace([TP("t", p) for p in range(partitions)], committed=False)
    for state in assignment:
        state.seek(0)
    client = FakeClient()
    return Fetcher(cfg, client, assignment), client, assignment  # type: ignore[arg-type]


def asked(request: Any) -> tuple[int, int, list[int]]:
    """(partitions, max_bytes, partition_max_bytes of each) of a Fetch request."""
    limits = [p.partition_max_bytes for t in request.topics for p in t.partitions]
    return len(limits), request.max_bytes, limits


def refuse(client: FakeClient, size: int) -> None:
    """Answer the last Fetch the way a connection does that refused its answer unread."""
    request, on_done = client.sent[-1]
    cause = ResponseTooLargeError(f"Fetch: an answer of {size} bytes is over the limit",
                                  size=size, limit=LIMIT, api=ApiKey.FETCH, node=NODE)
    error = KafkaConnectionError("node 1: answer refused")
    error.__cause__ = cause
    on_done(Answer(request, None, error, NODE, on_done))


def step_and_refuse(fetcher: Fetcher, client: FakeClient, size: int) -> tuple[int, int, list[int]]:
    count = len(client.sent)
    fetcher.step(0.0)
    assert len(client.sent) == count + 1, "no Fetch was sent"
    shape = asked(client.sent[-1][0])
    refuse(client, size)
    return shape


def test_an_answer_too_large_shrinks_the_fetches_and_warns_at_once(
        caplog: pytest.LogCaptureFixture) -> None:
    # A refused answer used to be retried with the same Fetch for ever, without a word.
    fetcher, client, _ = setup(4)
    with caplog.at_level(logging.WARNING, logger="eosclient.consumer"):
        first = step_and_refuse(fetcher, client, 118 << 20)
    assert first[:2] == (4, 52_428_800)
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "node 1" in message and str(118 << 20) in message and str(LIMIT) in message
    fetcher.step(0.0)
    assert asked(client.sent[-1][0]) == (2, 26_214_400, [1_048_576, 1_048_576])


def test_shrinking_is_bounded_and_ends_in_a_typed_error_from_the_partition(
        caplog: pytest.LogCaptureFixture) -> None:
    # The bound: halve the partitions, then one partition at one byte, then fail it.
    fetcher, client, assignment = setup(4)
    shapes = []
    with caplog.at_level(logging.WARNING, logger="eosclient.consumer"):
        for _ in range(4):
            shapes.append(step_and_refuse(fetcher, client, 118 << 20))
    assert [s[:2] for s in shapes] == [(4, 52_428_800), (2, 26_214_400), (1, 13_107_200),
                                      (1, 1)]
    assert shapes[-1][2] == [1]
    failed = [s for s in assignment if s.phase is Phase.FAILED]
    assert len(failed) == 1
    error = failed[0].error
    assert isinstance(error, ResponseTooLargeError)
    assert (error.size, error.limit, error.node, error.api) == (118 << 20, LIMIT, NODE,
                                                                ApiKey.FETCH)
    assert "receive.message.max.bytes" in str(error) and str(118 << 20) in str(error)
    assert len(caplog.records) == 4  # one WARNING per refused answer, the last with the error
    assert assignment.settle([]) is error  # what poll() raises once the partition is drained


def test_a_single_partition_goes_to_one_batch_then_fails() -> None:
    # One partition whose backlog alone is too large: two refusals, then the error.
    fetcher, client, assignment = setup(1)
    assert step_and_refuse(fetcher, client, 200 << 20)[:2] == (1, 52_428_800)
    assert step_and_refuse(fetcher, client, 200 << 20)[:2] == (1, 1)
    assert assignment.states[TP("t", 0)].phase is Phase.FAILED


def test_answers_that_fit_lift_the_cap_step_by_step() -> None:
    # Without relaxing, one refused answer would slow the consumer down for good.
    fetcher, client, _ = setup(8)
    step_and_refuse(fetcher, client, 118 << 20)
    step_and_refuse(fetcher, client, 118 << 20)
    assert fetcher.caps[NODE] == Cap(2, 13_107_200)
    request, on_done = client.sent[-1]
    topic = request.topics[0]
    data = SimpleNamespace(error_code=0, responses=[SimpleNamespace(topic=topic.topic, partitions=[
        SimpleNamespace(partition_index=topic.partitions[0].partition, error_code=0,
                        records=b"\x00" * 10, high_watermark=10, last_stable_offset=10)])])
    empty = SimpleNamespace(error_code=0, responses=[])
    for _ in range(100):  # empty answers prove nothing
        on_done(Answer(request, empty, None, NODE, on_done))
    for _ in range(63):
        on_done(Answer(request, data, None, NODE, on_done))
    assert fetcher.caps[NODE] == Cap(2, 13_107_200)
    on_done(Answer(request, data, None, NODE, on_done))
    assert fetcher.caps[NODE] == Cap(4, 13_107_200 * 16)
    for _ in range(64):
        on_done(Answer(request, data, None, NODE, on_done))
    assert NODE not in fetcher.caps


def test_partitions_take_turns_in_capped_fetches() -> None:
    # Capped Fetches always took the first partitions: drained ones answered empty, and the
    # partitions behind them, with data, were never fetched.
    fetcher, client, _ = setup(3)
    step_and_refuse(fetcher, client, 118 << 20)
    step_and_refuse(fetcher, client, 118 << 20)
    assert fetcher.caps[NODE].partitions == 1
    seen = []
    empty = SimpleNamespace(error_code=0, responses=[])
    for i in range(3):
        fetcher.step(time.monotonic() + i + 1)  # past the pause after an empty answer
        request, on_done = client.sent[-1]
        seen += [p.partition for t in request.topics for p in t.partitions]
        on_done(Answer(request, empty, None, NODE, on_done))
    assert sorted(seen) == [0, 1, 2]


def test_a_cut_connection_is_not_taken_for_an_answer_too_large() -> None:
    fetcher, client, _ = setup(2)
    fetcher.step(0.0)
    request, on_done = client.sent[-1]
    on_done(Answer(request, None, KafkaConnectionError("cut"), NODE, on_done))
    assert fetcher.caps == {}


@pytest.mark.parametrize(("receive", "fetch_max", "ok"), [
    (100_000_000, 52_428_800, True), (1_000_512, 1_000_000, True), (1_000_511, 1_000_000, False)])
def test_fetch_max_bytes_must_leave_room_in_receive_message_max_bytes(
        receive: int, fetch_max: int, ok: bool) -> None:
    config = {"receive.message.max.bytes": receive, "fetch.max.bytes": fetch_max}
    if ok:
        cfg = ConsumerConfig.from_kafka({"bootstrap.servers": "h:1", **config})
        assert (cfg.receive_message_max_bytes, cfg.fetch_max_bytes) == (receive, fetch_max)
    else:
        with pytest.raises(ValueError, match=r"fetch\.max\.bytes") as raised:
            ConsumerConfig.from_kafka({"bootstrap.servers": "h:1", **config})
        assert getattr(raised.value, "key", None) == "fetch.max.bytes"


def test_each_partition_is_told_the_room_the_broker_had_for_it() -> None:
    # Without it, a partial batch cut at a limit and one whose length lies looked the same.
    fetcher, client, assignment = setup(2, max_partition_fetch_bytes=1000, fetch_max_bytes=1500)
    fetcher.step(0.0)
    request, on_done = client.sent[-1]
    assert asked(request) == (2, 1500, [1000, 1000])

    def part(index: int, size: int) -> SimpleNamespace:
        return SimpleNamespace(partition_index=index, error_code=0, records=b"\x00" * size,
                               high_watermark=10, last_stable_offset=10)

    response = SimpleNamespace(error_code=0, responses=[
        SimpleNamespace(topic="t", partitions=[part(0, 900), part(1, 100)])])
    on_done(Answer(request, response, None, NODE, on_done))
    rooms = [state.completed.room for state in assignment if state.completed is not None]
    assert rooms == [1000, 600]  # the second gets what the first left of max_bytes


def test_a_fetch_names_each_partitions_leader_epoch() -> None:
    # KIP-320: every Fetch went at current_leader_epoch -1, so a broker behind or ahead of
    # the client's view answered from it without a word (FENCED_LEADER_EPOCH never came).
    fetcher, client, _ = setup(2)
    client.metadata.epochs = {TP("t", 0): 4}
    fetcher.step(0.0)
    [request] = [r for r, _ in client.sent]
    epochs = {p.partition: p.current_leader_epoch for t in request.topics for p in t.partitions}
    assert epochs == {0: 4, 1: -1}


def test_a_step_with_every_leaders_fetch_in_flight_reads_no_partition() -> None:
    # The loop steps at every poll(); each step read every partition's state to find none
    # fetchable while the one leader's Fetch was out: a sixth of the time at 1,000 partitions.
    fetcher, client, assignment = setup(50)
    fetcher.step(0.0)
    assert len(client.sent) == 1
    read: list[TP] = []

    def spy(state: Any) -> Callable[..., bool]:
        fetchable = state.fetchable

        def read_one(*args: Any) -> bool:
            read.append(state.tp)
            return bool(fetchable(*args))
        return read_one

    for state in assignment:
        state.fetchable = spy(state)  # type: ignore[method-assign]
    fetcher.step(0.0)
    assert read == [] and len(client.sent) == 1
    request, on_done = client.sent[-1]
    on_done(Answer(request, SimpleNamespace(error_code=0, responses=[]), None, NODE, on_done))
    fetcher.step(1.0)  # answered: every partition is read, and fetched again
    assert len(read) == 50 and len(client.sent) == 2


def test_what_waits_for_poll_in_all_partitions_bounds_the_fetching() -> None:
    # Each partition's prefetch was bounded (max.partition.fetch.bytes), the sum was not: a
    # consumer of 1,000 partitions whose application fell behind held up to 1,000 of them.
    fetcher, client, assignment = setup(2, queued_max_messages_kbytes=2,
                                        max_partition_fetch_bytes=1500)
    fetcher.step(0.0)
    request, on_done = client.sent[-1]
    assert asked(request) == (2, 2048, [1500, 1500])  # no more than the room left in all
    response = SimpleNamespace(error_code=0, responses=[SimpleNamespace(topic="t", partitions=[
        SimpleNamespace(partition_index=0, error_code=0, records=b"\x00" * 2500,
                        high_watermark=99, last_stable_offset=99)])])
    on_done(Answer(request, response, None, NODE, on_done))
    fetcher.step(1.0)  # partition 1 could be fetched, but 2,500 bytes wait for poll()
    assert len(client.sent) == 1
    assignment.states[TP("t", 0)].completed = None  # poll() took the answer in and drained it
    fetcher.step(2.0)
    assert len(client.sent) == 2 and asked(client.sent[-1][0])[:2] == (2, 2048)
