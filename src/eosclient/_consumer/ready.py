"""One partition's fetched data on its way to the application: answers, then records. Sans-IO.

A Fetch answer is checked (framing, and CRC-32C under ``check.crcs``) when ``poll()`` takes it in,
but its batches are fed to the partition's :class:`~eosclient._core.isolation.PartitionFilter`
only as records are asked for, a run of batches at a time holding about the records asked for
(markers count for none), and what the filter releases becomes :class:`ConsumerRecord` objects
right away. So a ``poll()`` decodes about what it returns, and the records it creates die young:
decoding a whole answer ahead kept tens of thousands of them alive into the garbage collector's
older generations, and full collections became the consumer's biggest cost. (A run rather than
one batch per call: where batches are small, one record each when a producer spreads a
transaction over 1,000 partitions, each with its marker, a call per batch was a third of the
consumer's time.)

Feeding later than fetching asks for care in three places (and :meth:`ReadyQueue.take` runs on
the application's thread outside the consumer's lock: it touches only what the I/O thread never
reads, and leaves what it does read, where to fetch next, to the caller under the lock):

* **Where the next Fetch starts** (:attr:`ReadyQueue.next_fetch`): after the last batch taken in,
  not after the last one fed. Batches at or past the answer's LSO are not taken in (the filter
  would stop before them; read_committed), so the next Fetch asks for them again.
* **The filter may rewind** (after scanning for markers past ``max_held_bytes``, it goes back to
  the first batch it dropped): what is queued behind that point is then forgotten, and
  :meth:`ReadyQueue.feed` says so, for the caller to drop any Fetch already under way.
* **An error in an answer** (a corrupt batch) is queued behind the good batches before it, so
  they are delivered first; the partition is not fetched further meanwhile.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final

from eosclient._core.decode import (
    ConsumerRecord,
    DecodedBatches,
    RecordBatch,
    RecordColumns,
    decode_batches,
)
from eosclient._core.isolation import IndexTrust, Isolation, PartitionFilter
from eosclient._core.types import TopicPartition
from eosclient._protocol.framing import DEFAULT_MAX_FRAME_SIZE
from eosclient.errors import CorruptRecordError, EosError

__all__ = ["ConsumerRecord", "ReadyQueue"]

_PREFIX: Final = struct.Struct(">qi")  # a record batch's base offset and length


class _Answer:
    """The batches of one Fetch answer not yet fed, and what the filter needs with them."""

    __slots__ = ("at", "batches", "failure", "index", "lso", "nbytes", "trust")

    def __init__(self, batches: list[RecordBatch], *, lso: int, index: Sequence[Any] | None,
                 trust: IndexTrust, failure: EosError | None, nbytes: int) -> None:
        self.batches = batches
        self.at = 0  # batches[at:] are not fed yet
        self.lso = lso
        self.index = index
        self.trust = trust
        self.failure = failure
        self.nbytes = nbytes


class ReadyQueue:
    """What one partition fetched and has not delivered, oldest first.

    Args:
        tp: The partition.
        filt: Its filter.
        max_batch_bytes: ``receive.message.max.bytes``: no batch can be larger.
        check_crcs: ``check.crcs``: whether each batch's CRC-32C is checked.
    """

    def __init__(self, tp: TopicPartition, filt: PartitionFilter,
                 max_batch_bytes: int = DEFAULT_MAX_FRAME_SIZE, *,
                 check_crcs: bool = True) -> None:
        self.tp = tp
        self.filter = filt
        self.max_batch_bytes = max_batch_bytes
        self.check_crcs = check_crcs
        # Read by the I/O thread (the rest is the application's): single attribute writes.
        self.nbytes = 0  # fetched bytes not yet fed (the prefetch bound)
        self.next_fetch = filt.fetch_offset
        self.blocked = False  # a queued answer ends in an error: fetch nothing more before it
        self._answers: deque[_Answer] = deque()
        self._released = RecordColumns(*tp)  # decoded, delivered up to row _pos
        self._pos = 0

    @property
    def position(self) -> int:
        """The offset of the next record to deliver."""
        if self._pos < len(self._released):
            return self._released.offset_at(self._pos)
        return self.filter.position

    @property
    def has_records(self) -> bool:
        """Whether released records wait for delivery."""
        return self._pos < len(self._released)

    def clear(self) -> None:
        """Forget everything queued (a seek: the filter is sought by the caller)."""
        self._released, self._pos = RecordColumns(*self.tp), 0
        self._drop_queued()
        self.restart()

    def restart(self) -> None:
        """Fetch next from where the filter stands (after a seek or a rewind)."""
        self.next_fetch = self.filter.fetch_offset

    def _drop_queued(self) -> None:
        self._answers.clear()
        self.nbytes = 0
        self.blocked = False

    def push(self, data: Any, trust: IndexTrust, room: int = 0) -> bool:
        """Queue a Fetch answer's batches from :attr:`next_fetch` up to its LSO; True if it held
        only a partial batch (one larger than the fetch size: the caller grows it).

        ``room`` is what the broker could send for this partition (its limit, or what the
        Fetch's ``max_bytes`` left after the partitions before it): a partial batch in an answer
        that stopped short of it was not cut by a limit, so its length field lies; it is
        queued as a :class:`~eosclient.errors.CorruptRecordError`, as is a batch that claims to
        be larger than any answer may be (``receive.message.max.bytes``). Otherwise growing the
        fetch size would never end: the batch would look partial for ever.
        """
        records = data.records or b""
        decoded, failure = _decode(records, self.tp, self.max_batch_bytes, self.check_crcs)
        if failure is None and decoded.truncated_bytes and not decoded.batches:
            failure = self._lying_length(records, decoded.partial_size, room)
        # The batches' offsets ascend (decode_batches checks it): the ones already taken in are
        # a head, the ones at or past the LSO a tail; found from each end, not by a pass each.
        batches = decoded.batches
        first, end = 0, len(batches)
        while first < end and batches[first].last_offset < self.next_fetch:
            first += 1
        lso = data.last_stable_offset
        if self.filter.isolation is Isolation.READ_COMMITTED and lso is not None and lso >= 0:
            cut = end
            while cut > first and batches[cut - 1].last_offset >= lso:
                cut -= 1
            if cut < end:  # the filter would stop there; fetched again once the LSO moves
                end, failure = cut, None
        if first or end < len(batches):
            batches = batches[first:end]
        if not batches and failure is None:
            return bool(decoded.truncated_bytes and not decoded.batches)
        nbytes = sum(b.size_in_bytes for b in batches)
        self._answers.append(_Answer(batches, lso=lso, index=data.aborted_transactions or None,
                                     trust=trust, failure=failure, nbytes=nbytes))
        self.nbytes += nbytes
        self.blocked = failure is not None
        if batches:
            self.next_fetch = batches[-1].last_offset + 1
        return False

    def _lying_length(self, records: bytes, claimed: int, room: int,
                      ) -> CorruptRecordError | None:
        """The error of an answer holding only a partial batch (at its start) that no limit
        explains; None if a limit does (then the caller asks for more next time)."""
        if claimed > self.max_batch_bytes:
            why = (f"claims {claimed} bytes, more than any answer may carry "
                   f"(receive.message.max.bytes {self.max_batch_bytes})")
        elif len(records) < room:
            why = (f"claims {claimed or 'more'} bytes, yet the broker sent {len(records)} and "
                   f"stopped, though its limits left room for {room}")
        else:
            return None
        offset = _PREFIX.unpack_from(records)[0] if claimed else self.next_fetch
        return CorruptRecordError(f"record batch {why}: its length field is corrupt",
                                  topic=self.tp.topic, partition=self.tp.partition, offset=offset)

    def take(self, limit: int, out: list[ConsumerRecord]) -> tuple[bool, EosError | None]:
        """Move up to ``limit`` records into ``out``, feeding queued batches as needed.

        Returns:
            Whether the filter rewound (the caller then fetches again from the filter's offset
            and drops any Fetch under way: :meth:`restart`), and the error of a failed answer
            reached (the records before it were moved first).
        """
        return self._take(limit, lambda rows, start, stop: out.extend(rows.records(start, stop)),
                          records=True)

    def take_columns(self, limit: int, into: RecordColumns) -> tuple[bool, EosError | None]:
        """Move up to ``limit`` records onto the end of ``into``'s columns (this partition's);
        returns as :meth:`take`. The records are checked, not decoded (see ``RecordColumns``)."""
        return self._take(limit, into.extend, records=False)

    def _take(self, limit: int, emit: Callable[[RecordColumns, int, int], object], *,
              records: bool) -> tuple[bool, EosError | None]:
        rewound, error = False, None
        while limit > 0:
            released = self._released
            if self._pos < len(released):
                end = min(len(released), self._pos + limit)
                emit(released, self._pos, end)
                limit -= end - self._pos
                self._pos = end
                continue
            if not self._answers or error is not None:
                break
            went_back, error = self.feed(limit, records=records)
            rewound |= went_back  # (an error: the records released before it go first)
        return rewound, error

    def feed(self, room: int = 1, *, records: bool = True) -> tuple[bool, EosError | None]:
        """Feed the oldest queued batches holding about ``room`` records (at least one batch)
        to the filter and check what it releases (making its records too if ``records``: see
        ``RecordBatch.columns``); (rewound, error) as :meth:`take`."""
        answer = self._answers[0]
        batches, at = answer.batches, answer.at
        if at == len(batches):
            self._answers.popleft()
            self.nbytes -= answer.nbytes
            self.blocked = False
            return False, answer.failure
        end, count = at, 0
        while end < len(batches) and count < room:
            batch = batches[end]
            end += 1
            if not batch.is_control:
                count += batch.record_count
        answer.at = end
        if end == len(batches) and answer.failure is None:
            self._answers.popleft()
            self.nbytes -= answer.nbytes
        filt = self.filter
        filt.trust = answer.trust
        if self._pos:  # drop the rows delivered (nothing is fed while rows wait, but be safe)
            rest = RecordColumns(*self.tp)
            rest.extend(self._released, self._pos)
            self._released, self._pos = rest, 0
        released = filt.release(batches[at:end], last_stable_offset=answer.lso,
                                aborted_transactions=answer.index)
        into = self._released
        for batch, start in released:
            waiting = len(into)
            try:
                batch.columns(into, start, records=records)
            except EosError as exc:  # its records do not parse (its CRC matched)
                # Every batch before it is resolved (the filter releases in offset order), so
                # the filter starts again at this one; the ones released before it stand.
                filt.seek(start)
                into.truncate(waiting)
                self._drop_queued()
                return True, exc
        if filt.fetch_offset <= batches[end - 1].last_offset:  # it stopped short: it rewound
            # (the scan for markers is over: it went back to the first batch it dropped)
            self._drop_queued()
            return True, None
        return False, None


def _decode(data: bytes, tp: TopicPartition, limit: int, check_crcs: bool,
            ) -> tuple[DecodedBatches, EosError | None]:
    """The batches of a Fetch answer up to the first bad one, and the error of that one."""
    try:
        return decode_batches(data, tp, limit, check_crcs=check_crcs), None
    except CorruptRecordError as exc:
        pos = 0
        while pos + _PREFIX.size <= len(data):
            base, length = _PREFIX.unpack_from(data, pos)
            if base == exc.offset:
                break
            pos += _PREFIX.size + length
        return decode_batches(data[:pos], tp, limit, check_crcs=check_crcs), exc
    except EosError as exc:  # FatalError: the legacy message formats v0/v1
        return DecodedBatches([], 0), exc
