"""The consumer's partition states, sans-IO: Fetch answers in, positions and records out.

Batches are hand-built (every record's value is its offset); a Fetch answer is a plain object
with the fields the consumer reads. The rule under test above all: the position (the offset a
commit would store) never moves past a record the application has not been given.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from eosclient._consumer.partitions import (
    Assignment,
    CompletedFetch,
    PartitionState,
    Phase,
    missing,
)
from eosclient._core.isolation import IndexTrust, Isolation
from eosclient._core.types import TopicPartition as TP
from eosclient._net.metadata import Metadata
from eosclient._protocol.apis import APIS
from eosclient.errors import (
    ApiKey,
    CorruptRecordError,
    FatalError,
    OffsetOutOfRangeError,
    RetriableError,
)

A, B = TP("t", 0), TP("t", 1)


def raw(base: int, count: int, pid: int = -1, *, marker: int | None = None) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=pid >= 0, producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
        batch_size=1 << 30)
    if marker is None:
        for i in range(count):
            builder.append(i, 0, None, str(base + i).encode(), [])
    else:
        builder.append(0, 0, struct.pack(">hh", 0, marker), b"\x00" * 6, [])
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base)
    if marker is not None:
        struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | 0x20)
        struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    return bytes(buf)


class Data(NamedTuple):
    records: bytes
    last_stable_offset: int = 1 << 40
    high_watermark: int = 1 << 40
    error_code: int = 0
    aborted_transactions: Any = None


def assignment(policy: str = "earliest", *partitions: TP, check_crcs: bool = True) -> Assignment:
    a = Assignment(Isolation.READ_COMMITTED, max_held_bytes=1 << 20, max_partition_bytes=1000,
                   reset_policy=policy, check_crcs=check_crcs)
    a.replace(partitions or [A], committed=False)
    for state in a:
        state.seek(0)
    return a


def give(a: Assignment, tp: TP, data: Data, now: float = 0.0, room: int = 0) -> PartitionState:
    state = a.states[tp]
    state.completed = CompletedFetch(data, IndexTrust(), state.token, room)
    a.feed_all(now, 0.5)
    return state


def offsets(a: Assignment, limit: int = 100) -> list[int]:
    """One poll(): drain (outside the lock in the consumer), settle, raise if nothing came."""
    records, followups = a.drain(limit)
    error = a.settle(followups)
    if not records and error is not None:
        raise error
    return [r.offset for r in records]


def test_the_position_follows_delivery_not_fetching() -> None:
    a = assignment()
    state = give(a, A, Data(raw(0, 10)))
    assert state.ready.next_fetch == 10 and state.position == 0
    assert offsets(a, 3) == [0, 1, 2] and state.position == 3
    assert offsets(a) == list(range(3, 10)) and state.position == 10


def test_records_carry_their_partition_and_fields() -> None:
    a = assignment()
    give(a, A, Data(raw(5, 1)))
    [record], _ = a.drain(10)  # no follow-ups: nothing rewound or failed
    assert (record.topic, record.partition, record.offset, record.value, record.key,
            record.headers) == ("t", 0, 5, b"5", None, ())


def test_held_transactional_data_keeps_the_position_until_its_marker() -> None:
    a = assignment()
    state = give(a, A, Data(raw(0, 2) + raw(2, 3, pid=7) + raw(5, 1)))
    assert offsets(a) == [0, 1] and state.position == 2  # 2..4 wait for pid 7's marker
    give(a, A, Data(raw(6, 1, pid=7, marker=1)))
    assert offsets(a) == [2, 3, 4, 5] and state.position == 7


def test_nothing_at_or_past_the_lso_is_taken_in() -> None:
    a = assignment()
    state = give(a, A, Data(raw(0, 2) + raw(2, 2), last_stable_offset=2))
    assert offsets(a) == [0, 1] and state.filter.fetch_offset == 2


def test_partitions_take_turns_and_max_records_holds() -> None:
    a = assignment("earliest", A, B)
    give(a, A, Data(raw(0, 4)))
    give(a, B, Data(raw(0, 4)))
    first, _ = a.drain(6)
    assert [(r.partition, r.offset) for r in first] == [(0, 0), (0, 1), (0, 2), (0, 3),
                                                        (1, 0), (1, 1)]
    give(a, A, Data(raw(4, 4)))
    second, _ = a.drain(3)
    assert [(r.partition, r.offset) for r in second] == [(1, 2), (1, 3), (0, 4)]


def test_a_corrupt_batch_fails_the_partition_at_its_offset_until_a_seek() -> None:
    a = assignment()
    bad = bytearray(raw(2, 2))
    bad[-1] ^= 0xFF
    state = give(a, A, Data(raw(0, 2) + bytes(bad) + raw(4, 1)))
    assert state.ready.blocked and not state.fetchable(0.0, 1000) and state.position == 0
    assert offsets(a) == [0, 1] and state.position == 2  # the good batch before it first
    assert state.phase is Phase.FAILED
    for _ in range(2):  # then the error, on every poll
        with pytest.raises(CorruptRecordError) as raised:
            offsets(a)
        assert (raised.value.topic, raised.value.partition, raised.value.offset) == ("t", 0, 2)
    assert state.position == 2
    state.seek(4)
    assert state.phase is Phase.FETCHING and state.error is None and offsets(a) == []


def test_records_fetched_before_a_failure_are_still_delivered() -> None:
    a = assignment()
    give(a, A, Data(raw(0, 2)))
    bad = bytearray(raw(2, 2))
    bad[-1] ^= 0xFF
    state = give(a, A, Data(bytes(bad)))
    assert state.position == 0
    assert offsets(a) == [0, 1] and state.position == 2
    with pytest.raises(CorruptRecordError):
        offsets(a)


def test_check_crcs_off_reads_past_markers_whose_crc_is_wrong() -> None:
    # librdkafka's mock writes its COMMIT markers with wrong CRCs: the partition failed at the
    # first marker, and nothing of a transaction was ever delivered.
    marker = bytearray(raw(3, 1, pid=7, marker=1))
    struct.pack_into(">I", marker, 17, 0)
    answer = Data(raw(0, 3, pid=7) + bytes(marker) + raw(4, 1))
    checked = assignment()
    give(checked, A, answer)
    with pytest.raises(CorruptRecordError, match=r"check\.crcs=False") as raised:
        offsets(checked)
    assert raised.value.offset == 3
    unchecked = assignment(check_crcs=False)
    state = give(unchecked, A, answer)
    assert offsets(unchecked) == [0, 1, 2, 4] and state.position == 5


def test_offset_out_of_range_resets_per_policy() -> None:
    a = assignment("latest")
    state = give(a, A, Data(b"", error_code=1))
    assert (state.phase, state.reset_to, state.position) == (Phase.RESET, "latest", None)
    a = assignment("none")
    state = give(a, A, Data(b"", error_code=1))
    with pytest.raises(OffsetOutOfRangeError, match="t-0 at offset 0"):
        offsets(a)


def test_out_of_range_on_a_prefetch_delivers_what_was_fetched_first() -> None:
    """The Java rule: an OFFSET_OUT_OF_RANGE acts only once the position reached the offset
    that failed; records fetched before it are delivered, never dropped by the reset."""
    for policy in ("latest", "none"):
        a = assignment(policy)
        state = give(a, A, Data(raw(0, 5)))
        state = give(a, A, Data(b"", error_code=1), now=10.0)  # the prefetch at offset 5 failed
        assert state.phase is Phase.FETCHING and state.retry_at == 10.5
        assert offsets(a, 3) == [0, 1, 2] and offsets(a) == [3, 4] and state.position == 5
        state = give(a, A, Data(b"", error_code=1))  # fetched again at the position: act
        if policy == "latest":
            assert (state.phase, state.reset_to) == (Phase.RESET, "latest")
        else:
            with pytest.raises(OffsetOutOfRangeError, match="t-0 at offset 5"):
                offsets(a)


def test_a_retriable_fetch_error_backs_off_and_asks_for_metadata() -> None:
    a = assignment()
    state = give(a, A, Data(b"", error_code=6), now=10.0)  # NOT_LEADER_OR_FOLLOWER
    assert state.phase is Phase.FETCHING and state.retry_at == 10.5 and a.stale_leaders
    assert not state.fetchable(10.0, 1000) and state.fetchable(10.5, 1000)


def test_a_fatal_fetch_error_names_the_partition() -> None:
    a = assignment()
    give(a, A, Data(b"", error_code=29))  # TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(FatalError, match="t-0 at offset 0"):
        offsets(a)


def test_a_failed_partition_raises_until_sought_and_a_dropped_one_never_again() -> None:
    # poll() asks every time whether a partition failed: answered from the ones that did, not
    # by a pass over every partition; a seek, or the partition leaving the assignment, ends it
    a = assignment("earliest", A, B)
    give(a, A, Data(b"", error_code=29))  # TOPIC_AUTHORIZATION_FAILED
    give(a, B, Data(b"", error_code=29))
    for _ in range(2):
        with pytest.raises(FatalError, match="t-0"):
            offsets(a)
    a.states[A].seek(0)
    with pytest.raises(FatalError, match="t-1"):
        offsets(a)
    a.replace([A], committed=False)
    assert offsets(a) == []


def test_an_answer_for_a_position_sought_away_from_is_dropped() -> None:
    a = assignment()
    state = a.states[A]
    stale = CompletedFetch(Data(raw(0, 3)), IndexTrust(), state.token)
    state.seek(100)
    state.completed = stale
    a.feed_all(0.0, 0.1)
    assert offsets(a) == [] and state.position == 100


def test_a_batch_larger_than_the_fetch_size_grows_it() -> None:
    a = assignment()
    state = give(a, A, Data(raw(0, 3)[:40]))  # a partial batch only
    assert state.max_bytes == 2000 and state.position == 0


def test_a_batch_cut_at_the_limit_grows_the_fetch_size_when_the_room_says_so() -> None:
    a = assignment()
    state = give(a, A, Data(raw(0, 3)[:40]), room=40)  # the broker stopped at its limit
    assert state.max_bytes == 2000 and state.phase is Phase.FETCHING


def lying(batch: bytes, length: int) -> bytes:
    """``batch`` with its length field (not covered by the CRC) set to ``length``."""
    out = bytearray(batch)
    struct.pack_into(">i", out, 8, length)
    return bytes(out)


@pytest.mark.parametrize("length", [2**31 - 1, 100_000_001])
def test_a_batch_claiming_more_than_any_answer_may_carry_is_corrupt(length: int) -> None:
    # It looked partial for ever: the fetch size doubled to its cap, then the same again.
    a = assignment()
    a.max_batch_bytes = 100_000_000
    a.replace([B], committed=False)  # a new partition takes the setting
    state = a.states[B]
    state.seek(7)
    data = lying(raw(7, 3), length)
    give(a, B, Data(data), room=len(data))  # even cut at the limit: it can never come whole
    with pytest.raises(CorruptRecordError, match="length field is corrupt") as raised:
        offsets(a)
    assert (raised.value.partition, raised.value.offset) == (1, 7)
    assert "receive.message.max.bytes" in str(raised.value) and state.phase is Phase.FAILED


def test_a_partial_batch_in_an_answer_that_had_room_for_more_is_corrupt() -> None:
    # A length field a little too large looked like a batch cut at the limit, for ever.
    a = assignment()
    good = raw(0, 2)
    state = give(a, A, Data(good + lying(raw(2, 2), 5000)), room=1000)
    assert offsets(a) == [0, 1]  # the whole batch before it first
    data = lying(raw(2, 2), 5000)
    give(a, A, Data(data), room=1000)  # len(data) < 1000: no limit cut it
    with pytest.raises(CorruptRecordError, match=r"sent \d+ and stopped") as raised:
        offsets(a)
    assert raised.value.offset == 2 and state.position == 2 and state.max_bytes == 1000


def test_the_ready_buffer_bounds_prefetching() -> None:
    a = assignment()
    state = give(a, A, Data(raw(0, 200)))
    assert state.ready.nbytes > 1000 and not state.fetchable(0.0, 1000)
    offsets(a, 200)
    assert state.ready.nbytes == 0 and state.fetchable(0.0, 1000)


def test_batches_are_fed_to_the_filter_as_records_are_asked_for() -> None:
    a = assignment()
    state = give(a, A, Data(raw(0, 3) + raw(3, 3) + raw(6, 3)))
    assert state.filter.fetch_offset == 0 and state.ready.next_fetch == 9
    assert offsets(a, 4) == [0, 1, 2, 3] and state.filter.fetch_offset == 6
    assert state.position == 4
    give(a, A, Data(raw(9, 1)))  # the next answer queues behind
    assert offsets(a) == [4, 5, 6, 7, 8, 9]


def test_a_poll_feeds_the_filter_runs_of_batches_holding_about_what_it_returns() -> None:
    # The filter was fed one batch per call: with one-record batches, each followed by its
    # marker (a transaction spread over 1,000 partitions), the calls were a third of the time.
    a = assignment()
    data = b"".join(raw(o, 1, pid=7) + raw(o + 1, 1, pid=7, marker=1) for o in range(0, 40, 2))
    state = give(a, A, Data(data))
    feeds: list[int] = []
    release = state.filter.release

    def spy(batches: list[Any], **kw: Any) -> Any:
        feeds.append(len(batches))
        return release(batches, **kw)

    state.filter.release = spy  # type: ignore[method-assign]
    assert offsets(a, 5) == [0, 2, 4, 6, 8] and state.filter.fetch_offset == 11
    # five data batches and the markers between them in one call; 8 waited for its marker,
    # fed with the next record's batch
    assert feeds == [9, 2]
    assert offsets(a, 100) == list(range(10, 40, 2)) and state.filter.fetch_offset == 40
    assert feeds == [9, 2, 29]


def test_batches_at_or_past_the_lso_are_not_taken_in_and_fetched_again() -> None:
    a = assignment()
    state = give(a, A, Data(raw(0, 2) + raw(2, 2) + raw(4, 2), last_stable_offset=3))
    assert state.ready.next_fetch == 2 and offsets(a) == [0, 1]
    give(a, A, Data(raw(2, 2) + raw(4, 2), last_stable_offset=6))
    assert offsets(a) == [2, 3, 4, 5]


def test_a_rewind_after_scanning_for_markers_refetches_and_drops_the_fetch_under_way() -> None:
    a = Assignment(Isolation.READ_COMMITTED, max_held_bytes=1, max_partition_bytes=1000,
                   reset_policy="earliest")
    a.replace([A], committed=False)
    state = a.states[A]
    state.seek(0)
    # pid 7's batch is held; pid 8's would pass max_held_bytes: the filter scans for pid 7's
    # marker, dropping what it reads, then rewinds to the first dropped batch (1).
    give(a, A, Data(raw(0, 1, pid=7) + raw(1, 1, pid=8) + raw(2, 1, pid=7, marker=1)
                    + raw(3, 1)))
    token = state.token
    assert offsets(a) == [0]
    assert state.token == token + 1 and state.ready.next_fetch == 1 and state.position == 1


def test_reassigning_keeps_the_state_of_kept_partitions() -> None:
    a = assignment("earliest", A)
    kept = a.states[A]
    a.replace([B, A], committed=True)
    assert a.states[A] is kept and a.states[B].phase is Phase.COMMITTED
    a.replace([], committed=True)
    assert a.states == {}


def metadata_with(topics: dict[str, int | int]) -> Metadata:
    cls = APIS[ApiKey.METADATA].response
    topic = cls.fields["topics"].data_class
    part = topic.fields["partitions"].data_class
    m = Metadata(max_age=300, backoff=0.1)
    m.on_response(cls(brokers=[], cluster_id="c", controller_id=1, throttle_time_ms=0, topics=[
        topic(error_code=0 if n >= 0 else -n, name=name, is_internal=False, partitions=[
            part(error_code=0, partition_index=p, leader_id=1, leader_epoch=0, replica_nodes=[1],
                 isr_nodes=[1], offline_replicas=[]) for p in range(max(n, 0))])
        for name, n in topics.items()]), 0.0)
    return m


def test_missing_names_an_unknown_topic_or_partition() -> None:
    m = metadata_with({"t": 2, "gone": -3})
    assert missing([A, B], m) is None
    error = missing([TP("gone", 0)], m)
    assert isinstance(error, RetriableError) and error.code == 3 and "'gone'" in str(error)
    error = missing([TP("t", 2)], m)
    assert error is not None and "no partition 2" in str(error)


# -- poll_batch(): the same records and positions as columns -----------------------------------


def _answers() -> list[Data]:
    """Plain data, a transaction held until its marker, an aborted one, then more plain data."""
    return [Data(raw(0, 3) + raw(3, 4, pid=7) + raw(7, 2)),
            Data(raw(9, 1, pid=7, marker=1) + raw(10, 3, pid=8) + raw(13, 1, pid=8, marker=0)),
            Data(raw(14, 5))]


def _step(a: Assignment, columns: bool, limit: int) -> list[tuple[int, int, bytes | None]]:
    """One poll() or poll_batch(): (partition, offset, value) of what it delivered."""
    if not columns:
        records, followups = a.drain(limit)
        a.settle(followups)
        return [(r.partition, r.offset, r.value) for r in records]
    by_partition, followups = a.drain_columns(limit)
    a.settle(followups)
    assert all(len(c) for c in by_partition.values())  # partitions without records left out
    return [(tp.partition, o, v) for tp, c in by_partition.items()
            for o, v in zip(c.offsets, c.values, strict=True)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 6)), min_size=1, max_size=30))
def test_columns_deliver_the_same_records_and_positions_as_records(
        steps: list[tuple[bool, int]]) -> None:
    runs = []
    for mixed in (False, True):
        a = assignment("earliest", A, B)
        answers = {tp: _answers() for tp in (A, B)}
        seen: list[tuple[int, int, bytes | None]] = []
        positions = []
        for columns, limit in steps:
            for tp, queue in answers.items():
                if queue and not a.states[tp].ready.has_records:
                    give(a, tp, queue.pop(0))
            got = _step(a, columns and mixed, limit)
            assert len(got) <= limit
            seen += got
            positions.append((a.states[A].position, a.states[B].position))
            for tp in (A, B):  # the position never passes a record not yet delivered
                delivered = [o for p, o, _ in seen if p == tp.partition]
                assert a.states[tp].position > max(delivered, default=-1)
        runs.append((seen, positions))
    assert runs[0] == runs[1]
    assert all(v == str(o).encode() for _, o, v in runs[1][0])
    assert not {o for _, o, _ in runs[1][0]} & {10, 11, 12}  # pid 8 aborted


def test_columns_carry_every_field_and_convert_to_records_and_arrow() -> None:
    a = assignment()
    give(a, A, Data(raw(5, 3)))
    by_partition, _ = a.drain_columns(10)
    [(tp, cols)] = by_partition.items()
    assert tp == A and (cols.topic, cols.partition) == ("t", 0)
    assert (cols.offsets, cols.keys, cols.values, cols.headers) == (
        [5, 6, 7], [None] * 3, [b"5", b"6", b"7"], [()] * 3)
    assert cols.next_offset == 8 == a.states[A].position
    assert [tuple(r) for r in cols.records()] == [
        ("t", 0, o, None, str(o).encode(), (), t) for o, t in zip(cols.offsets, cols.timestamps,
                                                                 strict=True)]
    table = cols.to_arrow()
    assert table.column_names == ["offset", "key", "value", "timestamp", "headers"]
    assert table.column("offset").to_pylist() == [5, 6, 7]
    assert table.column("value").to_pylist() == [b"5", b"6", b"7"]
    assert table.column("headers").to_pylist() == [[], [], []]


def test_a_corrupt_batch_fails_poll_batch_as_it_fails_poll() -> None:
    a = assignment()
    bad = bytearray(raw(2, 2))
    bad[-1] ^= 0xFF
    state = give(a, A, Data(raw(0, 2) + bytes(bad)))
    cols, followups = a.drain_columns(100)
    assert a.settle(followups) is not None and cols[A].offsets == [0, 1]
    assert state.position == 2 and state.phase is Phase.FAILED
    cols, followups = a.drain_columns(100)
    assert not cols and isinstance(a.settle(followups), CorruptRecordError)


def test_records_that_do_not_parse_under_a_good_crc_deliver_none_of_their_feed() -> None:
    # The CRC matches (recomputed) but the last record's length lies: the filter seeks back
    # and the records of that batch are not delivered, in either form.
    for columns in (False, True):
        a = assignment()
        bad = bytearray(raw(2, 3))
        bad[-8] ^= 0x40  # inside the last record: its fields no longer end where they should
        struct.pack_into(">I", bad, 17, calc_crc32c(memoryview(bad)[21:]))
        state = give(a, A, Data(raw(0, 2) + bytes(bad)))
        got = _step(a, columns, 100)
        assert [o for _, o, _ in got] == [0, 1] and state.position == 2, columns
        assert isinstance(state.error, CorruptRecordError) and state.error.offset == 2
