"""The read_committed filter, sans-IO: hand-built batches and Fetch responses in, records out.

Every record's value is its offset, so a test reads as the offsets it expects. The property test
at the end runs the filter against a simulated broker in three styles: Kafka's (an exact
aborted-transactions index), noida-db's (every abort ever listed, aborted data left out) and
Tansu's (no index; a fenced instance's records may stay unmarked, and its late writes land).
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from eosclient._core.decode import RecordBatch, decode_batches
from eosclient._core.isolation import IndexTrust, Isolation, PartitionFilter
from eosclient._core.types import TopicPartition

TP = TopicPartition("t", 0)


class Aborted(NamedTuple):
    producer_id: int
    first_offset: int


def raw(base: int, count: int, pid: int = -1, *, marker: int | None = None,
        epoch: int = 0) -> bytes:
    """A batch of ``count`` records at ``base`` (values are offsets), or a control batch."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=pid >= 0, producer_id=pid,
        producer_epoch=epoch if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
        batch_size=1 << 30)
    if marker is None:
        for i in range(count):
            builder.append(i, 0, None, str(base + i).encode(), [])
    else:
        builder.append(0, 0, struct.pack(">hh", 0, marker), b"\x00\x00\x00\x00\x00\x00", [])
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base)
    if marker is not None:  # the control flag: set by hand, the builder has no way to
        struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | 0x20)
        struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def one(data: bytes) -> RecordBatch:
    [b] = decode_batches(data, TP).batches
    return b


def data(base: int, pid: int, count: int = 1, *, epoch: int = 0) -> RecordBatch:
    return one(raw(base, count, pid, epoch=epoch))


def plain(base: int, count: int = 1) -> RecordBatch:
    return one(raw(base, count))


def commit(offset: int, pid: int, *, epoch: int = 0) -> RecordBatch:
    return one(raw(offset, 1, pid, marker=1, epoch=epoch))


def abort(offset: int, pid: int, *, epoch: int = 0) -> RecordBatch:
    return one(raw(offset, 1, pid, marker=0, epoch=epoch))


def feed(f: PartitionFilter, batches: list[RecordBatch], lso: int | None = None,
         aborted: list[tuple[int, int]] | None = None) -> list[int]:
    index = None if aborted is None else [Aborted(*a) for a in aborted]
    return [r.offset for r in f.feed(batches, last_stable_offset=lso, aborted_transactions=index)]


def proven_trust() -> IndexTrust:
    trust = IndexTrust()
    trust.proven = True
    return trust


# --- marker mode -------------------------------------------------------------------------------


def test_plain_batches_pass_and_control_batches_never_do() -> None:
    f = PartitionFilter(TP)
    assert feed(f, [plain(0, 2), commit(2, 5), abort(3, 6), plain(4)], lso=5) == [0, 1, 4]
    assert f.position == f.fetch_offset == 5


def test_a_transaction_is_held_until_its_commit() -> None:
    f = PartitionFilter(TP)
    assert feed(f, [data(0, 1, 2)], lso=2) == []
    assert (f.position, f.fetch_offset, f.held_records) == (0, 2, 2)
    assert f.held_bytes > 0
    assert feed(f, [commit(2, 1)], lso=3) == [0, 1]
    assert (f.position, f.held_records, f.held_bytes) == (3, 0, 0)


def test_an_aborted_transaction_is_dropped_and_the_position_moves_past_it() -> None:
    f = PartitionFilter(TP)
    assert feed(f, [data(0, 1, 3), abort(3, 1)], lso=4) == []
    assert f.position == 4


def test_a_held_batch_blocks_later_records_of_everyone_to_keep_offset_order() -> None:
    f = PartitionFilter(TP)
    assert feed(f, [data(0, 1), data(1, 2), commit(2, 2), plain(3)], lso=4) == []
    assert f.position == 0  # a restart from the committed position re-reads the held batches
    assert feed(f, [commit(4, 1)], lso=5) == [0, 1, 3]


