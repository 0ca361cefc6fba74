"""``buffer.memory``, sans-IO: what the accumulator's budget counts, and that every way a batch
settles gives its bytes back (a leak would block ``send()`` for ever)."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from eosclient._core.accumulator import AccumulatorSettings, ReadyBatch, RecordAccumulator
from eosclient._core.partitioner import StickyPartitions
from eosclient._core.types import ProducerIdentity, TopicPartition
from eosclient.errors import AbortableError

ID, BUMPED = ProducerIdentity(7000, 3), ProducerIdentity(7000, 4)
TP0, TP1 = TopicPartition("out", 0), TopicPartition("out", 1)


class Every:
    def may_drain(self, tp: TopicPartition, generation: int) -> bool:
        return True

    def may_resend(self, tp: TopicPartition) -> bool:
        return True


def accumulator(**overrides: Any) -> RecordAccumulator:
    return RecordAccumulator(AccumulatorSettings(**overrides), identity=ID,
                             sticky=StickyPartitions(random.Random(0)))


def put(acc: RecordAccumulator, tp: TopicPartition = TP0, value: bytes = b"v" * 100,
        generation: int = 0, now: float = 0.0) -> None:
    acc.append(tp, None, value, None, timestamp_ms=0, now=now, generation=generation)


def test_each_open_batch_counts_batch_size_until_it_settles() -> None:
    acc = accumulator(batch_size=1000, buffer_memory=2500)
    put(acc)
    put(acc)  # the same batch
    assert (acc.budget.used, acc.budget.full) == (1000, False)
    put(acc, tp=TP1)
    put(acc, tp=TP1, generation=1)  # a new generation opens a new batch
    assert (acc.budget.used, acc.budget.full) == (3000, True)
    ready = acc.drain(Every(), 0.0, flush=True)
    assert acc.budget.used == 3000  # drained is not settled: the bytes are still held
    acc.complete(ready[TP0], 0, base_offset=0)
    assert (acc.budget.used, acc.budget.full) == (2000, False)


def test_a_record_larger_than_batch_size_counts_its_own_size() -> None:
    acc = accumulator(batch_size=100, buffer_memory=10_000)
    put(acc, value=b"x" * 5000)
    assert 5000 < acc.budget.used < 5100


def test_failed_expired_and_dropped_batches_give_their_bytes_back() -> None:
    acc = accumulator(batch_size=1000, delivery_timeout_ms=1000)
    put(acc, generation=0)
    acc.fail_generation(0, AbortableError("aborted"))
    assert acc.budget.used == 0
    put(acc, generation=1)
    put(acc, tp=TP1, generation=1)
    acc.drain(Every(), 0.0, flush=True)
    acc.reset_identity(BUMPED)  # in flight under the old identity: failed
    assert acc.budget.used == 0
    put(acc, generation=1, now=5.0)
    acc.expire(now=6.0)
    assert acc.budget.used == 0


def test_send_batch_records_count_per_batch() -> None:
    acc = accumulator(batch_size=1000)
    acc.append_many(TP0, [b"v" * 100] * 25, timestamp_ms=0, now=0.0, generation=0)
    opened = acc.budget.used // 1000
    assert opened >= 3  # ~9 records of 100 bytes a batch
    while ready := acc.drain(Every(), 0.0, flush=True):
        acc.complete(ready[TP0], 0, base_offset=0)
    assert acc.budget.used == 0


_OPS = st.lists(st.tuples(
    st.sampled_from(["append", "big", "drain", "ack", "retry", "fail", "bump", "expire"]),
    st.sampled_from([TP0, TP1])), max_size=50)


@settings(max_examples=200, deadline=None)
@given(_OPS)
def test_the_budget_is_what_unsettled_batches_hold(ops: list[tuple[str, TopicPartition]]) -> None:
    acc = accumulator(batch_size=400, delivery_timeout_ms=100_000)
    in_flight: list[ReadyBatch] = []
    generation, identity, now = 0, ID, 0.0
    for op, tp in ops:
        now += 1.0
        if op in ("append", "big"):
            put(acc, tp=tp, value=b"v" * (1000 if op == "big" else 90), generation=generation,
                now=now)
        elif op == "drain":
            in_flight.extend(acc.drain(Every(), now, flush=True).values())
        elif op in ("ack", "retry") and in_flight:
            acc.complete(in_flight.pop(0), 0 if op == "ack" else 13, base_offset=0)
        elif op == "fail":
            acc.fail_generation(generation, AbortableError("aborted"))
            generation += 1
        elif op == "bump":
            identity = ProducerIdentity(identity.producer_id, identity.epoch + 1)
            acc.reset_identity(identity)
            in_flight.clear()
        elif op == "expire":
            acc.expire(now + 200.0)
            in_flight.clear()
        assert acc.budget.used >= 0
    acc.fail_generation(generation, AbortableError("aborted"))
    acc.expire(now + 1_000_000.0)  # whatever is still in flight or due for a resend
    assert acc.budget.used == 0 and not acc.budget.full
