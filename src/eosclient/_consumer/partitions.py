"""The consumer's partitions: where each one is, what was fetched for it, what awaits delivery.

Sans-IO, shared by the application's thread and the I/O thread under the consumer's lock. Each
assigned partition has a :class:`PartitionState` that moves through phases::

    COMMITTED --(OffsetFetch: an offset)------------------> FETCHING
    COMMITTED --(no committed offset)--> RESET --(lookup)--> FETCHING
    FETCHING  --(OFFSET_OUT_OF_RANGE, nothing undelivered)--> RESET, or FAILED when
              auto.offset.reset is none (with records undelivered: fetched again later)
    any       --(seek)---------------------------------------> FETCHING
    FETCHING  --(corrupt batch, fatal Fetch error)-----------> FAILED (until a seek)
    FETCHING  --(answers too large even at one batch)--------> FAILED (until a seek)

The I/O thread fetches FETCHING partitions and leaves each answer in ``completed``; the
application's ``poll()`` checks it and queues its batches in the partition's
:class:`~eosclient._consumer.ready.ReadyQueue`, which feeds them to the partition's
:class:`~eosclient._core.isolation.PartitionFilter` as records are drained. The position (the
offset to commit) is the first undelivered released record's offset, or the filter's
``position`` when none waits: it never moves past a record the application has not been given.
Every seek or phase change bumps ``token``, so an answer in flight for an older position is
dropped.

Buffers: a partition is fetched again only when what it queued is under
``max.partition.fetch.bytes`` (prefetch: the next answer travels while the application works on
the previous one); the filter's held data is bounded by its own ``max_held_bytes``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, NamedTuple

from eosclient._consumer.ready import ConsumerRecord, ReadyQueue
from eosclient._core.decode import RecordColumns
from eosclient._core.isolation import IndexTrust, Isolation, PartitionFilter
from eosclient._core.types import TopicPartition
from eosclient._net.metadata import Metadata
from eosclient._protocol.framing import DEFAULT_MAX_FRAME_SIZE
from eosclient.errors import (
    ApiKey,
    EosError,
    OffsetOutOfRangeError,
    RetriableError,
    error_for,
)

__all__ = ["Assignment", "CompletedFetch", "ConsumerRecord", "PartitionState", "Phase", "missing"]

_MAX_FETCH_GROWTH: Final = 8  # a partition's fetch size doubles at most this many times

Followup = tuple["PartitionState", bool, "EosError | None"]
"""(partition, its filter rewound, the error draining it met): a partition drained below the
prefetch bound, or one that needs action under the lock."""


class Phase(enum.Enum):
    """Where a partition is (module docstring)."""

    COMMITTED = "waiting for its committed offset (OffsetFetch)"
    RESET = "waiting for the offset auto.offset.reset or a seek_to_* names"
    FETCHING = "position known; fetched"
    FAILED = "an error the next poll() raises, until a seek"


class CompletedFetch(NamedTuple):
    """One partition's part of a Fetch answer, waiting for ``poll()``."""

    data: Any  # kafka-python's FetchResponse partition data
    trust: IndexTrust  # the answering broker's
    token: int
    room: int = 0  # the bytes the broker could send for it (limits, minus partitions before it)


