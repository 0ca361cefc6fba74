"""Small immutable values shared by the sans-IO core."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["NO_IDENTITY", "NO_PRODUCER_ID", "ProducerIdentity", "TopicPartition"]

NO_PRODUCER_ID = -1
"""Kafka's producer id for "none yet"; its epoch is -1 too."""


class TopicPartition(NamedTuple):
    """One partition of one topic; hashable, ordered, and cheap to build."""

    topic: str
    partition: int


class ProducerIdentity(NamedTuple):
    """A producer's (producer id, epoch), replaced whole on every bump, never mutated.

    A response is matched to the identity it was sent under; one for an older identity is ignored.
    """

    producer_id: int
    epoch: int


NO_IDENTITY = ProducerIdentity(NO_PRODUCER_ID, -1)
"""The identity before InitProducerId has answered."""
