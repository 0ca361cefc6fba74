"""The accumulator, sans-IO: records appended, batches drained and decoded with kafka-python,
answers fed back; codec selection. What it refuses and where records go (the partitioner):
tests/unit/test_accumulator_input.py."""

from __future__ import annotations

import random
from typing import Any

import kafka.codec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from eosclient._core.accumulator import AccumulatorSettings, ReadyBatch, RecordAccumulator
from eosclient._core.delivery import DeliveryHandle, RecordDelivery
from eosclient._core.partitioner import (
    StickyPartitions,
)
from eosclient._core.records import (
    Compression,
    available_compressions,
    compression_for,
)
from eosclient._core.sequences import Acked, Failed, Ignored, Retry
from eosclient._core.types import NO_IDENTITY, ProducerIdentity, TopicPartition
from eosclient.errors import (
    AbortableError,
    ConfigError,
    EpochBumpRequiredError,
    IllegalStateError,
    KafkaTimeoutError,
)

ID = ProducerIdentity(7000, 3)
BUMPED = ProducerIdentity(7000, 4)
TP0, TP1, TP2 = (TopicPartition("out", p) for p in range(3))
TS = 1_700_000_000_000
VALUE = b"v" * 100


class Gate:
    """A drain gate: the listed partitions (None: all), the given generation (None: any)."""

    def __init__(self, partitions: set[TopicPartition] | None = None,
                 generation: int | None = None) -> None:
        self.partitions, self.generation = partitions, generation
        self.asked: list[tuple[str, TopicPartition, int | None]] = []

    def may_drain(self, tp: TopicPartition, generation: int) -> bool:
        self.asked.append(("drain", tp, generation))
        return (self.partitions is None or tp in self.partitions) and (
            self.generation is None or generation == self.generation)

    def may_resend(self, tp: TopicPartition) -> bool:
        self.asked.append(("resend", tp, None))
        return self.partitions is None or tp in self.partitions


every = Gate()


def accumulator(identity: ProducerIdentity = ID, **overrides: Any) -> RecordAccumulator:
    return RecordAccumulator(AccumulatorSettings(**overrides), identity=identity,
                             sticky=StickyPartitions(random.Random(0)))


def put(acc: RecordAccumulator, tp: TopicPartition = TP0, value: bytes | None = VALUE,
        generation: int = 0, now: float = 0.0, **kwargs: Any) -> RecordDelivery:
    return acc.append(tp, kwargs.pop("key", None), value, kwargs.pop("headers", None),
                      timestamp_ms=TS, now=now, generation=generation)


def decode(ready: ReadyBatch) -> DefaultRecordBatch:
    records = MemoryRecords(ready.data)
    batch = records.next_batch()
    assert batch is not None and records.next_batch() is None
    assert batch.validate_crc()
    return batch


def values(ready: ReadyBatch) -> list[bytes]:
    return [record.value for record in decode(ready)]


def flush(acc: RecordAccumulator, gate: Gate = every,
          now: float = 0.0) -> dict[TopicPartition, ReadyBatch]:
    return acc.drain(gate, now, flush=True)


# -- batching --------------------------------------------------------------------------------


def test_a_batch_waits_for_linger_unless_flushed() -> None:
    acc = accumulator(linger_ms=10)
    put(acc, now=0.0)
    assert acc.drain(every, now=0.009) == {}
    assert acc.next_ready(now=0.004) == pytest.approx(0.006)
    assert list(acc.drain(every, now=0.010)) == [TP0]
    put(acc, now=1.0)
    assert list(acc.drain(every, now=1.0, flush=True)) == [TP0]
    assert acc.next_ready(now=1.0) is None


def test_a_full_batch_is_ready_before_linger() -> None:
    acc = accumulator(batch_size=1024, linger_ms=60_000)
    for _ in range(20):
        put(acc)
    assert acc.next_ready(now=0.0) == 0.0
    full = []
    while drained := acc.drain(every, now=0.0):
        full.append(drained[TP0])
    assert len(full) == 2 and all(len(r.data) <= 1024 for r in full)
    assert full[0].ticket.record_count == full[1].ticket.record_count == 8
    assert acc.unsent_records() == 4  # the last batch is not full: it lingers


def test_one_batch_per_partition_per_drain_with_consecutive_sequences() -> None:
    # Produce v3+ accepts exactly one record batch per partition per request.
    acc = accumulator(batch_size=512)
    for _ in range(12):
        put(acc)
        put(acc, tp=TP1)
    first = flush(acc)
    second = flush(acc)
    assert set(first) == set(second) == {TP0, TP1}
    a, b = first[TP0].ticket, second[TP0].ticket
    assert (a.base_sequence, b.base_sequence) == (0, a.record_count)
    assert decode(second[TP0]).base_sequence == a.record_count


def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own() -> None:
    acc = accumulator(batch_size=100)
    put(acc, value=b"x" * 500)
    put(acc)
    assert values(flush(acc)[TP0]) == [b"x" * 500]


def test_drain_takes_only_partitions_ready_allows() -> None:
    # KIP-609 pre-registration: a partition is produced to only after its registration.
    acc = accumulator()
    for tp in (TP0, TP1, TP2):
        put(acc, tp=tp)
    assert set(flush(acc, Gate({TP0, TP2}))) == {TP0, TP2}
    assert acc.sequences.next_sequence(TP1) == 0  # no sequence spent on a gated partition
    assert set(flush(acc)) == {TP1}


def test_drain_respects_the_byte_budget_and_rotates() -> None:
    acc = accumulator()
    for tp in (TP0, TP1, TP2):
        for _ in range(5):
            put(acc, tp=tp)
    taken: list[TopicPartition] = []
    for _ in range(3):
        drained = acc.drain(every, 0.0, max_bytes=700, flush=True)
        assert len(drained) == 1  # one ~650-byte batch fits, two do not
        taken.extend(drained)
    assert set(taken) == {TP0, TP1, TP2}  # no partition starves


def test_an_appender_adds_to_the_newest_batch_until_it_takes_no_more() -> None:
    acc = accumulator(batch_size=512, linger_ms=60_000)
    first = put(acc)
    assert acc.appender(TP0, generation=1) is None and acc.appender(TP1, generation=0) is None
    shortcut = acc.appender(TP0, generation=0)
    assert shortcut is not None
    add, outcome = shortcut
    assert outcome is first.outcome
    deltas = [add(TS, None, VALUE, ()) for _ in range(5)]
    assert deltas[:3] == [1, 2, 3] and deltas[3:] == [-1, -1]  # 4 records of 100 bytes fit 512
    put(acc)  # the usual way: it opens the next batch
    assert add(TS, None, b"x", ()) == -1  # the closed batch takes nothing, however small
    ready = flush(acc)[TP0]
    assert values(ready) == [VALUE] * 4 and ready.ticket.record_count == 4


def test_an_appender_refuses_once_its_batch_was_drained_or_failed() -> None:
    acc = accumulator()
    put(acc)
    shortcut = acc.appender(TP0, generation=0)
    assert shortcut is not None
    flush(acc)
    assert shortcut[0](TS, None, VALUE, ()) == -1 and acc.unsent_records() == 0
    put(acc, generation=1)
    doomed = acc.appender(TP0, generation=1)
    assert doomed is not None
    acc.fail_generation(1, AbortableError("aborted"))
    assert doomed[0](TS, None, VALUE, ()) == -1 and acc.unsent_records() == 0


def test_a_batch_drained_unencoded_encodes_later_to_the_same_bytes_and_resends_them() -> None:
    # The I/O thread encodes drained batches after releasing the lock; the bytes, sequences
    # and the byte budget must be what an encoding drain gives.
    now, later = accumulator(batch_size=512), accumulator(batch_size=512)
    for acc in (now, later):
        for _ in range(12):
            put(acc)
            put(acc, tp=TP1)
    encoded = now.drain(every, 0.0, flush=True, max_bytes=600)
    bare = later.drain(every, 0.0, flush=True, max_bytes=600, encode=False)
    assert list(bare) == list(encoded) and all(not r.data for r in bare.values())
    ready = {tp: later.encode(r) for tp, r in bare.items()}
    assert {tp: r.data for tp, r in ready.items()} == {tp: r.data for tp, r in encoded.items()}
    assert later.encode(ready[TP0]) is ready[TP0]
    assert isinstance(later.complete(ready[TP0], 13), Retry)  # lost: sent again, same bytes
    assert flush(later, every)[TP0].data == ready[TP0].data


