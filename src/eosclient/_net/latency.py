"""Request latency per API, recorded by the network client as answers come back.

Written by the I/O thread only; :meth:`Latencies.snapshot` is read under the owner's lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eosclient.errors import ApiKey
from eosclient.stats import RequestStats

__all__ = ["Latencies"]


class Latencies:
    """Per API key: ``[count, errors, total seconds, max seconds]``."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._by_api: dict[int, list[Any]] = {}

    def timed(self, api: int, start: float, on_done: Callable[[Any], None],
              ) -> Callable[[Any], None]:
        """``on_done``, recording the time from ``start`` to the answer first."""
        def done(answer: Any) -> None:
            self.observe(api, self._clock() - start, answer.error is not None)
            on_done(answer)
        return done

    def observe(self, api: int, seconds: float, failed: bool) -> None:
        """One request of ``api`` took ``seconds`` (``failed``: without an answer)."""
        row = self._by_api.get(api)
        if row is None:
            row = self._by_api[api] = [0, 0, 0.0, 0.0]
        row[0] += 1
        row[1] += failed
        row[2] += seconds
        row[3] = max(row[3], seconds)

    def snapshot(self) -> dict[str, RequestStats]:
        """Every API seen so far, by name."""
        return {_name(api): RequestStats(*row) for api, row in sorted(self._by_api.items())}


def _name(api: int) -> str:
    try:
        return ApiKey(api).label
    except ValueError:
        return f"api-{api}"
