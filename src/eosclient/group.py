"""Consumer group membership: the names this module has always offered, kept importable.

The coordinator itself (membership, offset jobs, rebalance steps on the consumer's I/O thread)
lives beside the fetcher it runs with, in :mod:`eosclient._consumer.group`; the consumer
session (:mod:`eosclient._consumer.session`) owns one.
"""

from __future__ import annotations

from eosclient._consumer.group import (
    GroupCoordinator,
    RebalanceCallback,
    RebalanceStep,
    step_callback,
)

__all__ = ["GroupCoordinator", "RebalanceCallback", "RebalanceStep", "step_callback"]