class PartitionState:
    """One assigned partition (module docstring).

    Attributes:
        tp: The partition.
        phase: Its :class:`Phase`.
        token: Bumped by every seek and phase change; answers for an older one are stale.
        reset_to: ``"earliest"`` or ``"latest"`` while in RESET.
        error: What the next ``poll()`` raises, in FAILED.
        in_flight: A Fetch or offset lookup for it is in flight.
        completed: A Fetch answer waiting to be fed.
        retry_at: Not fetched before this time (after a retriable error).
        max_bytes: Its ``partition_max_bytes`` (doubled while one batch does not fit).
        last_stable_offset: The LSO the last Fetch answer gave; -1 before one.
        high_watermark: The high watermark the last Fetch answer gave; -1 before one.
        paused: Paused by the application: neither fetched nor drained.
    """

    def __init__(self, tp: TopicPartition, filt: PartitionFilter, max_bytes: int,
                 max_batch_bytes: int = DEFAULT_MAX_FRAME_SIZE, *,
                 check_crcs: bool = True) -> None:
        self.tp = tp
        self.filter = filt
        self.ready = ReadyQueue(tp, filt, max_batch_bytes, check_crcs=check_crcs)
        self.phase = Phase.COMMITTED
        self.token = 0
        self.reset_to = ""
        self.error: EosError | None = None
        self.in_flight = False
        self.completed: CompletedFetch | None = None
        self.retry_at = 0.0
        self.max_bytes = max_bytes
        self.last_stable_offset = self.high_watermark = -1
        self.positioned = False  # sought since the last reset: the position is known
        self.paused = False
        self.failures: set[PartitionState] | None = None  # its assignment's: fail() joins it

    @property
    def position(self) -> int | None:
        """The offset of the next record to deliver (the offset to commit); None while it is
        being looked up, or when it never was found (FAILED before a position)."""
        if not self.positioned or self.phase not in (Phase.FETCHING, Phase.FAILED):
            return None
        return self.ready.position

    @property
    def queued_bytes(self) -> int:
        """Fetched bytes waiting for ``poll()``: its ready buffer and its unread answer."""
        completed = self.completed
        return self.ready.nbytes + (len(completed.data.records or b"") if completed else 0)

    def fetchable(self, now: float, buffer_bytes: int) -> bool:
        """Whether the I/O thread may fetch it now."""
        return (self.phase is Phase.FETCHING and not self.in_flight and self.completed is None
                and self.ready.nbytes < buffer_bytes and not self.ready.blocked
                and now >= self.retry_at and not self.paused)

    def seek(self, offset: int) -> None:
        """Deliver from ``offset`` next; whatever was fetched or held is forgotten."""
        self._forget(Phase.FETCHING)
        self.filter.seek(offset)
        self.ready.clear()
        self.positioned = True

    def reset(self, how: str) -> None:
        """Look up the ``"earliest"`` or ``"latest"`` offset, then deliver from it."""
        self._forget(Phase.RESET)
        self.reset_to = how
        self.positioned = False

    def await_committed(self) -> None:
        """Fetch the committed offset, then deliver from it."""
        self._forget(Phase.COMMITTED)
        self.positioned = False

    def fail(self, error: EosError) -> None:
        """Deliver what was fetched before, then raise ``error`` from ``poll()`` until a seek;
        the position stays."""
        self.completed = None
        self.phase = Phase.FAILED
        self.error = error
        self.token += 1
        if self.failures is not None:
            self.failures.add(self)

    def settle(self, rewound: bool, error: EosError | None) -> None:
        """Act (under the lock) on what draining outside it found: a rewound filter, an error."""
        if rewound:
            self.ready.restart()
            self.token += 1  # a Fetch under way asked for offsets past the rewind: drop it
        if error is not None:
            self.fail(error)

    @property
    def drained(self) -> bool:
        """Whether nothing fetched waits for delivery."""
        return not self.ready.has_records and not self.ready.nbytes

    def _forget(self, phase: Phase) -> None:
        self.phase = phase
        self.token += 1
        self.error = None
        self.completed = None
        self.retry_at = 0.0
        self.ready.clear()