def test_overlapping_transactions_of_several_producers() -> None:
    f = PartitionFilter(TP)
    log = [data(0, 1), data(1, 2), data(2, 3), data(3, 1), data(4, 2), abort(5, 2), data(6, 3),
           commit(7, 1), plain(8), commit(9, 3)]
    assert feed(f, log, lso=10) == [0, 2, 3, 6, 8]


def test_markers_with_no_data_change_nothing() -> None:
    # AddPartitionsToTxn then no Produce: the coordinator still writes a marker.
    f = PartitionFilter(TP)
    assert feed(f, [commit(0, 1), abort(1, 2), plain(2), data(3, 1), commit(4, 1)], lso=5) == [2, 3]


def test_a_transaction_spanning_fetch_responses() -> None:
    f = PartitionFilter(TP)
    assert feed(f, [data(0, 1), plain(1)], lso=2) == []
    assert feed(f, [data(2, 1, 2)], lso=4) == []
    assert feed(f, [data(4, 2), commit(5, 1)], lso=6) == [0, 1, 2, 3]
    assert feed(f, [abort(6, 2)], lso=7) == []
    assert f.position == 7


def test_duplicate_markers_do_not_resolve_the_next_transaction() -> None:
    f = PartitionFilter(TP)
    log = [data(0, 1), abort(1, 1), abort(2, 1), data(3, 1), commit(4, 1), commit(5, 1)]
    assert feed(f, log, lso=6) == [3]


def test_records_at_or_past_the_lso_are_not_taken_in() -> None:
    f = PartitionFilter(TP)
    assert feed(f, [plain(0), data(1, 1), plain(2)], lso=1) == [0]
    assert f.fetch_offset == 1  # fetched again once the LSO moves
    assert feed(f, [data(1, 1), plain(2), commit(3, 1)], lso=4) == [1, 2]


def test_a_response_overlapping_the_last_one_is_not_taken_twice() -> None:
    f = PartitionFilter(TP)
    assert feed(f, [plain(0, 3)], lso=3) == [0, 1, 2]
    assert feed(f, [plain(0, 3), plain(3)], lso=4) == [3]


def test_the_first_batch_may_start_before_the_fetch_offset() -> None:
    f = PartitionFilter(TP, start=2)
    assert feed(f, [data(0, 1, 4), commit(4, 1)], lso=5) == [2, 3]


def test_an_unknown_control_type_is_skipped() -> None:
    f = PartitionFilter(TP)
    assert feed(f, [data(0, 1), one(raw(1, 1, 1, marker=4)), commit(2, 1)], lso=3) == [0]


def test_seek_forgets_what_is_held() -> None:
    f = PartitionFilter(TP)
    feed(f, [data(0, 1)], lso=1)
    f.seek(10)
    assert (f.position, f.fetch_offset, f.held_records) == (10, 10, 0)
    assert feed(f, [plain(10)], lso=11) == [10]


# --- the index ---------------------------------------------------------------------------------


def test_no_index_never_delivers_aborted_records() -> None:
    # Tansu: no aborted_transactions at all; the markers alone are enough.
    f = PartitionFilter(TP)
    assert feed(f, [data(0, 1), data(1, 2), abort(2, 1), commit(3, 2)], lso=4, aborted=[]) == [1]
    assert not f.trust.proven


def test_index_mode_only_after_the_index_proves_itself() -> None:
    f = PartitionFilter(TP)
    # A listed abort is not believed yet: producer 2's batch still waits for its marker.
    assert feed(f, [data(0, 2)], lso=1, aborted=[(1, 5)]) == []
    assert not f.trust.proven
    assert feed(f, [commit(1, 2), data(2, 1), abort(3, 1)], lso=4, aborted=[(1, 2)]) == [0]
    assert f.trust.proven  # the index listed producer 1's abort, its marker confirmed it
    # Now a producer the index does not list is released below the LSO without its marker.
    assert feed(f, [data(4, 3), data(5, 1)], lso=6, aborted=[(1, 5)]) == [4]
    assert f.position == 6


