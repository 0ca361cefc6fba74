"""read_committed as a pure filter: decoded batches of one partition in, committed records out.

Theory of operation
-------------------
KIP-98 gives a read_committed reader three facts. The *last stable offset* (LSO): every
transaction with data below it has ended, and nothing at or past it may be delivered. The
*control batches* in the log: one ABORT or COMMIT marker per producer per transaction, after the
transaction's data. And the broker's *aborted-transactions index*, sent with each Fetch response:
``(producer id, first offset)`` for every aborted transaction overlapping the fetched range.

Kafka's own clients (Java's ``CompletedFetch``, librdkafka, franz-go) trust the index alone: a
transactional batch whose producer is listed as aborted from an offset at or below the batch is
dropped until that producer's ABORT marker; everything else below the LSO is delivered at once.
A broker that sends no index (Tansu) makes them deliver aborted records. So this filter starts
by trusting only the markers:

* **Marker mode.** A producer's transactional batches are held until its marker: COMMIT releases
  them, ABORT drops them. Right on every broker; the cost is latency and memory, since a
  marker can lie past the LSO while another producer's transaction is open, and until then the
  held records wait.
* **Index mode.** Once a broker has *proved* its index (an ABORT marker arrived for a producer
  that the index had listed as aborted) the filter also follows the index, as Kafka's clients
  do: below the LSO a producer not listed as aborted has committed, so its batches are released
  without waiting for the marker. The proof is kept in an :class:`IndexTrust`, which the
  consumer shares between the partitions one broker leads. If the markers ever contradict the
  index (a COMMIT for a producer it listed, an ABORT for one it did not), the trust is revoked,
  counted in ``IndexTrust.violations``, and the filter goes back to marker mode (the records
  already released on the index's word cannot be taken back; a proven broker never did this in
  the tests).

Two index entries are not taken at their word, even in index mode. One whose producer's marker
this filter has already read after its first offset is stale (a duplicate, or noida-db, which
lists every abort the partition ever had): it is ignored, else it would drop the producer's next
transaction. And one whose first offset is before the filter's start (a seek, a rewind) cannot
be dated by any marker read here: Kafka lists such a transaction because it is still running at
the fetch offset, noida-db lists it even if it ended long before. Its producer waits for its
marker. Index-only clients drop that producer's next committed transaction on noida-db.

**Epochs.** A producer's transactional records are written under its current epoch, and a
new epoch is only handed out once the old one's transaction has ended (InitProducerId aborts
it, with a marker). So a data batch of a *newer* epoch than a producer's held batches means
that those were abandoned by a fenced instance, and one of an *older* epoch than the newest
seen is a fenced instance's late write: both are dropped as aborted. Kafka never writes either
shape; Tansu can (an InitProducerId racing a Produce of the old epoch leaves the old epoch's
records with no marker, and the new epoch's COMMIT would otherwise release them). A filter
that starts past the newer epoch's first batch cannot date the old records, which then wait
for the producer's next marker as before.

**Order.** Records are delivered in offset order, as Kafka delivers them: a held batch blocks
every later batch of the partition, whoever wrote it, until it is resolved. Delivering a later
committed record first would let a consumer commit an offset past records it has not yet seen.

**Positions.** ``fetch_offset`` is where the next Fetch starts: past every batch taken in.
``position`` is the offset of the next record the application would see: the first held
batch's, or ``fetch_offset`` when nothing is held. It moves past control batches and aborted
data, and it is the offset to commit: a restart from it re-reads whatever was held. Batches at or
past the LSO are not taken in; ``fetch_offset`` stops before them and they are fetched again.

**Memory.** ``held_bytes`` and ``held_records`` say what waits for a marker. Pausing the
partition when that grows would deadlock (the marker that frees the data is in the part not yet
fetched), so past ``max_held_bytes`` the filter *scans* instead: it keeps what it holds, drops
every new data batch, and reads on only for the markers of the producers it holds. When all of
them are resolved it rewinds ``fetch_offset`` to the first dropped batch, which is fetched again.
Memory stays bounded by ``max_held_bytes`` plus one batch; the dropped range is fetched twice.

read_uncommitted delivers every record of every non-control batch and ignores the rest.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable
from typing import Final, Protocol

from eosclient._core.decode import ConsumerRecord, ControlType, RecordBatch
from eosclient._core.types import TopicPartition

__all__ = [
    "DEFAULT_MAX_HELD_BYTES",
    "AbortedTransaction",
    "IndexTrust",
    "Isolation",
    "PartitionFilter",
    "Released",
]

DEFAULT_MAX_HELD_BYTES: Final = 32 * 1024 * 1024
"""Bytes of held batches past which a filter scans for markers instead of holding more."""

_UNKNOWN, _COMMITTED, _ABORTED = 0, 1, 2

Released = tuple[RecordBatch, int]
"""A batch the filter released, and the offset from which its records are delivered."""


class Isolation(enum.IntEnum):
    """The Fetch request's ``isolation_level``."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class AbortedTransaction(Protocol):
    """One entry of a Fetch response's ``aborted_transactions`` (kafka-python's shape)."""

    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...


