"""Argument checks the producer and the consumer share."""

from __future__ import annotations

from typing import Any

__all__ = ["timeout_of"]


def timeout_of(timeout: Any, default_ms: int) -> float:
    """Seconds to wait: ``timeout`` if given (>= 0), else the default in milliseconds.

    Raises:
        TypeError: not a number.
        ValueError: negative.
    """
    if timeout is None:
        return default_ms / 1000
    if type(timeout) not in (int, float):
        raise TypeError(f"timeout must be a number of seconds, got {timeout!r}")
    if not timeout >= 0:
        raise ValueError(f"timeout must be >= 0, got {timeout}")
    return float(timeout)
