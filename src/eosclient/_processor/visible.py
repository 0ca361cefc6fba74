"""Wait until a group's committed offsets show what a transaction committed.

On Apache Kafka a transaction's offsets are the group's once EndTxn(commit) is answered, and an
OffsetFetch with ``require_stable`` (KIP-447) waits for the markers. A broker may instead
acknowledge the commit and apply the offsets later, while ignoring ``require_stable``: Tansu 0.6
applies them only after every open transaction that wrote earlier to one of the same partitions
has ended. Whoever reads the offsets next (a replayed Spark batch reading its ledger, the
instance the group hands a partition to) would then read the old offset and redo committed
work. A committer that is about to hand over reads its offsets back first, with this.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

from eosclient._core.types import TopicPartition
from eosclient._net.backoff import Backoff
from eosclient._processor.steps import Io, Steps, drive
from eosclient.errors import KafkaTimeoutError

__all__ = ["CommittedReader", "await_committed", "committed_steps"]

log = logging.getLogger("eosclient.processor")

_BACKOFF = Backoff(0.01, 0.25)
_SLOW = 5.0  # seconds of waiting after which a WARNING says what is awaited


class CommittedReader(Protocol):
    """What :func:`await_committed` asks of a consumer (a
    :class:`~eosclient.consumer.ReadCommittedConsumer` is one): its group's committed offsets,
    read with ``require_stable``. A protocol, so this layer does not import the facade above it."""

    def committed(self, partitions: Iterable[TopicPartition], timeout: float,
                  ) -> Mapping[TopicPartition, int | None]: ...


def await_committed(consumer: CommittedReader, offsets: Mapping[TopicPartition, int],
                    timeout: float) -> None:
    """Return once the consumer's group has committed at least ``offsets`` everywhere.

    Raises:
        KafkaTimeoutError: not within ``timeout``; the message names what was read.
        EosError: the coordinator refused.
    """
    drive(committed_steps(offsets, timeout), {"consumer": consumer, "front": time})


def committed_steps(offsets: Mapping[TopicPartition, int], timeout: float) -> Steps[None]:
    """:func:`await_committed` as steps (:mod:`eosclient._processor.steps`): the ports are
    ``consumer`` (``committed``) and ``front`` (``sleep``)."""
    started = time.monotonic()
    deadline = started + timeout
    attempt = 0
    warned = False
    while True:
        read = yield Io("consumer", "committed",
                        (list(offsets), max(deadline - time.monotonic(), 0.001)))
        behind = {tp: got for tp, offset in offsets.items()
                  if (got := read[tp]) is None or got < offset}
        if not behind:
            return
        attempt += 1
        wait = _BACKOFF.delay(attempt)
        if time.monotonic() + wait > deadline:
            raise KafkaTimeoutError(f"committed offsets not applied after {timeout:.1f}s: "
                                    f"{_shown(behind, offsets)}")
        if not warned and time.monotonic() - started >= _SLOW:
            warned = True
            log.warning("the group does not show the offsets a committed transaction wrote "
                        "after %.0f s (%s); a broker may apply them late (Tansu: once every "
                        "transaction open earlier on the same partitions has ended); waiting "
                        "up to %.0f s", time.monotonic() - started, _shown(behind, offsets),
                        timeout)
        yield Io("front", "sleep", (wait,))


def _shown(behind: Mapping[TopicPartition, int | None],
           offsets: Mapping[TopicPartition, int]) -> str:
    """What the group shows of the partitions it is behind on, and what was committed."""
    return ", ".join(f"{tp.topic}/{tp.partition}: {got} (committed {offsets[tp]})"
                     for tp, got in sorted(behind.items()))