def test_a_new_generation_starts_a_new_batch() -> None:
    acc = accumulator()
    put(acc, value=b"g0", generation=0)
    put(acc, value=b"g1", generation=1)
    first = flush(acc)[TP0]
    assert values(first) == [b"g0"] and first.generation == 0
    assert flush(acc) == {}  # generation 1 waits until generation 0 is settled here
    acc.complete(first, 0, base_offset=0)
    assert values(flush(acc)[TP0]) == [b"g1"]


def test_an_old_generation_batch_never_drains_even_before_fail_generation() -> None:
    # drain took a partition-only predicate: only the producer's ordering (FailUnsent applied
    # before any drain) kept a failed transaction's batch out of the next transaction.
    acc = accumulator()
    old = put(acc, value=b"g0", generation=0)
    put(acc, tp=TP1, value=b"g1", generation=1)
    gate = Gate(generation=1)  # the core moved on; fail_generation(0) not applied yet
    drained = flush(acc, gate)
    assert list(drained) == [TP1] and values(drained[TP1]) == [b"g1"]
    assert ("drain", TP0, 0) in gate.asked and acc.sequences.next_sequence(TP0) == 0
    acc.fail_generation(0, AbortableError("aborted"))
    assert isinstance(old.exception(), AbortableError) and flush(acc, gate) == {}


def test_a_resend_goes_where_the_gate_allows_resends_even_if_not_new_batches() -> None:
    # While aborting, the core allows no new batch but must let a resend out: EndTxn(abort)
    # waits for its answer (KAFKA-14053); the producer special-cased this outside the core.
    acc = accumulator()
    put(acc)
    first = flush(acc)[TP0]
    acc.complete(first, 6)  # NOT_LEADER_OR_FOLLOWER: due for a resend
    put(acc)  # a new batch behind it

    class Aborting(Gate):
        def may_drain(self, tp: TopicPartition, generation: int) -> bool:
            return False

    assert flush(acc, Gate(set())) == {}  # the resend is gated too (e.g. leader unknown)
    again = flush(acc, Aborting())[TP0]
    assert again.data == first.data and again.ticket.attempt == 1
    acc.complete(again, 0, base_offset=0)
    assert flush(acc, Aborting()) == {} and acc.unsent_records() == 1


def test_nothing_drains_before_an_identity() -> None:
    acc = accumulator(identity=NO_IDENTITY)
    put(acc)
    assert flush(acc) == {}
    acc.reset_identity(ID)
    assert decode(flush(acc)[TP0]).producer_id == ID.producer_id


# -- encoding --------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_encoded_batches_decode_back_with_kafka_python(codec: str) -> None:
    if codec not in available_compressions():
        pytest.skip(f"compression.type={codec}: its library is not installed")
    acc = accumulator(compression_type=codec)
    headers = [("trace", b"abc"), ("empty", None)]
    for i in range(50):
        put(acc, key=b"k%d" % i, value=b"value-%d" % i * 10, headers=headers)
    put(acc, key=None, value=None)  # a keyless tombstone
    ready = flush(acc)[TP0]
    batch = decode(ready)
    assert (batch.producer_id, batch.producer_epoch) == (ID.producer_id, ID.epoch)
    assert batch.base_sequence == 0 and batch.is_transactional and not batch.is_control_batch
    assert batch.compression_type == (Compression[codec.upper()] if codec != "none" else 0)
    records = list(batch)
    assert len(records) == 51 == ready.ticket.record_count
    assert records[7].key == b"k7" and records[7].value == b"value-7" * 10
    assert records[7].headers == headers and records[7].timestamp == TS
    assert records[7].offset == 7
    assert (records[-1].key, records[-1].value) == (None, None)


def test_an_idempotent_producer_writes_non_transactional_batches() -> None:
    acc = accumulator(transactional=False)
    put(acc)
    batch = decode(flush(acc)[TP0])
    assert not batch.is_transactional and batch.producer_id == ID.producer_id


def test_unknown_compression_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        accumulator(compression_type="brotli")
    assert info.value.key == "compression.type"


@pytest.mark.parametrize(("codec", "package"),
                         [("snappy", "python-snappy"), ("lz4", "lz4"), ("zstd", "zstandard")])
