"""What a client has done so far: counters and request timings, as plain values.

``producer.stats()`` and ``consumer.stats()`` return a :class:`ClientStats` snapshot; the
counters only grow (as Prometheus counters and OpenTelemetry's monotonic sums expect), so an
exporter forwards them as they are and lets the backend compute rates. :meth:`ClientStats.as_dict`
gives the same values as plain dicts and numbers (JSON-ready). With ``statistics.interval.ms``
and ``stats_cb`` (librdkafka's names), a client calls ``stats_cb(snapshot)`` on a thread of its
own at that interval.

What is counted where it is cheap: a record is counted with its batch (the producer) or its
poll (the consumer), a request's time with its answer; nothing is added per ``send()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ClientStats", "RequestStats"]


@dataclass(frozen=True, slots=True)
class RequestStats:
    """One API's requests: how many, how many failed, and how long their answers took.

    Attributes:
        count: Requests answered (or failed).
        errors: Of those, the ones that failed without an answer (a cut connection, a
            timeout); an answer carrying an error code counts as answered.
        total_seconds: Their summed latency, from queued to answered.
        max_seconds: The slowest one.
    """

    count: int = 0
    errors: int = 0
    total_seconds: float = 0.0
    max_seconds: float = 0.0

    @property
    def mean_seconds(self) -> float:
        """The mean latency (0.0 before any request)."""
        return self.total_seconds / self.count if self.count else 0.0


@dataclass(frozen=True, slots=True)
class ClientStats:
    """A snapshot of one client's counters (all since the client was made).

    Attributes:
        client: ``"producer"`` or ``"consumer"``.
        client_id: ``client.id``.
        records: Producer: records the brokers acknowledged. Consumer: records delivered
            by ``poll()``.
        batches: Producer: record batches acknowledged. Consumer: Fetch answers taken in.
        transactions_committed: Transactions committed (producer).
        transactions_aborted: Transactions aborted (producer).
        retries: Producer: batches sent again after a retriable error, and coordinator
            requests retried. Consumer: 0 (its retries are in ``requests[...].errors``).
        epoch_bumps: KIP-360 epoch bumps after an aborted failed transaction (producer).
        rebalances: Assignments received from the group (consumer).
        queued_bytes: Consumer: fetched bytes waiting for ``poll()`` now, every partition
            together (a gauge: ``queued.max.messages.kbytes`` bounds it, give or take an answer
            per leader). Producer: 0.
        requests: Per API name (``"Produce"``, ``"Fetch"``, ...): :class:`RequestStats`.
    """

    client: str
    client_id: str
    records: int = 0
    batches: int = 0
    transactions_committed: int = 0
    transactions_aborted: int = 0
    retries: int = 0
    epoch_bumps: int = 0
    rebalances: int = 0
    queued_bytes: int = 0
    requests: Mapping[str, RequestStats] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The snapshot as plain dicts, strs and numbers (``requests`` keyed by API name)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["requests"] = {api: {**dataclasses.asdict(stats), "mean_seconds": stats.mean_seconds}
                           for api, stats in self.requests.items()}
        return out
