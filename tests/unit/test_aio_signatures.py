"""The asyncio clients take exactly the sync clients' arguments (the constructors are written
out for typing; this keeps them from drifting) and offer every public method of theirs."""

from __future__ import annotations

import inspect

import pytest

from eosclient import ExactlyOnceProcessor, ReadCommittedConsumer, TransactionalProducer
from eosclient.aio import (
    AsyncExactlyOnceProcessor,
    AsyncReadCommittedConsumer,
    AsyncTransactionalProducer,
)

PAIRS = [(TransactionalProducer, AsyncTransactionalProducer),
         (ReadCommittedConsumer, AsyncReadCommittedConsumer),
         (ExactlyOnceProcessor, AsyncExactlyOnceProcessor)]
# Arguments typed differently on purpose: the asyncio processor's transforms may be coroutines.
RETYPED = {(AsyncExactlyOnceProcessor, "fn"): "AsyncTransform | None",
           (AsyncExactlyOnceProcessor, "batch_fn"): "AsyncBatchTransform | None"}
# Sync methods the asyncio twin has under another shape, or on purpose not at all: none now.
NOT_TWINNED: set[str] = set()


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=lambda c: c.__name__)
def test_the_constructors_take_the_same_arguments(sync: type, aio: type) -> None:
    ours = inspect.signature(aio.__init__).parameters
    theirs = inspect.signature(sync.__init__).parameters
    assert list(ours) == list(theirs)
    assert [(p.kind, p.default, str(p.annotation)) for p in ours.values()] == [
        (p.kind, p.default, RETYPED.get((aio, p.name), str(p.annotation)))
        for p in theirs.values()]


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=lambda c: c.__name__)
def test_every_public_method_has_a_twin(sync: type, aio: type) -> None:
    public = {name for name in dir(sync) if not name.startswith("_")} - NOT_TWINNED
    missing = sorted(name for name in public if not hasattr(aio, name))
    assert not missing
