"""The data source writer's durable records: each batch's decision and its completion.

Kept where the sink's ledger is, in Kafka's group offset store, so the sink needs nothing but
Kafka: plain OffsetCommits (no transaction) of reserved groups on the anchor partition
(``ledgerTopic``'s, or the output topic's, partition 0). An offset is a signed 64-bit number the
group coordinator keeps; nothing else is stored with it (Tansu 0.6 drops OffsetCommit metadata,
so the decision cannot travel as text). So a decision is spread over one group per task:

====================================  ===============================================
group                                 offset
====================================  ===============================================
``<sink>.eosclient-ds.t<i>``          task ``i``'s transaction: ``pid << 16 | epoch``, + 1
                                      (0: task ``i`` has no transaction in the batch)
``<sink>.eosclient-ds.decided``       ``(batch + 1) << 20 | tasks``: THE DECISION
``<sink>.eosclient-ds.done``          ``batch + 1``: every transaction of it ended
``<sink>.eosclient-ds.gate``          the open gate's identity, coded as a task's
                                      (0: no gate open; :mod:`._gate`)
====================================  ===============================================

The entries are written before the decision, and the decision (one OffsetCommit: atomic) names
how many entries belong to it, so a decision read back always has its entries: they can be
overwritten only by the next batch's commit, which starts after this batch is done.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from eosclient._consumer import protocol
from eosclient._core.prepared import PreparedTransaction
from eosclient._core.types import TopicPartition
from eosclient._net.blocking import BlockingConnection, pool_for
from eosclient.errors import (
    ApiKey,
    ConfigError,
    KafkaConnectionError,
    KafkaTimeoutError,
    RetriableError,
    error_for,
)

__all__ = ["Decision", "Records", "gate_id", "transactional_id"]

T = TypeVar("T")
_TASK_BITS = 20
_EPOCH_BITS = 16
MAX_TASKS = 1 << _TASK_BITS
_GROUP = "group"  # the pool's kind of coordinator


def transactional_id(sink_id: str, task: int) -> str:
    """The transactional id of the writer's task ``task`` (its Spark partition)."""
    return f"{sink_id}-w{task}"


def gate_id(sink_id: str) -> str:
    """The transactional id of the sink's gate (:mod:`eosclient.spark._gate`)."""
    return f"{sink_id}-gate"


@dataclass(frozen=True, slots=True)
class Decision:
    """Batch ``batch`` is to be committed: its tasks' transactions (None: no transaction)."""

    batch: int
    transactions: tuple[PreparedTransaction | None, ...]

    def encode(self) -> int:
        return (self.batch + 1) << _TASK_BITS | len(self.transactions)


def encode_entry(prepared: PreparedTransaction | None) -> int:
    if prepared is None:
        return 0
    return (prepared.producer_id << _EPOCH_BITS | prepared.epoch) + 1


def decode_entry(sink_id: str, task: int | None, value: int | None,
                 ) -> PreparedTransaction | None:
    """Task ``task``'s entry (None: the gate's)."""
    if not value:
        return None
    value -= 1
    tid = gate_id(sink_id) if task is None else transactional_id(sink_id, task)
    return PreparedTransaction(tid, value >> _EPOCH_BITS, value & ((1 << _EPOCH_BITS) - 1))