def test_unsorted_index_of_several_producers() -> None:
    f = PartitionFilter(TP, trust=proven_trust())
    log = [data(0, 1), data(1, 2), data(2, 3), data(3, 2), abort(4, 2), data(5, 1), abort(6, 3),
           plain(7), commit(8, 1)]
    assert feed(f, log, lso=9, aborted=[(3, 2), (2, 1)]) == [0, 5, 7]
    assert f.trust.proven and f.trust.violations == 0


def test_index_mode_releases_a_transaction_whose_marker_lies_past_the_lso() -> None:
    # Producer 2's transaction at 1 is open (LSO 1); producer 1's marker comes after it.
    marker_mode = PartitionFilter(TP)
    index_mode = PartitionFilter(TP, trust=proven_trust())
    assert feed(marker_mode, [data(0, 1)], lso=1, aborted=[]) == []
    assert feed(index_mode, [data(0, 1)], lso=1, aborted=[]) == [0]


def test_the_index_is_not_used_when_the_lso_is_unknown() -> None:
    f = PartitionFilter(TP, trust=proven_trust())
    assert feed(f, [data(0, 1)], lso=-1, aborted=[]) == []
    assert feed(f, [commit(1, 1)], lso=None, aborted=[]) == [0]


def test_stale_index_entries_do_not_drop_a_later_committed_transaction() -> None:
    # noida-db lists every aborted transaction of the partition, even those that ended before
    # the fetch offset. confluent-kafka and kafka-python, started at 6 here, deliver nothing.
    f = PartitionFilter(TP, start=6, trust=proven_trust())
    assert feed(f, [data(6, 1, 5)], lso=11, aborted=[(1, 0)]) == []  # waits for its marker
    assert feed(f, [commit(11, 1), data(12, 1)], lso=13, aborted=[(1, 0)]) == [6, 7, 8, 9, 10, 12]
    assert f.trust.violations == 0


def test_an_aborted_transaction_begun_before_the_start_is_still_dropped() -> None:
    # Kafka lists it because it reaches the fetch offset; it waits for its marker all the same.
    f = PartitionFilter(TP, start=3, trust=proven_trust())
    assert feed(f, [data(3, 1), data(4, 2)], lso=5, aborted=[(1, 0)]) == []
    assert feed(f, [abort(5, 1)], lso=6, aborted=[(1, 0)]) == [4]


def test_a_stale_entry_after_its_marker_was_read_is_ignored() -> None:
    f = PartitionFilter(TP, trust=proven_trust())
    assert feed(f, [data(0, 1), abort(1, 1)], lso=2, aborted=[(1, 0)]) == []
    assert feed(f, [data(2, 1)], lso=3, aborted=[(1, 0)]) == [2]


def test_an_index_contradicted_by_a_marker_is_no_longer_trusted() -> None:
    trust = proven_trust()
    f = PartitionFilter(TP, trust=trust)
    # It lists producer 1 as aborted, but producer 1 commits: the index is wrong.
    assert feed(f, [data(0, 1), commit(1, 1)], lso=2, aborted=[(1, 0)]) == []
    assert (trust.proven, trust.violations) == (False, 1)
    assert feed(f, [data(2, 2)], lso=3, aborted=[]) == []  # back to waiting for markers
    assert feed(f, [commit(3, 2)], lso=4, aborted=[]) == [2]


def test_an_abort_the_index_did_not_list_revokes_the_trust() -> None:
    trust = proven_trust()
    f = PartitionFilter(TP, trust=trust)
    assert feed(f, [data(0, 1)], lso=1, aborted=[]) == [0]  # released on the index's word
    feed(f, [abort(1, 1)], lso=2, aborted=[])
    assert (trust.proven, trust.violations) == (False, 1)


