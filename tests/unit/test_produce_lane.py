"""The producer's Produce lane without a network: what it tells the transaction core and asks
the accumulator. (Its requests and answers are covered against real brokers and the proxy.)"""

from __future__ import annotations

from typing import Any

from eosclient._core.accumulator import AccumulatorSettings, RecordAccumulator
from eosclient._core.txn import ProducerIdentity, State, TopicPartition
from eosclient._producer.produce import ProduceLane
from eosclient.config import ProducerConfig
from eosclient.errors import EosError, KafkaTimeoutError

OLD, NEW = ProducerIdentity(5, 0), ProducerIdentity(5, 1)
TP = TopicPartition("out", 0)


class Core:
    """What ProduceLane reads of the transaction core, with the expiries it was told of."""

    def __init__(self) -> None:
        self.identity, self.generation, self.state = NEW, 8, State.IN_TRANSACTION
        self.expired: list[tuple[ProducerIdentity, int, EosError | None]] = []

    def on_batch_expired(self, identity: ProducerIdentity, generation: int, now: float,
                         cause: EosError | None = None) -> None:
        self.expired.append((identity, generation, cause))


class Client:
    metadata: Any = None


def test_an_expiry_is_reported_with_its_batchs_identity_and_generation() -> None:
    # The lane reported every expiry with the core's *current* identity and generation, so a
    # batch of an earlier transaction could fail the one open now.
    core = Core()
    acc = RecordAccumulator(AccumulatorSettings(delivery_timeout_ms=1000), identity=OLD)
    acc.append(TP, None, b"late", timestamp_ms=0, now=0.0, generation=3)
    config = ProducerConfig(bootstrap_servers="localhost:9092")
    lane = ProduceLane(config, core, acc, Client())  # type: ignore[arg-type]
    lane.expire(now=5.0)
    [(identity, generation, cause)] = core.expired
    assert (identity, generation) == (OLD, 3) and isinstance(cause, KafkaTimeoutError)