class Records:
    """Read and write one sink's decision records (blocking; one connection per coordinator,
    taken from this process's pool for the cluster and given back at :meth:`close`, so the
    driver's reused Python workers do not connect anew each batch).

    Args:
        bootstrap_servers: The cluster.
        sink_id: Names the groups.
        anchor: The real partition the offsets are kept on.
        timeout: Seconds for each read or write, retries included.
    """

    def __init__(self, bootstrap_servers: str, sink_id: str, anchor: TopicPartition,
                 timeout: float) -> None:
        self.sink_id, self.anchor, self.timeout = sink_id, anchor, timeout
        self.pool = pool_for(bootstrap_servers)
        self._brokers = [_address(s) for s in bootstrap_servers.split(",") if s.strip()]
        self._connections: dict[tuple[str, int], BlockingConnection] = {}

    def group(self, suffix: str) -> str:
        return f"{self.sink_id}.eosclient-ds.{suffix}"

    # -- reads ----------------------------------------------------------------------------------

    def done(self) -> int | None:
        """The last batch whose transactions all ended, or None."""
        value = self._fetch(self.group("done"))
        return None if value is None else value - 1

    def decided(self) -> tuple[int, int] | None:
        """The last decision's (batch, number of tasks), or None: one read."""
        value = self._fetch(self.group("decided"))
        if value is None:
            return None
        return (value >> _TASK_BITS) - 1, value & (MAX_TASKS - 1)

    def decision(self) -> Decision | None:
        """The last decision, with its transactions (one read per task), or None."""
        header = self.decided()
        if header is None:
            return None
        batch, count = header
        return Decision(batch, tuple(
            decode_entry(self.sink_id, i, self._fetch(self.group(f"t{i}")))
            for i in range(count)))

    def gate(self) -> PreparedTransaction | None:
        """The open gate's identity, or None when no gate is open."""
        return decode_entry(self.sink_id, None, self._fetch(self.group("gate")))

    # -- writes ---------------------------------------------------------------------------------

    def decide(self, decision: Decision) -> None:
        """Write the entries, then the decision itself (the commit point)."""
        if len(decision.transactions) >= MAX_TASKS:
            raise ConfigError(f"a batch of {len(decision.transactions)} tasks is more than the "
                              f"writer records ({MAX_TASKS - 1}): repartition to fewer",
                              key="partitions")
        for i, prepared in enumerate(decision.transactions):
            self._commit(self.group(f"t{i}"), encode_entry(prepared))
        self._commit(self.group("decided"), decision.encode())

    def record_gate(self, prepared: PreparedTransaction | None) -> None:
        """Name the open gate, or none (None)."""
        self._commit(self.group("gate"), encode_entry(prepared))

    def mark_done(self, batch: int) -> None:
        self._commit(self.group("done"), batch + 1)

    def close(self) -> None:
        """Give the connections back to the pool."""
        for conn in self._connections.values():
            self.pool.give(conn)
        self._connections.clear()

    # -- the conversation -----------------------------------------------------------------------

    def _fetch(self, group: str) -> int | None:
        def ask(response: object) -> int | None:
            code, answers = protocol.read_offset_fetch(response)
            answer = answers.get(self.anchor)
            code = code or (answer.error_code if answer is not None else 0)
            if code:
                raise error_for(ApiKey.OFFSET_FETCH, code, f"group {group!r}")
            return None if answer is None else answer.offset
        return self._call(group, protocol.offset_fetch(group, [self.anchor]), ask)

    def _commit(self, group: str, offset: int) -> None:
        def ask(response: object) -> None:
            for code in protocol.read_offset_commit(response).values():
                if code:
                    raise error_for(ApiKey.OFFSET_COMMIT, code, f"group {group!r}")
        self._call(group, protocol.offset_commit(group, -1, "", {self.anchor: offset}), ask)

    def _call(self, group: str, request: object, read: Callable[[Any], T]) -> T:
        """Send ``request`` to ``group``'s coordinator and ``read`` the answer; retriable
        failures (a moved coordinator, a cut connection) are retried until the timeout."""
        deadline = time.monotonic() + self.timeout
        delay, last = 0.02, None
        while True:
            try:
                conn = self._connection(self._coordinator(group, deadline), deadline)
                response = conn.request(request, timeout=_left(deadline))
                return read(response)
            except RetriableError as exc:
                last = exc
                self.pool.forget(_GROUP, group)
            if time.monotonic() + delay >= deadline:
                raise KafkaTimeoutError(f"group {group!r}: no answer within {self.timeout:g} s "
                                        f"(last: {last!r})") from last
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _coordinator(self, group: str, deadline: float) -> tuple[str, int]:
        found: tuple[str, int] | None = self.pool.coordinator(_GROUP, group)
        if found is not None:
            return found
        conn = self._connection(self._brokers[0], deadline)
        code, node, message = protocol.read_coordinator(
            conn.request(protocol.find_coordinator(group), timeout=_left(deadline)))
        if code or node is None:
            raise error_for(ApiKey.FIND_COORDINATOR, code, message)
        found = (node.host, node.port)
        self.pool.remember(_GROUP, group, found)
        return found

    def _connection(self, address: tuple[str, int], deadline: float) -> BlockingConnection:
        conn = self._connections.get(address)
        if conn is None or conn.closed:
            try:
                conn = self.pool.take(address, timeout=_left(deadline))
            except KafkaConnectionError:
                self._brokers.append(self._brokers.pop(0))  # try the next one next time
                raise
            self._connections[address] = conn
        return conn


def _left(deadline: float) -> float:
    return max(0.01, deadline - time.monotonic())


def _address(server: str) -> tuple[str, int]:
    host, _, port = server.strip().rpartition(":")
    return host.strip("[]"), int(port)