class Assignment:
    """The assigned partitions' states, fed and drained by ``poll()``.

    Args:
        isolation: read_committed or read_uncommitted.
        max_held_bytes: Each filter's bound on data held for markers.
        max_partition_bytes: ``max.partition.fetch.bytes``; also the ready buffer's bound.
        reset_policy: ``auto.offset.reset``: earliest, latest or none.
        max_batch_bytes: ``receive.message.max.bytes``: no batch can be larger, before or
            after decompression.
        check_crcs: ``check.crcs``: whether each fetched batch's CRC-32C is checked.
    """

    def __init__(self, isolation: Isolation, *, max_held_bytes: int, max_partition_bytes: int,
                 reset_policy: str, max_batch_bytes: int = DEFAULT_MAX_FRAME_SIZE,
                 check_crcs: bool = True) -> None:
        self.isolation = isolation
        self.max_held_bytes = max_held_bytes
        self.max_partition_bytes = max_partition_bytes
        self.max_batch_bytes = max_batch_bytes
        self.check_crcs = check_crcs
        self.reset_policy = reset_policy
        self.states: dict[TopicPartition, PartitionState] = {}
        self.version = 0  # bumped whenever the set of partitions changes
        self.stale_leaders = False  # a Fetch error says the metadata is out of date
        self.fed = 0  # partition answers taken in (stats())
        self._turn = 0
        self._failures: set[PartitionState] = set()  # every state that failed (and may be)

    def __iter__(self) -> Iterator[PartitionState]:
        return iter(self.states.values())

    @property
    def queued_bytes(self) -> int:
        """Fetched bytes waiting for ``poll()``, every partition together."""
        return sum(state.queued_bytes for state in self.states.values())

    def replace(self, partitions: Iterable[TopicPartition], *, committed: bool) -> None:
        """Assign exactly ``partitions``; kept ones keep their state, new ones start in
        COMMITTED (``committed``, a group id is set) or in RESET per ``auto.offset.reset``."""
        wanted = list(dict.fromkeys(partitions))
        states = {}
        for tp in wanted:
            state = self.states.get(tp)
            if state is None:
                filt = PartitionFilter(tp, isolation=self.isolation,
                                       max_held_bytes=self.max_held_bytes)
                state = PartitionState(tp, filt, self.max_partition_bytes,
                                       self.max_batch_bytes, check_crcs=self.check_crcs)
                state.failures = self._failures
                self.start(state, committed=committed)
            states[tp] = state
        self.states = states
        self.version += 1

    def start(self, state: PartitionState, *, committed: bool) -> None:
        """Where a partition without a position begins: its committed offset, else the reset."""
        if committed:
            state.await_committed()
        else:
            self.no_offset(state)

    def no_offset(self, state: PartitionState) -> None:
        """No committed offset: reset per ``auto.offset.reset``, or fail if it is none."""
        if self.reset_policy == "none":
            state.fail(OffsetOutOfRangeError(
                f"{state.tp.topic}-{state.tp.partition} has no committed offset and "
                "auto.offset.reset is none: seek() before polling", api=ApiKey.OFFSET_FETCH))
        else:
            state.reset(self.reset_policy)

    def feed(self, state: PartitionState, now: float, backoff: float) -> None:
        """Take in ``state.completed``: check it and queue its batches (the application's
        thread); they are fed to the filter as records are drained."""
        done, state.completed = state.completed, None
        if done is None or done.token != state.token:
            return
        data = done.data
        if data.error_code:
            self._fetch_error(state, data.error_code, now, backoff)
            return
        state.high_watermark = data.high_watermark
        state.last_stable_offset = data.last_stable_offset
        if state.ready.push(data, done.trust, done.room):
            state.max_bytes = min(state.max_bytes * 2,
                                  self.max_partition_bytes << _MAX_FETCH_GROWTH)

    def feed_all(self, now: float, backoff: float) -> bool:
        """Feed every partition's completed Fetch; whether there was any."""
        fed = False
        for state in self.states.values():
            if state.completed is not None:
                self.feed(state, now, backoff)
                self.fed += 1
                fed = True
        return fed

    def drain(self, limit: int) -> tuple[list[ConsumerRecord], list[Followup]]:
        """Up to ``limit`` records, partition after partition in turn, feeding filters as needed.

        Runs on the application's thread *without* the lock (the decoding is the consumer's
        biggest cost, and the I/O thread keeps fetching meanwhile); pass the follow-ups to
        :meth:`settle` under the lock.
        """
        out: list[ConsumerRecord] = []

        def take(state: PartitionState, room: int) -> tuple[int, bool, EosError | None]:
            before = len(out)
            rewound, error = state.ready.take(room, out)
            return len(out) - before, rewound, error

        return out, self._drain(limit, take)

    def drain_columns(self, limit: int,
                      ) -> tuple[dict[TopicPartition, RecordColumns], list[Followup]]:
        """As :meth:`drain`, each partition's records as columns (partitions with none are
        left out)."""
        out: dict[TopicPartition, RecordColumns] = {}

        def take(state: PartitionState, room: int) -> tuple[int, bool, EosError | None]:
            columns = RecordColumns(*state.tp)
            rewound, error = state.ready.take_columns(room, columns)
            if len(columns):
                out[state.tp] = columns
            return len(columns), rewound, error

        return out, self._drain(limit, take)

    def _drain(self, limit: int,
               take: Callable[[PartitionState, int], tuple[int, bool, EosError | None]],
               ) -> list[Followup]:
        followups: list[Followup] = []
        states = list(self.states.values())
        bound = self.max_partition_bytes
        taken = 0
        for i in range(len(states)):
            state = states[(self._turn + i) % len(states)]
            if state.paused:
                continue
            full = state.ready.nbytes >= bound
            count, rewound, error = take(state, limit - taken)
            taken += count
            if rewound or error is not None or (full and state.ready.nbytes < bound):
                followups.append((state, rewound, error))  # (or: it may be fetched again)
            if taken >= limit:
                self._turn = (self._turn + i) % len(states)  # the next drain resumes here
                break
        return followups

    def settle(self, followups: list[Followup]) -> EosError | None:
        """Apply :meth:`drain`'s follow-ups (under the lock; if there are any, the I/O thread
        has new work); return the error of a FAILED partition with nothing left to deliver,
        for poll() to raise when it has no records."""
        for state, rewound, error in followups:
            if state is self.states.get(state.tp):
                state.settle(rewound, error)
        if not self._failures:  # every poll asks: no pass over every partition for nothing
            return None
        self._failures.difference_update([s for s in self._failures if s.phase is not Phase.FAILED
                                          or self.states.get(s.tp) is not s])
        return next((s.error for s in self.states.values()
                     if s in self._failures and s.drained), None)

    def _fetch_error(self, state: PartitionState, code: int, now: float, backoff: float) -> None:
        error = error_for(ApiKey.FETCH, code)
        where = f"{state.tp.topic}-{state.tp.partition} at offset {state.filter.fetch_offset}"
        if isinstance(error, OffsetOutOfRangeError) and not state.drained:
            # A prefetch past undelivered records failed: deliver them first, then ask again
            # from the position (Java acts only when the failed offset is the position).
            state.retry_at = now + backoff
        elif isinstance(error, OffsetOutOfRangeError):
            if self.reset_policy == "none":
                state.fail(OffsetOutOfRangeError(f"{where}: {error}; auto.offset.reset is none",
                                                 code=code, code_name=error.code_name,
                                                 api=ApiKey.FETCH))
            else:
                state.reset(self.reset_policy)
        elif isinstance(error, RetriableError):
            state.retry_at = now + backoff  # NOT_LEADER and friends: the metadata is stale
            self.stale_leaders = True
        else:
            state.fail(type(error)(f"{where}: {error}", code=code, code_name=error.code_name,
                                   api=ApiKey.FETCH))


def missing(partitions: Iterable[TopicPartition], metadata: Metadata) -> EosError | None:
    """The error for the first of ``partitions`` whose topic or partition the metadata says
    does not exist, or None."""
    for tp in partitions:
        error = metadata.last_error(tp.topic)
        if error is not None and error.code is not None:
            return error_for(ApiKey.METADATA, error.code,
                             f"topic {tp.topic!r} is not in the cluster ({error.code_name})")
        count = metadata.partition_count(tp.topic)
        if count is not None and tp.partition >= count:
            return error_for(ApiKey.METADATA, 3, f"topic {tp.topic!r} has {count} partitions; "
                             f"there is no partition {tp.partition}")
    return None

