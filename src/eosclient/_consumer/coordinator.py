"""Where a consumer group's coordinator is: FindCoordinator, and looking again when it moves.

Sans-IO: the driver sends :meth:`CoordinatorLookup.request` when :meth:`~CoordinatorLookup.due`
and feeds the answer back. The membership and the offset requests (commit, committed) share one
lookup; whichever of them sees NOT_COORDINATOR (16), COORDINATOR_NOT_AVAILABLE (15) or a cut
connection calls :meth:`~CoordinatorLookup.lost`, and the next lookup goes out at once.
"""

from __future__ import annotations

from typing import Any

from eosclient._consumer import protocol as wire
from eosclient._consumer.protocol import Node
from eosclient._net.backoff import Backoff
from eosclient.errors import ApiKey, EosError, RetriableError, error_for

__all__ = ["CoordinatorLookup"]


class CoordinatorLookup:
    """Which broker coordinates the group, found with FindCoordinator and forgotten on errors.

    Args:
        group_id: The group.
        backoff: The wait before looking again after a failure.
    """

    def __init__(self, group_id: str, backoff: Backoff) -> None:
        self.group_id = group_id
        self.node: Node | None = None
        self.in_flight = False
        self.error: EosError | None = None  # a fatal answer; the lookup stops
        self._backoff = backoff
        self._failures = 0
        self._retry_at = 0.0

    def due(self, now: float) -> bool:
        """Whether a FindCoordinator should go out now."""
        return (self.node is None and not self.in_flight and self.error is None
                and now >= self._retry_at)

    def next_timer(self) -> float:
        """When :meth:`due` may become true (inf while known or in flight)."""
        return self._retry_at if self.node is None and not self.in_flight else float("inf")

    def request(self) -> Any:
        """The FindCoordinator request; marks one in flight."""
        self.in_flight = True
        return wire.find_coordinator(self.group_id)

    def on_response(self, response: Any, now: float) -> None:
        """Read a FindCoordinator answer."""
        self.in_flight = False
        code, node, message = wire.read_coordinator(response)
        if node is not None:
            self.node, self._failures = node, 0
            return
        error = error_for(ApiKey.FIND_COORDINATOR, code, message)
        if isinstance(error, RetriableError):
            self.on_failure(now)
        else:
            self.error = error

    def on_failure(self, now: float) -> None:
        """The lookup got no answer: try again after the backoff."""
        self.in_flight = False
        self._failures += 1
        self._retry_at = now + self._backoff.delay(self._failures)

    def lost(self, now: float) -> None:
        """The coordinator moved or its connection failed: look it up again."""
        if self.node is not None:
            self.node = None
            self._retry_at = now
