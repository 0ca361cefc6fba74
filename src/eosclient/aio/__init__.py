"""eosclient for asyncio: the same exactly-once clients, awaited.

The classes here are fronts over the sync clients' sans-IO core (the transaction state machine,
the record accumulator, the read_committed filter, the group logic): the same settings, errors
and state rules, driven by the event loop instead of an I/O thread (see docs/asyncio.md).
"""

from __future__ import annotations

from eosclient.aio.consumer import AsyncReadCommittedConsumer, AsyncRebalanceCallback
from eosclient.aio.processor import AsyncExactlyOnceProcessor
from eosclient.aio.producer import AsyncTransactionalProducer, Delivery

__all__ = [
    "AsyncExactlyOnceProcessor",
    "AsyncReadCommittedConsumer",
    "AsyncRebalanceCallback",
    "AsyncTransactionalProducer",
    "Delivery",
]
