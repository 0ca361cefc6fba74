"""A client dropped without close() leaves no socket open."""

from __future__ import annotations

import asyncio
import gc
import warnings

from eosclient.aio import AsyncReadCommittedConsumer, AsyncTransactionalProducer


def test_never_started_async_clients_dropped_unclosed_leave_no_socket_open() -> None:
    # The finalizer only asked the (never started) loop to stop: the selector's wake-up
    # socketpair stayed open, a ResourceWarning under `python -X dev` per client.
    async def make_and_drop() -> None:
        AsyncReadCommittedConsumer("127.0.0.1:1")
        AsyncTransactionalProducer("127.0.0.1:1", transactional_id="dropped")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        asyncio.run(make_and_drop())
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)
                and "socket" in str(w.message)]
    assert not unclosed, unclosed