def test_a_missing_codec_library_names_the_package(
    monkeypatch: pytest.MonkeyPatch, codec: str, package: str
) -> None:
    monkeypatch.setattr(kafka.codec, f"has_{codec}", lambda: False)
    with pytest.raises(ConfigError, match=f"pip install {package}") as info:
        compression_for(codec)
    assert info.value.key == "compression.type"


# -- handles and answers ---------------------------------------------------------------------


def test_success_gives_each_record_its_offset() -> None:
    acc = accumulator()
    handles = [put(acc) for _ in range(3)]
    assert not handles[0].done()
    with pytest.raises(IllegalStateError):
        handles[0].result()
    assert isinstance(acc.complete(flush(acc)[TP0], 0, base_offset=100), Acked)
    assert [h.result().offset for h in handles] == [100, 101, 102]
    assert handles[2].result().timestamp_ms == TS and handles[2].exception() is None


def test_duplicate_sequence_completes_without_an_offset() -> None:
    acc = accumulator()
    handle = put(acc)
    acc.complete(flush(acc)[TP0], 46, base_offset=5)
    assert handle.result().offset == -1


def test_log_append_time_replaces_create_time() -> None:
    acc = accumulator()
    handle = put(acc)
    acc.complete(flush(acc)[TP0], 0, base_offset=0, log_append_time_ms=TS + 5)
    assert handle.result().timestamp_ms == TS + 5


def test_bulk_handle_spans_batches_and_settles_when_all_are_written() -> None:
    acc = accumulator(batch_size=1024)
    seen: list[DeliveryHandle] = []
    handle = acc.append_many(TP0, [VALUE] * 25, timestamp_ms=TS, now=0, generation=0)
    acc.append_many(TP1, [VALUE] * 2, timestamp_ms=TS, now=0, generation=0, handle=handle)
    handle.add_done_callback(seen.append)
    assert handle.record_count == 27
    offset = 0
    while not handle.done():
        for tp, ready in flush(acc).items():
            acc.complete(ready, 0, base_offset=offset if tp == TP0 else 500)
            offset += ready.ticket.record_count if tp == TP0 else 0
    assert seen == [handle]
    spans = handle.result()
    assert sum(s.record_count for s in spans) == 27
    assert next(s.offset for s in spans if s.tp == TP0) == 0


def test_bulk_results_come_in_append_order_whatever_the_order_of_answers() -> None:
    # The handle listed batches in the order they were answered, so a send_batch spread over
    # partitions could not be mapped back to its records.
    acc = accumulator()
    handle = acc.append_many(TP0, [b"first"], timestamp_ms=TS, now=0, generation=0)
    acc.append_many(TP1, [b"second"], timestamp_ms=TS, now=0, generation=0, handle=handle)
    drained = flush(acc)
    acc.complete(drained[TP1], 0, base_offset=70)
    acc.complete(drained[TP0], 0, base_offset=30)
    assert [(d.tp, d.offset) for d in handle.result()] == [(TP0, 30), (TP1, 70)]


def test_an_empty_bulk_succeeds_at_once() -> None:
    # A send_batch of nothing must not leave a future that never settles.
    handle = accumulator().append_many(TP0, [], timestamp_ms=TS, now=0, generation=0)
    assert handle.done() and handle.result() == () and handle.record_count == 0


def test_retriable_answer_resends_the_same_bytes_and_sequence() -> None:
    acc = accumulator()
    handle = put(acc)
    first = flush(acc)[TP0]
    assert acc.complete(first, 6) == Retry(pending=1)  # NOT_LEADER_OR_FOLLOWER
    assert not handle.done()
    again = acc.drain(every, 0.0)[TP0]  # due at once, no linger
    assert again.data == first.data and again.ticket == first.ticket._replace(attempt=1)
    acc.complete(again, 0, base_offset=9)
    assert handle.result().offset == 9


def test_expired_records_fail_by_kind() -> None:
    acc = accumulator(delivery_timeout_ms=1000)
    sent, unsent = put(acc, tp=TP0), put(acc, tp=TP1)
    flush(acc, Gate({TP0}))
    assert acc.expire(now=0.999) == []
    expired = acc.expire(now=1.0)
    assert {type(e.error) for e in expired} == {KafkaTimeoutError, EpochBumpRequiredError}
    assert isinstance(unsent.exception(), KafkaTimeoutError)  # never sent: no sequence used
    assert isinstance(sent.exception(), EpochBumpRequiredError)  # in flight: outcome unknown


