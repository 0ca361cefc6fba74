"""Committing offsets and reading them back: one OffsetCommit or OffsetFetch, retried. Sans-IO.

An :class:`OffsetJob` is what an application call (``commit()``, ``committed()``) or the
consumer itself (the committed offsets of newly assigned partitions) asks of the group
coordinator. The driver sends :meth:`OffsetJob.request` when :meth:`OffsetJob.due`, and feeds
back the answer; the job classifies every code with :func:`eosclient.errors.error_for_codes`
and then decides how to go on:

* success: done, with the offsets (OffsetFetch: ``None`` where nothing is committed);
* the coordinator moved (15, 16), or REQUEST_TIMED_OUT (7): find it again, then retry;
* UNSTABLE_OFFSET_COMMIT (88, KIP-447 ``require_stable``): a transaction that commits offsets
  for these partitions is still open; retry after the backoff until it ends;
* REBALANCE_IN_PROGRESS (27) on OffsetCommit: done, with the error; the application polls (which
  finishes the rebalance) and commits again, as Java's ``RebalanceInProgressException`` asks;
* any other retriable code: retry after the backoff;
* anything else (ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID on OffsetCommit are abortable: the
  generation is gone, redo from the committed offsets): done, with the error.

A job has no deadline of its own: the caller waits as long as its timeout allows, then cancels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from eosclient._consumer import protocol as wire
from eosclient._core.types import TopicPartition
from eosclient._net.backoff import Backoff
from eosclient.errors import ApiKey, EosError, RetriableError, error_for_codes

__all__ = ["OffsetJob"]

_COORDINATOR_GONE: Final = frozenset({7, 15, 16})
_REBALANCE_IN_PROGRESS: Final = 27


class OffsetJob:
    """One OffsetCommit (``offsets`` given) or OffsetFetch (``partitions`` given).

    Args:
        group_id: The group.
        backoff: The wait between retries.
        offsets: What to commit.
        partitions: Whose committed offsets to read (with ``require_stable``).
        generation: The generation a commit is made under (-1 outside the group).
        member_id: The member id a commit is made under ("" outside the group).
        group_instance_id: A static member's ``group.instance.id`` (None outside the group:
            with it, a commit without the member's id would be refused as fenced).

    Attributes:
        result: Per partition, the offset committed or read (None: nothing committed).
        error: Why the job ended without a result.
        last_error: The latest retriable error (chained into the caller's timeout).
    """

    def __init__(self, group_id: str, backoff: Backoff, *,
                 offsets: Mapping[TopicPartition, int] | None = None,
                 partitions: Iterable[TopicPartition] | None = None,
                 generation: int = -1, member_id: str = "",
                 group_instance_id: str | None = None) -> None:
        self.group_id = group_id
        self.commit = offsets is not None
        self.offsets = dict(offsets or {})
        self.partitions = sorted(set(partitions or ()))
        self.generation = generation
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.result: dict[TopicPartition, int | None] | None = None
        self.error: EosError | None = None
        self.last_error: EosError | None = None
        self.in_flight = False
        self.cancelled = False
        self.retry_at = 0.0
        self._failures = 0
        self._backoff = backoff

    @property
    def api(self) -> ApiKey:
        """OffsetCommit or OffsetFetch."""
        return ApiKey.OFFSET_COMMIT if self.commit else ApiKey.OFFSET_FETCH

    @property
    def done(self) -> bool:
        """Whether it has a result or an error."""
        return self.result is not None or self.error is not None

    def due(self, now: float) -> bool:
        """Whether to send it now."""
        return not (self.done or self.in_flight or self.cancelled) and now >= self.retry_at

    def request(self) -> Any:
        """The request; marks the job in flight."""
        self.in_flight = True
        if self.commit:
            return wire.offset_commit(self.group_id, self.generation, self.member_id,
                                      self.offsets,
                                      group_instance_id=self.group_instance_id)
        return wire.offset_fetch(self.group_id, self.partitions)

    def on_response(self, response: Any, now: float) -> bool:
        """Read the answer; True if the coordinator must be looked up again."""
        self.in_flight = False
        if self.commit:
            committed = wire.read_offset_commit(response)
            return self._judge(committed.values(), now, dict(self.offsets))
        group_code, answers = wire.read_offset_fetch(response)
        codes = [group_code, *(a.error_code for a in answers.values())]
        result = {tp: answers[tp].offset if tp in answers else None for tp in self.partitions}
        return self._judge(codes, now, result)

    def on_failure(self, error: EosError, now: float) -> None:
        """No answer (a cut connection, a timeout): retry once the coordinator is found again."""
        self.in_flight = False
        self._retry(error, now)

    def _judge(self, codes: Iterable[int], now: float,
               result: dict[TopicPartition, int | None]) -> bool:
        error = error_for_codes(self.api, codes)
        if error is None:
            self.result = result
        elif not isinstance(error, RetriableError) or (
                self.commit and error.code == _REBALANCE_IN_PROGRESS):
            self.error = error
        else:
            self._retry(error, now)
            return error.code in _COORDINATOR_GONE
        return False

    def _retry(self, error: EosError, now: float) -> None:
        self.last_error = error
        self._failures += 1
        self.retry_at = now + self._backoff.delay(self._failures)