def test_the_trust_is_shared_by_a_brokers_partitions() -> None:
    trust = IndexTrust()
    a = PartitionFilter(TopicPartition("t", 0), trust=trust)
    b = PartitionFilter(TopicPartition("t", 1), trust=trust)
    feed(a, [data(0, 1), abort(1, 1)], lso=2, aborted=[(1, 0)])
    assert feed(b, [data(0, 2)], lso=1, aborted=[]) == [0]


# --- epochs: a fenced instance's writes with no marker (Tansu) ---------------------------------


def test_records_abandoned_by_a_fenced_epoch_are_not_committed_by_the_next_one() -> None:
    # The fenced instance's Produce raced the new instance's InitProducerId: no ABORT marker.
    f = PartitionFilter(TP)
    log = [data(0, 1, 2), data(2, 1, 4, epoch=1), commit(6, 1, epoch=1), plain(7)]
    assert feed(f, log, lso=8) == [2, 3, 4, 5, 7]


def test_a_fenced_epochs_write_after_the_new_one_is_dropped() -> None:
    f = PartitionFilter(TP)
    assert feed(f, [data(0, 1, 2, epoch=1), data(2, 1, 2)], lso=4) == []
    assert feed(f, [commit(4, 1, epoch=1), data(5, 1), plain(6)], lso=7) == [0, 1, 6]
    assert f.position == 7


def test_a_fencing_abort_marker_dates_a_later_write_of_the_old_epoch() -> None:
    f = PartitionFilter(TP)
    log = [data(0, 1), abort(1, 1, epoch=1), data(2, 1), plain(3)]
    assert feed(f, log, lso=4) == [3]


def test_a_marker_of_the_next_epoch_still_ends_its_transaction() -> None:
    # KIP-890 (transaction version 2) writes the marker under the bumped epoch.
    f = PartitionFilter(TP)
    log = [data(0, 1, 2), commit(2, 1, epoch=1), data(3, 1, epoch=1), commit(4, 1, epoch=2)]
    assert feed(f, log, lso=5) == [0, 1, 3]


def test_a_seek_back_forgets_the_newer_epoch() -> None:
    f = PartitionFilter(TP)
    log = [data(0, 1), commit(1, 1), data(2, 1, epoch=1), commit(3, 1, epoch=1)]
    assert feed(f, log, lso=4) == [0, 2]
    f.seek(0)
    assert feed(f, log, lso=4) == [0, 2]


def test_scanning_drops_what_a_newer_epoch_abandoned() -> None:
    f = PartitionFilter(TP, max_held_bytes=1)
    assert feed(f, [data(0, 1), plain(1)], lso=2) == []
    assert f.scanning
    assert feed(f, [data(2, 1, epoch=1), commit(3, 1, epoch=1)], lso=4) == []
    assert not f.scanning and f.fetch_offset == 1  # rewound to the first dropped batch
    assert feed(f, [plain(1), data(2, 1, epoch=1), commit(3, 1, epoch=1)], lso=4) == [1, 2]


# --- memory ------------------------------------------------------------------------------------


def test_past_the_budget_it_scans_for_markers_and_rewinds() -> None:
    f = PartitionFilter(TP, max_held_bytes=1)
    assert feed(f, [data(0, 1), plain(1), plain(2)], lso=3) == []
    assert f.scanning and f.held_records == 1 and f.fetch_offset == 3
    assert f.position == 0
    assert feed(f, [data(3, 2), commit(4, 1), plain(5)], lso=6) == [0]
    assert not f.scanning and f.fetch_offset == 1  # rewound to the first dropped batch
    # Producer 2 is held now, and the budget makes the filter scan past it again.
    assert feed(f, [plain(1), plain(2), data(3, 2), commit(4, 1), plain(5)], lso=6) == [1, 2]
    assert f.scanning and f.held_records == 1 and f.position == 3


def test_batches_the_index_calls_aborted_are_never_held() -> None:
    # Producer 2's transaction began before the filter's start: it waits for its marker.
    f = PartitionFilter(TP, start=5, trust=proven_trust())
    assert feed(f, [data(5, 2), data(6, 1, 50)], lso=56, aborted=[(2, 0), (1, 6)]) == []
    assert f.held_records == 1


