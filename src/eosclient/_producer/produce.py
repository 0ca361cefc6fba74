"""Produce requests: ready batches out to their leaders, answers back to the accumulator.

Private to the producer's I/O thread, called under the producer's lock except
:meth:`ProduceLane.send_outbox`, which encodes the drained batches and writes their requests (only
that thread uses the network client and touches a drained batch). One Produce request per
leader at a time per drain, up to ``max.in.flight.requests.per.connection`` in flight per broker;
each holds at most one batch per partition (Produce v3+). A batch may be drained when its
partition's leader is that broker, its retry backoff has passed, and the transaction core agrees:
``may_drain(tp, generation)`` for a new batch (registered in the open transaction, of its
generation), ``may_resend(tp)`` for a resend (also while aborting, so that every batch is
answered before EndTxn(abort): KAFKA-14053). :class:`_Gate` is that conjunction, per node.

Answers: each partition's code goes to ``RecordAccumulator.complete``, which applies the sequence
rules (:mod:`eosclient._core.sequences`); a lost answer (timeout, cut connection) is fed as
NETWORK_EXCEPTION (13): the batch is resent with the same sequence, and the broker drops the copy
if the first attempt was written. A batch that failed for good goes to the core
(``on_produce_error``), a retried one waits for ``retry.backoff.ms`` (doubling) and asks for
fresh metadata, since most retriable Produce errors mean leadership moved.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from typing import Any

from eosclient._core.accumulator import ReadyBatch, RecordAccumulator
from eosclient._core.sequences import Acked, Failed, Retry
from eosclient._core.txn import State, TransactionCore
from eosclient._core.types import TopicPartition
from eosclient._net.backoff import Backoff
from eosclient._net.client import Answer, NetworkClient
from eosclient._protocol.apis import APIS
from eosclient.config import ProducerConfig
from eosclient.errors import ApiKey, KafkaConnectionError, UnsupportedVersionError

__all__ = ["ProduceLane"]

log = logging.getLogger("eosclient.producer")

_NETWORK_EXCEPTION = 13  # what a lost answer is reported as: outcome unknown, resend
_LOST = (_NETWORK_EXCEPTION, -1, -1)
_UNSUPPORTED = (35, -1, -1)  # the broker has no Produce version this client speaks: fatal
_PRODUCE = APIS[ApiKey.PRODUCE].request
_TOPIC = _PRODUCE.TopicProduceData
_PARTITION = _TOPIC.PartitionProduceData


class ProduceLane:
    """Drains the accumulator into Produce requests and feeds their answers back.

    Args:
        config: The producer's settings.
        core: The transaction core (read for readiness, told of failures).
        acc: The accumulator.
        client: The network client.
    """

    def __init__(self, config: ProducerConfig, core: TransactionCore, acc: RecordAccumulator,
                 client: NetworkClient) -> None:
        self._core = core
        self._acc = acc
        self._client = client
        self._metadata = client.metadata
        self._txn_id = config.transactional_id
        self._timeout_ms = config.request_timeout_ms
        self._max_in_flight = config.max_in_flight_requests_per_connection
        self._max_bytes = config.max_request_size
        self._backoff = Backoff(config.retry_backoff_ms / 1000,
                                config.retry_backoff_max_ms / 1000)
        self._retry_at: dict[TopicPartition, float] = {}
        self.acked_records = self.acked_batches = self.retried_batches = 0  # stats()
        # id(request) -> (node id, the earliest delivery deadline of its batches)
        self._flights: dict[int, tuple[int, float]] = {}
        # Batches drained under the lock, one Produce request each: encoded, made into requests
        # and written by send_outbox() after it is released.
        self._outbox: list[tuple[int, dict[TopicPartition, ReadyBatch]]] = []

    def forget_retries(self) -> None:
        """The identity changed: per-partition retry backoffs no longer apply."""
        self._retry_at.clear()

    def next_timer(self, now: float) -> float:
        """When the next retry backoff or linger ends (inf if none)."""
        waits = [t for t in self._retry_at.values() if t > now]
        ready = self._acc.next_ready(now)
        if ready:  # 0 means "ready now", and an answer or a wakeup will say when it can go
            waits.append(now + ready)
        return min(waits, default=float("inf"))

    # -- out -----------------------------------------------------------------------------------

    def drain(self, now: float, *, flush: bool) -> None:
        """Send every batch that may go now, leader by leader."""
        if self._acc.next_ready(now) is None:
            return
        flush = flush or self._core.state is State.COMMITTING
        for node in set(self._metadata.leaders().values()):
            if not self._client.ready(node):
                self._client.connect(node)
                continue
            ready = self._gate(node, now)
            in_flight = self._client.in_flight(node)
            while in_flight < self._max_in_flight:
                batches = self._acc.drain(ready, now, max_bytes=self._max_bytes, flush=flush,
                                          encode=False)  # send_outbox encodes them
                if not batches:
                    break
                self._outbox.append((node, batches))
                in_flight += 1

    def send_outbox(self) -> None:
        """Send the batches :meth:`drain` took; call without the lock, before the next poll.

        Encoding the batches (their header, codec and CRC) and the request, and copying it into
        the socket, is most of the I/O thread's cost per record; outside the lock, application
        threads append meanwhile (a drained batch is this thread's alone until its answer).
        The requests go only to connections :meth:`drain` found ready, so no metadata is read
        here, and in the order the batches were drained in (which the broker's sequence
        checks rely on).
        """
        outbox, self._outbox = self._outbox, []
        for node, batches in outbox:
            encoded = {tp: self._acc.encode(ready) for tp, ready in batches.items()}
            self._client.send(node, self._request(node, encoded),
                              functools.partial(self._on_answer, encoded))

    def _gate(self, node: int, now: float) -> _Gate:
        return _Gate(self._core, self._metadata.leaders(), self._retry_at, node, now)

    def _request(self, node: int, batches: dict[TopicPartition, ReadyBatch]) -> Any:
        by_topic: dict[str, list[Any]] = {}
        for tp, ready in batches.items():
            by_topic.setdefault(tp.topic, []).append(_PARTITION(index=tp.partition,
                                                                records=ready.data))
        request = _PRODUCE(transactional_id=self._txn_id, acks=-1, timeout_ms=self._timeout_ms,
                           topic_data=[_TOPIC(name=t, partition_data=p)
                                       for t, p in by_topic.items()])
        # The batch's delivery deadline (ProducerBatch.deadline): past it while in flight, the
        # connection is closed before the batch is given up (see expire).
        deadline = min(ready.batch.deadline for ready in batches.values())
        self._flights[id(request)] = (node, deadline)
        return request

    # -- back ----------------------------------------------------------------------------------

    def _on_answer(self, batches: dict[TopicPartition, ReadyBatch], answer: Answer) -> None:
        now = time.monotonic()
        self._flights.pop(id(answer.request), None)
        lost = _UNSUPPORTED if isinstance(answer.error, UnsupportedVersionError) else _LOST
        results = {} if answer.error is not None else _results(answer.response)
        for tp, ready in batches.items():
            code, base_offset, stamp = results.get(tp, lost)
            outcome = self._acc.complete(ready, code, base_offset=base_offset,
                                         log_append_time_ms=stamp)
            if isinstance(outcome, Acked):
                self._retry_at.pop(tp, None)
                self.acked_batches += 1
                self.acked_records += ready.ticket.record_count
            elif isinstance(outcome, Retry):
                self.retried_batches += 1
                delay = self._backoff.delay(ready.ticket.attempt + 1)
                self._retry_at[tp] = now + delay
                log.info("%s-%d: a batch of %d records failed (%s); sent again in %.0f ms, "
                         "%d batches waiting", tp.topic, tp.partition, ready.ticket.record_count,
                         answer.error or f"error code {code}", delay * 1000, outcome.pending)
                self._metadata.request_update()
            elif isinstance(outcome, Failed):
                self._core.on_produce_error(outcome.error, ready.ticket.identity,
                                            ready.generation, now)

    def expire(self, now: float) -> None:
        """Give up on batches past ``delivery.timeout.ms``; report each to the core.

        A batch on the wire has its connection closed first, so no late copy of it can land
        after the transaction moved on (KAFKA-14053); its answer then comes back as lost.
        """
        late = {node for node, deadline in self._flights.values() if deadline <= now}
        for node in late:
            self._flights = {k: v for k, v in self._flights.items() if v[0] != node}
            self._client.close_node(node, KafkaConnectionError(
                f"node {node}: a batch in flight passed delivery.timeout.ms; connection closed"))
        for expiry in self._acc.expire(now):
            self._core.on_batch_expired(expiry.identity, expiry.generation, now,
                                        cause=expiry.error)


class _Gate:
    """The accumulator's drain gate for one node: the core's rules plus leader and backoff."""

    __slots__ = ("_core", "_leaders", "_node", "_now", "_retry_at")

    def __init__(self, core: TransactionCore, leaders: Mapping[TopicPartition, int],
                 retry_at: dict[TopicPartition, float], node: int, now: float) -> None:
        self._core, self._leaders, self._retry_at = core, leaders, retry_at
        self._node, self._now = node, now

    def _here(self, tp: TopicPartition) -> bool:
        return self._leaders.get(tp) == self._node and self._retry_at.get(tp, 0.0) <= self._now

    def may_drain(self, tp: TopicPartition, generation: int) -> bool:
        return self._here(tp) and self._core.may_drain(tp, generation)

    def may_resend(self, tp: TopicPartition) -> bool:
        return self._here(tp) and self._core.may_resend(tp)


def _results(response: Any) -> dict[TopicPartition, tuple[int, int, int]]:
    return {
        TopicPartition(topic.name, part.index):
            (part.error_code, part.base_offset, part.log_append_time_ms)
        for topic in response.responses
        for part in topic.partition_responses
    }
