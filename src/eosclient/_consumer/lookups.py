"""Where partitions begin and end, asked in the way that is right on every broker. Sans-IO.

An :class:`OffsetQuery` finds, per partition, the log start offset with ListOffsets(earliest);
when the end is wanted it then sends a small Fetch from that offset, whose answer carries the
high watermark and the last stable offset. The end is not asked of ListOffsets(latest): Tansu
answers it wrongly under read_committed while a transaction is open, and for multi-record
batches under read_uncommitted (BROKERS.md); every broker's Fetch answer gets both right.

The consumer uses queries for ``auto.offset.reset`` and ``seek_to_beginning``/``seek_to_end``
(end = the LSO under read_committed), and for ``last_stable_offset``, ``high_watermark`` and
``lag``. A retriable error (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION while metadata
lags, a cut connection) retries that partition after the backoff and asks for fresh metadata;
a fatal one ends the query with the error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple

from eosclient._consumer import protocol as wire
from eosclient._core.types import TopicPartition
from eosclient._net.backoff import Backoff
from eosclient.errors import ApiKey, EosError, RetriableError, error_for

__all__ = ["OffsetQuery", "Step", "Watermarks"]

_PROBE_WAIT_MS: Final = 10  # Tansu answers a Fetch with max_wait_ms 0 with no topics at all
_PROBE_BYTES: Final = 1  # the answer's offsets are wanted, not its records


class Watermarks(NamedTuple):
    """Where a partition begins and ends, as its leader answered
    (:meth:`ReadCommittedConsumer.watermarks <eosclient.ReadCommittedConsumer.watermarks>`)."""

    log_start_offset: int
    high_watermark: int  # -1 unless the end was asked for
    last_stable_offset: int  # -1 unless the end was asked for


class Step(NamedTuple):
    """One request of a query for the driver to send to ``node``."""

    node: int
    request: Any
    partitions: list[TopicPartition]
    probe: bool  # a Fetch for the end, else ListOffsets for the start


class OffsetQuery:
    """The beginning (and the end) of some partitions; done when every one is known, or on a
    fatal error.

    Args:
        partitions: The partitions.
        want_end: Also the high watermark and the LSO (a Fetch after the ListOffsets).
        isolation: The Fetch's and ListOffsets' isolation level (0 or 1).
        backoff: The wait before retrying a partition after a retriable error.
    """

    def __init__(self, partitions: Iterable[TopicPartition], *, want_end: bool, isolation: int,
                 backoff: Backoff) -> None:
        self.want_end = want_end
        self.isolation = isolation
        self.results: dict[TopicPartition, Watermarks] = {}
        self.error: EosError | None = None
        self.stale_leaders = False  # a retriable error says the metadata may be stale
        self._todo: dict[TopicPartition, int | None] = dict.fromkeys(partitions)
        self._busy: set[TopicPartition] = set()
        self._retry_at: dict[TopicPartition, float] = {}
        self._failures = 0
        self._backoff = backoff

    @property
    def done(self) -> bool:
        """Whether every partition is answered, or the query failed."""
        return self.error is not None or not self._todo

    def steps(self, now: float, leader: Callable[[TopicPartition], int | None]) -> list[Step]:
        """The requests due now, one per (leader, kind); marks their partitions busy."""
        grouped: dict[tuple[int, bool], list[TopicPartition]] = {}
        for tp, start in self._todo.items():
            node = leader(tp)
            if node is None or tp in self._busy or self._retry_at.get(tp, 0.0) > now:
                continue
            grouped.setdefault((node, start is not None), []).append(tp)
        out = []
        for (node, probe), tps in grouped.items():
            self._busy.update(tps)
            out.append(Step(node, self._probe(tps) if probe else
                            wire.list_offsets(tps, wire.EARLIEST, self.isolation), tps, probe))
        return out

    def next_timer(self) -> float:
        """When a partition waiting out its backoff may be asked again."""
        waiting = [t for tp, t in self._retry_at.items() if tp in self._todo]
        return min(waiting, default=float("inf"))

    def on_response(self, step: Step, response: Any, now: float) -> None:
        """Read the answer to ``step``."""
        self._busy.difference_update(step.partitions)
        if step.probe:
            self._on_probe(step, response, now)
        else:
            self._on_list_offsets(step, response, now)

    def on_failure(self, step: Step, error: EosError, now: float) -> None:
        """``step`` got no answer: retry its partitions after the backoff."""
        self._busy.difference_update(step.partitions)
        self._retry(step.partitions, now)

    def _on_list_offsets(self, step: Step, response: Any, now: float) -> None:
        answers = wire.read_list_offsets(response)
        for tp in step.partitions:
            answer = answers.get(tp)
            if answer is None or answer.error_code:
                self._on_error(ApiKey.LIST_OFFSETS, tp, answer.error_code if answer else 3, now)
            elif not self.want_end:
                self._finish(tp, Watermarks(answer.offset or 0, -1, -1))
            elif tp in self._todo:
                self._todo[tp] = answer.offset

    def _on_probe(self, step: Step, response: Any, now: float) -> None:
        answers = dict(wire.fetched(response))
        for tp in step.partitions:
            data = answers.get(tp)
            start = self._todo.get(tp)
            if data is None or start is None:
                self._retry([tp], now)  # Tansu may answer without the partition: ask again
            elif data.error_code == 1:  # OFFSET_OUT_OF_RANGE: the log start moved; start over
                self._todo[tp] = None
            elif data.error_code:
                self._on_error(ApiKey.FETCH, tp, data.error_code, now)
            else:
                self._finish(tp, Watermarks(start, data.high_watermark, data.last_stable_offset))

    def _on_error(self, api: ApiKey, tp: TopicPartition, code: int, now: float) -> None:
        error = error_for(api, code, f"{tp.topic}-{tp.partition}")
        if isinstance(error, RetriableError):
            self._retry([tp], now)
        else:
            self.error = error

    def _retry(self, partitions: Iterable[TopicPartition], now: float) -> None:
        self._failures += 1
        self.stale_leaders = True
        delay = self._backoff.delay(self._failures)
        for tp in partitions:
            self._retry_at[tp] = now + delay

    def _finish(self, tp: TopicPartition, ends: Watermarks) -> None:
        if self._todo.pop(tp, False) is not False:
            self.results[tp] = ends

    def _probe(self, partitions: list[TopicPartition]) -> Any:
        return wire.fetch([(tp, self._todo[tp] or 0, _PROBE_BYTES) for tp in partitions],
                          isolation=self.isolation, max_wait_ms=_PROBE_WAIT_MS, min_bytes=0,
                          max_bytes=_PROBE_BYTES)