# --- read_uncommitted --------------------------------------------------------------------------


def test_read_uncommitted_delivers_all_but_control_records() -> None:
    f = PartitionFilter(TP, isolation=Isolation.READ_UNCOMMITTED)
    log = [data(0, 1), abort(1, 1), data(2, 2), plain(3)]
    assert feed(f, log, lso=0) == [0, 2, 3]
    assert f.fetch_offset == f.position == 4


# --- property: a simulated broker --------------------------------------------------------------

Style = Literal["kafka", "noida", "tansu"]


@dataclass
class Log:
    """A partition written by several producers, with what a correct reader must deliver."""

    style: Style = "kafka"
    raw: list[tuple[RecordBatch, bytes]] = field(default_factory=list)
    end: int = 0
    epochs: dict[int, int] = field(default_factory=dict)  # pid -> its current epoch
    open: dict[int, list[int]] = field(default_factory=dict)  # pid -> offsets of its open txn
    committed: list[int] = field(default_factory=list)
    aborted: list[tuple[int, int]] = field(default_factory=list)  # (pid, first offset)
    aborted_data: set[int] = field(default_factory=set)  # base offsets of aborted batches

    def append(self, data: bytes) -> None:
        batch = one(data)
        self.raw.append((batch, data))
        self.end = batch.last_offset + 1

    def write(self, pid: int, count: int) -> None:
        self.append(raw(self.end, count, pid, epoch=self.epochs.get(pid, 0)))
        if pid < 0:
            self.committed += range(self.end - count, self.end)
        else:
            self.open.setdefault(pid, []).extend(range(self.end - count, self.end))

    def finish(self, pid: int, committed: bool) -> None:
        offsets = self.open.pop(pid, [])
        if committed:
            self.committed += offsets
        elif offsets:
            self.aborted.append((pid, offsets[0]))
            self.aborted_data |= set(offsets)
        self.append(raw(self.end, 1, pid, marker=int(committed), epoch=self.epochs.get(pid, 0)))

    def fence(self, pid: int) -> None:
        """A new instance of ``pid``'s transactional.id (InitProducerId), which writes at once.
        Kafka and noida-db abort the open transaction with a marker of the new epoch; Tansu,
        when the old instance's Produce raced the InitProducerId, writes none."""
        offsets = self.open.pop(pid, [])
        self.epochs[pid] = self.epochs.get(pid, 0) + 1
        self.aborted_data |= set(offsets)
        if offsets and self.style != "tansu":
            self.aborted.append((pid, offsets[0]))
            self.append(raw(self.end, 1, pid, marker=0, epoch=self.epochs[pid]))
        self.write(pid, 1)

    def stale(self, pid: int, count: int) -> None:
        """A fenced instance's late write of its old epoch: only Tansu lets it land."""
        if self.style == "tansu" and self.epochs.get(pid, 0) > 0:
            self.append(raw(self.end, count, pid, epoch=self.epochs[pid] - 1))
            self.aborted_data |= set(range(self.end - count, self.end))

    @property
    def lso(self) -> int:
        return min((offsets[0] for offsets in self.open.values()), default=self.end)

    def fetch(self, offset: int, max_bytes: int, cut: int, style: Style,
              rng: random.Random) -> tuple[list[RecordBatch], list[tuple[int, int]]]:
        """A Fetch from ``offset``: whole batches below the LSO up to ``max_bytes`` (at least
        one), maybe a partial one after them, and the index in the broker's style."""
        lso = self.lso
        chosen = [(b, d) for b, d in self.raw if offset <= b.last_offset < lso]
        if style == "noida":  # it leaves aborted data out of read_committed responses
            chosen = [(b, d) for b, d in chosen if b.base_offset not in self.aborted_data]
        out, size = [], 0
        for _, d in chosen:
            if out and size + len(d) > max_bytes:
                break
            out.append(d)
            size += len(d)
        rest = chosen[len(out):]
        payload = b"".join(out) + (rest[0][1][:cut] if rest else b"")
        batches = decode_batches(payload, TP).batches
        upper = batches[-1].last_offset + 1 if batches else lso
        index = [] if style == "tansu" else [
            (pid, first) for pid, first in self.aborted if first < upper
            and (style == "noida" or self._marker_after(pid, first) >= offset)]
        rng.shuffle(index)
        return batches, index

    def _marker_after(self, pid: int, first: int) -> int:
        return min(b.base_offset for b, _ in self.raw
                   if b.is_control and b.producer_id == pid and b.base_offset > first)