def test_an_expiry_names_the_identity_and_generation_of_its_batch() -> None:
    # expire() returned bare errors, and the producer reported each with the core's *current*
    # identity and generation, which may belong to a later transaction than the batch.
    acc = accumulator(delivery_timeout_ms=1000)
    put(acc, tp=TP0, generation=3)
    flush(acc)  # in flight under ID
    put(acc, tp=TP1, generation=4, now=0.5)  # never sent
    assert sorted((e.identity, e.generation) for e in acc.expire(now=1.5)) == [(ID, 3), (ID, 4)]


# -- generations (KIP-360) -------------------------------------------------------------------


def test_fail_generation_fails_its_unsent_records_and_later_appends() -> None:
    acc = accumulator()
    old = [put(acc, generation=0), put(acc, tp=TP1, generation=0)]
    new = put(acc, generation=1)
    aborted = AbortableError("aborted")
    assert acc.fail_generation(0, aborted) == 2
    assert all(h.exception() is aborted for h in old)
    late = put(acc, generation=0)
    assert late.exception() is aborted
    assert values(flush(acc)[TP0]) == [VALUE] and acc.unsent_records() == 0
    assert not new.done()


@pytest.mark.parametrize("code", [45, 59, 10])
def test_records_of_a_transaction_aborted_for_a_bump_never_reach_the_next_one(code: int) -> None:
    # kafka-python 3.0.12 bumps at once and commits the failed transaction's queued records
    # inside the next one, under the new epoch (seen against librdkafka's mock).
    acc = accumulator(batch_size=512)
    for i in range(10):
        put(acc, value=b"txn0-%d" % i + VALUE, generation=0)
    assert acc.unsent_records() == 10
    outcome = acc.complete(flush(acc)[TP0], code)
    assert acc.unsent_records(generation=0) > 0  # queued behind the failed batch
    assert isinstance(outcome, Failed) and isinstance(outcome.error, EpochBumpRequiredError)
    assert flush(acc) == {}  # the broken partition sends nothing more
    acc.fail_generation(0, outcome.error)  # abort_transaction(): unsent batches fail...
    acc.reset_identity(BUMPED)  # ...EndTxn(abort), InitProducerId(id, epoch): new epoch
    put(acc, value=b"txn1", generation=1)
    ready = flush(acc)[TP0]
    batch = decode(ready)
    assert values(ready) == [b"txn1"]
    assert (batch.producer_epoch, batch.base_sequence) == (BUMPED.epoch, 0)


def test_in_flight_batches_fail_when_the_identity_changes() -> None:
    acc = accumulator()
    handle = put(acc)
    ready = flush(acc)[TP0]
    acc.reset_identity(BUMPED)
    assert isinstance(handle.exception(), AbortableError)
    assert isinstance(acc.complete(ready, 0), Ignored)


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 1), st.sampled_from([TP0, TP1])),
        st.tuples(st.just("fail"), st.integers(0, 1), st.just(TP0)),
        st.tuples(st.just("drain"), st.integers(0, 1), st.just(TP0)),
        st.tuples(st.just("ack"), st.just(0), st.just(TP0)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(_OPS)
def test_no_drained_record_belongs_to_a_failed_generation(ops: list[tuple[str, int, Any]]) -> None:
    # The KIP-360 rule as a property: whatever the interleaving of appends to generations g and
    # g+1 with fail_generation(g), every drained batch holds records of one live generation.
    # The gate allows only the current generation, and "fail" applies fail_generation only
    # for arg 0: with arg 1 the gate alone must keep the dead generation's batches in.
    acc = accumulator(batch_size=300)
    current, dead, in_flight = 0, -1, []
    for op, arg, tp in ops:
        if op == "append":
            generation = current + arg
            put(acc, tp=tp, value=b"%d" % generation, generation=generation)
        elif op == "fail":
            if arg == 0:
                acc.fail_generation(current, AbortableError("abort"))
            dead, current = current, current + 1
        elif op == "drain":
            for ready in acc.drain(Gate(generation=current), now=0.0,
                                   flush=bool(arg)).values():
                generations = {int(v) for v in values(ready)}
                assert generations == {ready.generation}
                assert ready.generation > dead
                in_flight.append(ready)
        elif in_flight:
            acc.complete(in_flight.pop(0), 0, base_offset=0)