class IndexTrust:
    """Whether one broker's aborted-transactions index has proved itself; shared per broker.

    Attributes:
        proven: An ABORT marker confirmed an abort the index listed, and nothing contradicted it.
        violations: How often the markers contradicted the index (each one revokes ``proven``).
    """

    __slots__ = ("proven", "violations")

    def __init__(self) -> None:
        self.proven = False
        self.violations = 0


class _Held:
    __slots__ = ("batch", "min_offset", "outcome")

    def __init__(self, batch: RecordBatch, outcome: int, min_offset: int) -> None:
        self.batch = batch
        self.outcome = outcome
        self.min_offset = min_offset


class PartitionFilter:
    """The read_committed (or read_uncommitted) filter of one partition. No I/O.

    Args:
        tp: The partition.
        isolation: read_committed (the default) or read_uncommitted.
        start: The offset the first Fetch starts at.
        max_held_bytes: Past this many bytes held for markers, scan instead of holding more.
        trust: The broker's :class:`IndexTrust`, shared by its partitions; a new one if None.
    """

    def __init__(self, tp: TopicPartition, *, isolation: Isolation = Isolation.READ_COMMITTED,
                 start: int = 0, max_held_bytes: int = DEFAULT_MAX_HELD_BYTES,
                 trust: IndexTrust | None = None) -> None:
        self.tp = tp
        self.isolation = isolation
        self.max_held_bytes = max_held_bytes
        self.trust = trust if trust is not None else IndexTrust()
        self.seek(start)

    @property
    def fetch_offset(self) -> int:
        """Where the next Fetch starts."""
        return self._fetch_offset

    @property
    def position(self) -> int:
        """The offset of the next record to deliver; the offset to commit."""
        return self._queue[0].min_offset if self._queue else self._fetch_offset

    @property
    def held_bytes(self) -> int:
        """Bytes of batches taken in and not yet delivered or dropped."""
        return self._held_bytes

    @property
    def held_records(self) -> int:
        """Records (markers excluded) taken in and not yet delivered or dropped."""
        return self._held_records

    @property
    def scanning(self) -> bool:
        """Whether the filter holds ``max_held_bytes`` and only reads on for markers."""
        return self._scan_from is not None

    def seek(self, offset: int) -> None:
        """Forget everything held and start again at ``offset`` (the trust is kept)."""
        self._fetch_offset = offset
        self._queue: deque[_Held] = deque()
        self._open: dict[int, list[_Held]] = {}  # producer id -> its held, unresolved batches
        self._held_bytes = self._held_records = 0
        self._scan_from: int | None = None
        self._since = offset  # markers before it were never read by this filter
        self._aborted: set[int] = set()  # producers the index lists as aborted, until the marker
        self._uncertain: set[int] = set()  # listed from before _since (module docstring)
        self._released: set[int] = set()  # producers released by the index, until the marker
        self._last_marker: dict[int, int] = {}  # producer id -> offset of its latest marker
        self._epoch: dict[int, int] = {}  # producer id -> the newest epoch read (data or marker)
        self._index: list[tuple[int, int]] = []  # this response's (first offset, producer id)
        self._index_pos = 0
        self._index_of: object = None  # the aborted_transactions object _index was sorted from

    def feed(self, batches: Iterable[RecordBatch], *, last_stable_offset: int | None = None,
             aborted_transactions: Iterable[AbortedTransaction] | None = None,
             ) -> list[ConsumerRecord]:
        """Take in one Fetch response's batches for this partition; return what may be delivered.

        :meth:`release` with the records decoded; see there.
        """
        return [record for batch, start in self.release(
                    batches, last_stable_offset=last_stable_offset,
                    aborted_transactions=aborted_transactions)
                for record in batch.records(start)]

    def release(self, batches: Iterable[RecordBatch], *, last_stable_offset: int | None = None,
                aborted_transactions: Iterable[AbortedTransaction] | None = None,
                ) -> list[Released]:
        """Take in one Fetch response's batches for this partition; return the batches that may
        be delivered, each with the offset its delivery starts at (undecoded: the caller decodes
        them into records or columns, and a batch whose records do not parse raises then).

        Args:
            batches: The decoded batches, in offset order.
            last_stable_offset: The response's LSO; None or negative if unknown (then nothing is
                released on the index's word). Ignored by read_uncommitted.
            aborted_transactions: The response's index, in any order; None or empty if absent.

        Returns:
            The batches now known committed (all data batches for read_uncommitted), in offset
            order, each with the offset its records are delivered from.

        Raises:
            CorruptRecordError: a control batch's marker does not parse (when it was decoded).
                The filter has taken in part of the response; seek before feeding it again.
        """
        if self.isolation is Isolation.READ_UNCOMMITTED:
            return self._feed_uncommitted(batches)
        known = last_stable_offset is not None and last_stable_offset >= 0
        lso = last_stable_offset if last_stable_offset is not None and known else 1 << 63
        if aborted_transactions is None or aborted_transactions is not self._index_of:
            # A new response: sort its index once. The same response fed batch by batch keeps
            # its sorted index and cursor (noida-db lists every abort ever: re-sorting per
            # batch made reading quadratic in the partition's history of aborts).
            self._index = sorted((a.first_offset, a.producer_id)
                                 for a in aborted_transactions or ())
            self._index_pos = 0
            self._index_of = aborted_transactions
        use_index = known and self.trust.proven
        out: list[Released] = []
        index = self._index
        # (The next entry's first offset, tested here: most batches begin no listed
        # transaction, and a call per batch was a tenth of the filter's time.)
        next_listed = index[self._index_pos][0] if self._index_pos < len(index) else 1 << 63
        for batch in batches:
            last = batch.last_offset
            if last < self._fetch_offset:
                continue  # already taken in (a response overlapping the last one)
            if last >= lso:
                break  # KIP-98: nothing at or past the LSO; fetched again once it moves
            start, self._fetch_offset = self._fetch_offset, last + 1
            if self._scan_from is not None:
                if self._scan(batch, out):
                    break  # rewound: the rest of this response is fetched again
                continue
            if next_listed <= last:
                self._take_index(last)
                next_listed = (index[self._index_pos][0] if self._index_pos < len(index)
                               else 1 << 63)
            if batch.is_control:
                self._on_marker(batch, out)
            else:
                if batch.is_transactional and self._fenced(batch, out):
                    continue  # a fenced instance's late write: dropped, as an abort would
                self._on_data(batch, self._classify(batch, use_index), start, out)
        return out

    # -- read_committed ----------------------------------------------------------------------

    def _take_index(self, offset: int) -> None:
        """Mark producers whose listed aborted transaction has begun by ``offset`` (Java's
        ``consumeAbortedTransactionsUpTo``)."""
        index, pos = self._index, self._index_pos
        while pos < len(index) and index[pos][0] <= offset:
            first, pid = index[pos]
            pos += 1
            if self._last_marker.get(pid, -1) >= first:
                continue  # its marker was read here: a stale or duplicate entry, ignored
            if first < self._since:
                # Begun before this filter started reading, so no marker of ours can date it:
                # Kafka lists only transactions that reach the fetch offset, noida-db lists every
                # abort ever (even ones that ended long before). Such a producer waits for its
                # marker; trusting the entry would drop its committed data.
                self._uncertain.add(pid)
            else:
                self._aborted.add(pid)
        self._index_pos = pos

    def _fenced(self, batch: RecordBatch, out: list[Released]) -> bool:
        """Apply a transactional data batch's epoch (module docstring, *Epochs*): True if the
        batch is older than its producer's newest epoch; if it is newer, the producer's held
        batches were abandoned and are dropped first."""
        pid, epoch = batch.producer_id, batch.producer_epoch
        newest = self._epoch.get(pid, epoch)
        if epoch < newest:
            return True
        self._epoch[pid] = epoch
        if epoch > newest and pid in self._open:
            self._resolve(pid, _ABORTED, out)
        return False

    def _classify(self, batch: RecordBatch, use_index: bool) -> int:
        if not batch.is_transactional:
            return _COMMITTED
        if not use_index:
            return _UNKNOWN
        pid = batch.producer_id
        if pid in self._aborted:
            return _ABORTED
        if pid in self._uncertain:
            return _UNKNOWN
        self._released.add(pid)  # below the LSO and not listed: committed, on the index's word
        return _COMMITTED

    def _on_data(self, batch: RecordBatch, outcome: int, start: int,
                 out: list[Released]) -> None:
        if outcome == _ABORTED:
            return  # dropping it changes no order: nothing to hold
        if not self._queue:
            if outcome == _COMMITTED:  # nothing ahead of it: deliver at once
                out.append((batch, start))
                return
        elif self._held_bytes + batch.size_in_bytes > self.max_held_bytes:
            self._scan_from = start  # bound memory: drop it, read on for markers, rewind later
            return
        held = _Held(batch, outcome, start)
        batch.detach()
        self._queue.append(held)
        self._held_bytes += batch.size_in_bytes
        self._held_records += batch.record_count
        if outcome == _UNKNOWN:
            self._open.setdefault(batch.producer_id, []).append(held)

    def _on_marker(self, batch: RecordBatch, out: list[Released]) -> None:
        kind, pid = batch.control_type, batch.producer_id
        if kind is None or kind is ControlType.UNKNOWN:
            return
        listed, released = pid in self._aborted, pid in self._released
        if kind is ControlType.ABORT and listed:
            self.trust.proven = True  # the index listed this abort and the marker confirms it
        elif (kind is ControlType.COMMIT and listed) or (kind is ControlType.ABORT and released):
            self.trust.proven = False  # the index contradicts the log: back to markers
            self.trust.violations += 1
        self._aborted.discard(pid)
        self._released.discard(pid)
        self._uncertain.discard(pid)
        self._last_marker[pid] = batch.base_offset
        self._epoch[pid] = max(self._epoch.get(pid, -1), batch.producer_epoch)
        if pid in self._open:  # (else the queue's head waits on another producer, or is empty)
            self._resolve(pid, _ABORTED if kind is ControlType.ABORT else _COMMITTED, out)

    def _resolve(self, pid: int, outcome: int, out: list[Released]) -> None:
        for held in self._open.pop(pid, ()):
            held.outcome = outcome
        queue = self._queue
        while queue and queue[0].outcome != _UNKNOWN:
            held = queue.popleft()
            self._held_bytes -= held.batch.size_in_bytes
            self._held_records -= held.batch.record_count
            if held.outcome == _COMMITTED:
                out.append((held.batch, held.min_offset))

    def _scan(self, batch: RecordBatch, out: list[Released]) -> bool:
        """One batch read while scanning; True once everything held is resolved and the filter
        has rewound to the first dropped batch."""
        kind, pid = batch.control_type, batch.producer_id
        if pid not in self._open:
            return False  # data is dropped; other producers' markers are read again later
        if not batch.is_control:
            held = self._open[pid][-1].batch.producer_epoch
            if not batch.is_transactional or batch.producer_epoch <= held:
                return False
            self._resolve(pid, _ABORTED, out)  # a newer epoch: what is held was abandoned
        elif kind is None or kind is ControlType.UNKNOWN:
            return False
        else:
            self._resolve(pid, _ABORTED if kind is ControlType.ABORT else _COMMITTED, out)
        if self._queue:
            return False
        rewind_to = self._scan_from
        assert rewind_to is not None
        epochs = self._epoch  # learned below the rewind point only (scanning learns none)
        self.seek(rewind_to)  # markers read past it are read again, with the data they end
        self._epoch = epochs
        return True

    # -- read_uncommitted --------------------------------------------------------------------

    def _feed_uncommitted(self, batches: Iterable[RecordBatch]) -> list[Released]:
        out: list[Released] = []
        for batch in batches:
            if batch.last_offset < self._fetch_offset:
                continue
            start, self._fetch_offset = self._fetch_offset, batch.last_offset + 1
            if not batch.is_control:
                out.append((batch, start))
        return out