Op = tuple[str, int, int]
ops_st = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, 3), st.integers(1, 4)),
    st.tuples(st.just("plain"), st.just(-1), st.integers(1, 3)),
    st.tuples(st.sampled_from(["commit", "abort"]), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("fence"), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("stale"), st.integers(0, 3), st.integers(1, 2)),
), min_size=1, max_size=40)


def apply(log: Log, op: Op) -> None:
    kind, pid, count = op
    if kind == "write":
        log.write(1000 + pid, count)
    elif kind == "plain":
        log.write(-1, count)
    elif kind == "fence":
        log.fence(1000 + pid)
    elif kind == "stale":
        log.stale(1000 + pid, count)
    else:
        log.finish(1000 + pid, kind == "commit")


def read_all(f: PartitionFilter, log: Log, style: Style, max_bytes: int,
             rng: random.Random) -> list[int]:
    out: list[int] = []
    for _ in range(20_000):
        before = (f.fetch_offset, f.position)
        batches, index = log.fetch(f.fetch_offset, max_bytes, rng.randrange(0, 80), style, rng)
        out += [r.offset for r in f.feed(batches, last_stable_offset=log.lso,
                                         aborted_transactions=[Aborted(*a) for a in index])]
        if (f.fetch_offset, f.position) == before and not batches:
            return out
    raise AssertionError("no end")


@settings(deadline=None, max_examples=400)
@given(first=ops_st, second=ops_st, close=st.booleans(),
       style=st.sampled_from(["kafka", "noida", "tansu"]), proven=st.booleans(),
       max_bytes=st.integers(1, 400), budget=st.sampled_from([1, 150, 1 << 30]),
       seed=st.integers(0, 2**32))
def test_delivers_exactly_the_committed_records_in_offset_order(
    *, first: list[Op], second: list[Op], close: bool, style: Style, proven: bool, max_bytes: int,
    budget: int, seed: int,
) -> None:
    rng = random.Random(seed)
    log = Log(style=style)
    # ``proven``: another partition of the broker proved the index already (never for Tansu).
    trust = proven_trust() if proven and style != "tansu" else IndexTrust()
    f = PartitionFilter(TP, max_held_bytes=budget, trust=trust)
    for op in first:
        apply(log, op)
    out = read_all(f, log, style, max_bytes, rng)  # some transactions still open here
    for op in second:
        apply(log, op)
    if close:
        for pid in list(log.open):
            log.finish(pid, rng.random() < 0.5)
    out += read_all(f, log, style, max_bytes, rng)

    lso = log.lso
    expected = sorted(o for o in log.committed if o < lso)
    assert out == expected[:len(out)], "not the committed records in offset order"
    # Everything before the first record whose outcome is past the LSO must be out.
    undecided = [b.base_offset for b, _ in log.raw if b.is_transactional and not b.is_control
                 and b.base_offset < lso and _marker_offset(log, b) >= lso]
    horizon = min(undecided, default=lso)
    assert len(out) >= sum(1 for o in expected if o < horizon)
    if close:
        assert out == expected
    assert not set(out) & log.aborted_data
    assert trust.violations == 0


def _marker_offset(log: Log, batch: RecordBatch) -> int:
    return min((b.base_offset for b, _ in log.raw if b.is_control
                and b.producer_id == batch.producer_id and b.base_offset > batch.last_offset),
               default=1 << 62)
