"""Exponential backoff with jitter, from tenacity's wait strategies.

tenacity's strategies are pure functions of a retry's attempt number, which is exactly what the
event loop needs: it never sleeps in a retry decorator (a loop thread cannot block), it asks "how
long until attempt n?" and turns the answer into a timer. A ``RetryCallState`` carries the
attempt number into the strategy; nothing else of tenacity's machinery is used.

Java's shape: ``initial * 2**(n-1)`` capped at ``maximum``, plus up to 20% of ``initial`` of
random jitter, so clients restarted together do not reconnect in lockstep.
"""

from __future__ import annotations

import tenacity

__all__ = ["Backoff"]

_JITTER = 0.2


class Backoff:
    """Seconds to wait before attempt ``n`` (1 for the first retry).

    Args:
        initial: Seconds before the first retry.
        maximum: The cap, in seconds (jitter included).
    """

    __slots__ = ("_state", "_wait", "initial", "maximum")

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = max(initial, maximum)
        exponential = tenacity.wait_exponential(multiplier=initial, min=0, max=self.maximum)
        self._wait = exponential + tenacity.wait_random(0, initial * _JITTER)
        self._state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (>= 1); 0 for attempt 0."""
        if attempt <= 0 or self.initial <= 0:
            return 0.0
        self._state.attempt_number = attempt
        return float(min(self._wait(self._state), self.maximum))
