"""Where a transaction's round trips went: the proxy's timings of each request, summed up.

The latency proxy notes when each request arrived from the client, was written to the broker,
was answered by it and was delivered back (`eosclient.testing.proxy.Timing`, one clock for the
client and the proxy process: ``time.monotonic()``). For the timed transactions of one run, this
module counts the requests by API and splits the run's wall time in three:

- **sequential round trips**: the requests' spans (arrival to delivery) merged where they
  overlap; each merged span is one round trip the client waited for (requests pipelined
  together count once), and their number per transaction is what the floor speaks of (3 without
  KIP-890: register, produce, end);
- **broker**: time with at least one request inside the broker (written, not yet answered);
- **client**: time with no request at the proxy at all: the client's own work between an answer
  and its next request (the application's calls and the client's I/O thread).

What is left of the spans is the added latency (RTT per sequential round trip) and the proxy's
own lateness (asyncio timers wake late), shown as **proxy**.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from eosclient.errors import ApiKey

# `_proxy_process.FIELDS`, in that order.
_API_KEY, _ARRIVED, _FORWARDED, _ANSWERED, _DELIVERED = 0, 3, 4, 5, 6

# CamelCase names of the APIs a producer sends, as Kafka's docs write them.
_NAMES: Final = {
    ApiKey.PRODUCE: "Produce", ApiKey.METADATA: "Metadata",
    ApiKey.FIND_COORDINATOR: "FindCoordinator", ApiKey.INIT_PRODUCER_ID: "InitProducerId",
    ApiKey.ADD_PARTITIONS_TO_TXN: "AddPartitionsToTxn", ApiKey.ADD_OFFSETS_TO_TXN:
    "AddOffsetsToTxn", ApiKey.END_TXN: "EndTxn", ApiKey.TXN_OFFSET_COMMIT: "TxnOffsetCommit",
    ApiKey.API_VERSIONS: "ApiVersions",
}


def api_name(key: int) -> str:
    """Kafka's name for an API key."""
    try:
        return _NAMES.get(ApiKey(key)) or ApiKey(key).name
    except ValueError:
        return f"api {key}"


@dataclass(slots=True)
class Breakdown:
    """The sums over the timed transactions of one variant's runs."""

    transactions: int = 0
    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    sequential: int = 0  # merged request spans
    wall: float = 0.0  # seconds
    wire: float = 0.0
    broker: float = 0.0
    unanswered: int = 0  # requests with no delivered answer inside the window
    added: float = 0.0  # the nominal RTT times the sequential round trips

    def add(self, rows: Sequence[Sequence[Any]], start: float, end: float,
            transactions: int, rtt: float) -> None:
        """Add one run: the proxy's timing rows, the timed window, its transaction count, and
        the nominal round trip the proxy adds."""
        inside = [r for r in rows if start <= r[_ARRIVED] <= end]
        self.transactions += transactions
        self.wall += end - start
        self.requests.update(api_name(r[_API_KEY]) for r in inside)
        done = [r for r in inside if r[_DELIVERED] is not None]
        self.unanswered += len(inside) - len(done)
        spans = _merge((r[_ARRIVED], min(r[_DELIVERED], end)) for r in done)
        self.sequential += len(spans)
        self.added += len(spans) * rtt
        self.wire += sum(b - a for a, b in spans)
        self.broker += sum(b - a for a, b in _merge(
            (r[_FORWARDED], r[_ANSWERED]) for r in done if r[_ANSWERED] is not None))

    def per_transaction(self) -> dict[str, Any]:
        """Every sum divided by the number of transactions (times in ms)."""
        n = max(self.transactions, 1)
        return {
            "transactions": self.transactions,
            "requests": {k: v / n for k, v in sorted(self.requests.items())},
            "sequential_round_trips": self.sequential / n,
            "wall_ms": self.wall / n * 1e3,
            "wire_ms": self.wire / n * 1e3,
            "broker_ms": self.broker / n * 1e3,
            "client_ms": (self.wall - self.wire) / n * 1e3,
            "proxy_ms": (self.wire - self.broker - self.added) / n * 1e3,
            "unanswered": self.unanswered,
        }

    def summary(self) -> str:
        """One line: round trips, requests by API, and where the time went, per transaction."""
        if not self.transactions:
            return "no timings"
        p, n = self.per_transaction(), self.transactions
        requests = ", ".join(f"{k} {v:.2f}" for k, v in p["requests"].items())
        return (f"{p['sequential_round_trips']:.2f} sequential round trips; {requests}; "
                f"ms: wall {p['wall_ms']:.2f} = added RTT {self.added / n * 1e3:.2f} + proxy "
                f"{p['proxy_ms']:.2f} + broker {p['broker_ms']:.2f} + client "
                f"{p['client_ms']:.2f}")


def _merge(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``spans`` as disjoint spans, in order."""
    merged: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged
