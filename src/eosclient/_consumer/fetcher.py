"""The I/O thread's side of the partitions: Fetch requests per leader, and offset queries.

Runs under the consumer's lock, on the I/O thread, once per loop step. Per leader, at most one
Fetch is in flight, carrying every partition that is fetchable (:meth:`PartitionState.fetchable`:
positioned, nothing waiting to be fed, ready buffer under ``max.partition.fetch.bytes``), while
what waits for ``poll()`` in all (every partition's ready buffer and unread answer) is under
``queued.max.messages.kbytes`` (librdkafka's bound: without it, a consumer of 1,000 partitions
whose application falls behind holds up to 1,000 times ``max.partition.fetch.bytes``). Its
answer is left on each partition as a :class:`CompletedFetch` for ``poll()`` to decode and filter
on the application's thread, and the partition is fetched again as soon as ``poll()`` has taken
it in: the next response is on its way while the application works through the previous one.
An answer with no data for a partition is not handed over at all (its LSO and high watermark
are noted), so an idle partition costs the application nothing.

Every leader's answers are filtered with that broker's :class:`IndexTrust` (ARCHITECTURE.md: a
broker proves its aborted-transactions index once, for all its partitions). A broker that
answers an empty Fetch at once instead of holding it for ``fetch.max.wait.ms`` (noida-db) is
asked again only after a pause, 5 ms doubling per empty answer in a row up to 50 ms (or
``fetch.max.wait.ms``), so an idle consumer does not spin; what arrives after a quiet spell is
then seen up to that late.

Answers too large to read (over ``receive.message.max.bytes``) are refused by the connection
before their body is read, and the connection is closed. The fetcher then asks that broker for
less, in a bounded number of steps, and says so at WARNING at once (node, size, limit): each
refused answer halves the partitions per Fetch and the bytes asked for; a one-partition Fetch
refused goes straight to one byte (a broker that honours KIP-74 then sends exactly one batch);
if even that is refused, ``poll()`` raises :class:`~eosclient.errors.ResponseTooLargeError` for
the partition, naming the size to set. noida-db ignores every Fetch byte limit and sends all
that is past the position of every partition asked for, so there fewer partitions per Fetch is
what helps, and one partition whose backlog alone is too large is the error. The cap is lifted
step by step again after answers with data that fit (:data:`_RELAX_AFTER` in a row); while it
holds, the partitions take turns in the smaller Fetches, so none is left behind.

Partitions in RESET are positioned by an :class:`~eosclient._consumer.lookups.OffsetQuery`
(earliest: the log start; latest: the LSO under read_committed, else the high watermark).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from eosclient._consumer import protocol as wire
from eosclient._consumer.lookups import OffsetQuery, Step, Watermarks
from eosclient._consumer.loop import UNCHANGED, IoLoop
from eosclient._consumer.partitions import (
    Assignment,
    CompletedFetch,
    PartitionState,
    Phase,
    missing,
)
from eosclient._core.isolation import IndexTrust
from eosclient._core.types import TopicPartition
from eosclient._net.backoff import Backoff
from eosclient._net.client import Answer, NetworkClient
from eosclient._net.steps import Steps, wait_until
from eosclient.config import ConsumerConfig
from eosclient.errors import ApiKey, ResponseTooLargeError, RetriableError, error_for

__all__ = ["Cap", "Fetcher"]

log = logging.getLogger("eosclient.consumer")

_EMPTY_PAUSE: Final = 0.005  # seconds before re-asking a broker that did not hold an empty Fetch
_EMPTY_PAUSE_MAX: Final = 0.05  # doubled per empty answer in a row, up to this
_RELAX_AFTER: Final = 64  # answers that fit in a row before a node's cap is relaxed one step

Sent = list[tuple[PartitionState, int]]


@dataclass(frozen=True, slots=True)
class Cap:
    """What the fetcher asks one broker for at most, after it sent answers too large to read.

    Attributes:
        partitions: Partitions per Fetch.
        max_bytes: The Fetch's ``max_bytes``, and every partition's ``partition_max_bytes``.
    """

    partitions: int
    max_bytes: int

    @classmethod
    def below(cls, partitions: int, max_bytes: int) -> Cap | None:
        """The cap after a Fetch of ``partitions`` and ``max_bytes`` was refused: half of each,
        then one byte once down to one partition; None if that Fetch was the smallest there is
        (one partition, one byte: a broker that honours KIP-74 answers it with one batch)."""
        if partitions > 1:
            return cls(partitions // 2, max(1, max_bytes // 2))
        return cls(1, 1) if max_bytes > 1 else None

    def above(self) -> Cap:
        """One step back up, bytes faster (from one byte to 50 MiB in 7 steps); the caller
        drops the cap once it no longer limits anything."""
        return Cap(self.partitions * 2, self.max_bytes * 16)


class Fetcher:
    """Fetches for the assigned partitions, and the offset queries, on the I/O thread.

    Args:
        config: The consumer's settings.
        client: The I/O thread's network client.
        assignment: The partitions (shared under the consumer's lock).
    """

    def __init__(self, config: ConsumerConfig, client: NetworkClient,
                 assignment: Assignment) -> None:
        self._config = config
        self._client = client
        self._metadata = client.metadata
        self._assignment = assignment
        self._isolation = 1 if config.read_committed else 0
        self._max_wait = config.fetch_max_wait_ms / 1000
        self.backoff = Backoff(config.retry_backoff_ms / 1000, config.retry_backoff_max_ms / 1000)
        self._trust: dict[int, IndexTrust] = {}
        self._busy: set[int] = set()  # leaders with a Fetch in flight
        self._leader_nodes: set[int] = set()  # of the assigned partitions (_leaders())
        self._leaders_of = (-1, -1)  # (assignment version, metadata version) they were read at
        self._quiet_until: dict[int, float] = {}
        self._empty: dict[int, int] = {}  # node -> empty answers in a row, not held by it
        self._max_pause = min(self._max_wait, _EMPTY_PAUSE_MAX)
        self._queue_cap = config.queued_max_messages_kbytes * 1024
        self.caps: dict[int, Cap] = {}  # node -> what it is asked for at most (module docstring)
        self._fits: dict[int, int] = {}  # node -> answers with data read in a row under its cap
        self._turns: dict[int, int] = {}  # node -> where its next capped Fetch starts
        self.queries: list[OffsetQuery] = []  # the application's, removed by it
        self._resets: list[tuple[OffsetQuery, dict[TopicPartition, int]]] = []

    def trust(self, node: int) -> IndexTrust:
        """The :class:`IndexTrust` of broker ``node``."""
        return self._trust.setdefault(node, IndexTrust())

    def query(self, partitions: Iterable[TopicPartition], *, want_end: bool) -> OffsetQuery:
        """Start an offset query for the application (under the lock); it removes it when done."""
        query = OffsetQuery(partitions, want_end=want_end, isolation=self._isolation,
                            backoff=self.backoff)
        self.queries.append(query)
        return query

    def ends(self, tps: list[TopicPartition], loop: IoLoop, deadline: float,
             check: Callable[[], None]) -> Steps[dict[TopicPartition, Watermarks]]:
        """Where each of ``tps`` begins and ends now, asked of their leaders at once (one
        request per leader, not one per partition; steps run under the lock).

        Raises:
            KafkaTimeoutError: no answer by ``deadline``.
            EosError: the leader's error; the metadata says a topic or partition is missing.
        """
        self._metadata.want({tp.topic for tp in tps})
        query = self.query(tps, want_end=True)
        what = (f"the end offsets of {tps[0]}" if len(tps) == 1 else
                f"the end offsets of {len(tps)} partitions")
        try:
            yield from wait_until(loop, lambda: query.done, deadline, what,
                                  lambda: self.check_ends(tps, check), unchanged=UNCHANGED)
        finally:
            self.queries.remove(query)
        if query.error is not None:
            raise query.error
        return query.results

    def check_ends(self, tps: list[TopicPartition], check: Callable[[], None]) -> None:
        """What ends a wait for end offsets early: ``check()``, or the metadata saying a
        topic or partition of ``tps`` is missing.

        Raises:
            EosError: either of them.
        """
        check()
        error = missing(tps, self._metadata)
        if error is not None:
            raise error

    def step(self, now: float) -> float:
        """Send what is due; return when to be called again at the latest."""
        self._apply_resets()
        self._start_resets()
        timer = min(self._run_queries(now), self._send_fetches(now))
        if self._assignment.stale_leaders:
            self._assignment.stale_leaders = False
            self._metadata.request_update()
        return timer

    # -- fetching -----------------------------------------------------------------------------

    def _send_fetches(self, now: float) -> float:
        timer = float("inf")
        quiet_until = self._quiet_until
        for leader in self._leaders():
            if leader in self._busy:
                continue
            quiet = quiet_until.get(leader, 0.0)
            if quiet <= now:
                break
            timer = min(timer, quiet)
        else:
            # Every leader has a Fetch in flight or is paused after empty answers: nothing
            # can go out before an answer comes (its arrival steps the loop again) or the
            # pause ends. The loop steps at every poll; reading every partition each time
            # was a sixth of the consumer's time at 1,000.
            return timer
        timer = float("inf")
        bound = self._assignment.max_partition_bytes
        by_node: dict[int, list[PartitionState]] = {}
        queued = 0  # what waits for poll(), all partitions together
        for state in self._assignment:
            queued += state.queued_bytes
            if not state.fetchable(now, bound):
                if state.phase is Phase.FETCHING and state.retry_at > now:
                    timer = min(timer, state.retry_at)
                continue
            node = self._metadata.leader(state.tp)
            if node is None or node in self._busy:
                continue
            quiet = self._quiet_until.get(node, 0.0)
            if quiet > now:
                timer = min(timer, quiet)
                continue
            by_node.setdefault(node, []).append(state)
        room = self._queue_cap - queued
        if room <= 0:  # poll() takes some first; the loop steps again at every poll()
            return timer
        for node, states in by_node.items():
            self._fetch(node, states, now, room)
        return timer

    def _leaders(self) -> set[int]:
        """The nodes leading an assigned partition, as the metadata knows them now."""
        key = (self._assignment.version, self._metadata.version)
        if key != self._leaders_of:
            self._leader_nodes = {node for s in self._assignment
                                  if (node := self._metadata.leader(s.tp)) is not None}
            self._leaders_of = key
        return self._leader_nodes

    def _fetch(self, node: int, states: list[PartitionState], now: float, room: int) -> None:
        config = self._config
        states.sort(key=lambda s: -s.max_bytes)  # KIP-74: a grown partition goes first
        max_bytes, cap = min(config.fetch_max_bytes, room), self.caps.get(node)
        limits = [s.max_bytes for s in states]
        if cap is not None:  # in turns, so that partitions with data are not left behind
            turn = self._turns.get(node, 0) % len(states)
            states[:] = [*states[turn:], *states[:turn]][:cap.partitions]
            self._turns[node] = turn + len(states)
            max_bytes = min(max_bytes, cap.max_bytes)
            limits = [min(limit, cap.max_bytes) for limit in limits]
        request = wire.fetch([(s.tp, s.ready.next_fetch, limit)
                              for s, limit in zip(states, limits, strict=False)],
                             isolation=self._isolation, max_wait_ms=config.fetch_max_wait_ms,
                             min_bytes=config.fetch_min_bytes, max_bytes=max_bytes,
                             epochs=self._metadata.leader_epochs())
        sent: Sent = [(s, s.token) for s in states]
        for state in states:
            state.in_flight = True
        self._busy.add(node)
        timeout = (self._config.request_timeout_ms + config.fetch_max_wait_ms) / 1000
        self._client.send(node, request, partial(self._on_fetch, node, sent, now),
                          timeout=timeout)

    def _on_fetch(self, node: int, sent: Sent, sent_at: float, answer: Answer) -> None:
        now = time.monotonic()
        self._busy.discard(node)
        for state, _ in sent:
            state.in_flight = False
        code = answer.response.error_code if answer.error is None else 0
        refused = answer.error.__cause__ if answer.error is not None else None
        if isinstance(refused, ResponseTooLargeError) and refused.api == ApiKey.FETCH:
            self._too_large(node, sent, answer.request, refused, now)
            return
        if answer.error is not None or code:
            self._failed(sent, code, now)
            return
        wanted = {state.tp: (state, token) for state, token in sent}
        limits = {TopicPartition(t.topic, p.partition): p.partition_max_bytes
                  for t in answer.request.topics for p in t.partitions}
        budget = answer.request.max_bytes  # Kafka fills partitions in order from one budget
        handed = False
        for tp, data in wire.fetched(answer.response):
            size = len(data.records or b"")
            room, budget = min(limits.get(tp, 0), max(budget, 0)), budget - size
            entry = wanted.get(tp)
            if entry is None or entry[0].token != entry[1] or entry[0].phase is not Phase.FETCHING:
                continue
            state, token = entry
            if data.error_code or data.records:
                state.completed = CompletedFetch(data, self.trust(node), token, room)
                handed = True
            else:
                state.high_watermark = data.high_watermark
                state.last_stable_offset = data.last_stable_offset
        if handed:
            self._fitted(node)  # empty answers prove nothing: they fit whatever was asked
        if handed or now - sent_at >= self._max_wait / 2:
            self._empty.pop(node, None)
            return
        empty = self._empty[node] = self._empty.get(node, 0) + 1  # an idle broker not holding
        self._quiet_until[node] = now + min(_EMPTY_PAUSE * 2 ** min(empty - 1, 8),
                                            self._max_pause)

    def _too_large(self, node: int, sent: Sent, request: Any, refused: ResponseTooLargeError,
                   now: float) -> None:
        """The answer was over receive.message.max.bytes: ask for less, or give up at the floor."""
        self._fits.pop(node, None)
        cap = self.caps.get(node)
        where = ", ".join(f"{s.tp.topic}-{s.tp.partition}" for s, _ in sent)
        asked = (f"{len(sent)} partition(s) ({where}), max_bytes {request.max_bytes}, up to "
                 f"{max(p.partition_max_bytes for t in request.topics for p in t.partitions)} "
                 "per partition")
        lower = Cap.below(len(sent), request.max_bytes)
        if lower is None:
            state, token = sent[0]
            error = ResponseTooLargeError(
                f"node {node} answers even the smallest Fetch ({asked}) with {refused.size} "
                f"bytes, over receive.message.max.bytes ({refused.limit}): the broker ignores "
                "Fetch byte limits (noida-db does) or one batch is that large; set "
                f"receive.message.max.bytes above {refused.size} to read on",
                size=refused.size, limit=refused.limit, api=ApiKey.FETCH, node=node)
            log.warning("%s", error)
            if state.token == token:
                state.fail(error)
            return
        if cap is not None:  # an answer to an older, larger Fetch may come after a lowering
            lower = Cap(min(cap.partitions, lower.partitions), min(cap.max_bytes, lower.max_bytes))
        self.caps[node] = lower
        log.warning("node %d answered a Fetch (%s) with %d bytes, over "
                    "receive.message.max.bytes (%d); asking it for at most %d partition(s) and "
                    "%d bytes per Fetch now", node, asked, refused.size, refused.limit,
                    lower.partitions, lower.max_bytes)
        for state, _ in sent:
            state.retry_at = 0.0  # at once: the reconnect backoff paces the next attempt

    def _fitted(self, node: int) -> None:
        """An answer with data was read: after enough in a row, relax the node's cap a step."""
        cap = self.caps.get(node)
        if cap is None:
            return
        fits = self._fits[node] = self._fits.get(node, 0) + 1
        if fits < _RELAX_AFTER:
            return
        self._fits.pop(node)
        higher = cap.above()
        if higher.max_bytes >= self._config.fetch_max_bytes and higher.partitions >= len(
                self._assignment.states):
            del self.caps[node]
        else:
            self.caps[node] = higher

    def _failed(self, sent: Sent, code: int, now: float) -> None:
        """The whole Fetch failed: a cut connection, a timeout, or a top-level error code."""
        error = error_for(ApiKey.FETCH, code) if code else None
        for state, token in sent:
            if error is None or isinstance(error, RetriableError):
                state.retry_at = now + self.backoff.initial
            elif state.token == token:
                state.fail(error)
        self._assignment.stale_leaders = True

    # -- offset queries -----------------------------------------------------------------------

    def _run_queries(self, now: float) -> float:
        timer = float("inf")
        for query in [*self.queries, *(q for q, _ in self._resets)]:
            if query.done:
                continue
            for step in query.steps(now, self._leader):
                self._client.send(step.node, step.request, partial(self._on_step, query, step))
            if query.stale_leaders:
                query.stale_leaders = False
                self._metadata.request_update()
            timer = min(timer, query.next_timer())
        return timer

    def _leader(self, tp: TopicPartition) -> int | None:
        node = self._metadata.leader(tp)
        if node is None:
            self._metadata.want((tp.topic,))
        return node

    def _on_step(self, query: OffsetQuery, step: Step, answer: Answer) -> None:
        now = time.monotonic()
        if answer.error is not None:
            query.on_failure(step, answer.error, now)
        else:
            query.on_response(step, answer.response, now)

    def _start_resets(self) -> None:
        """One query per kind of reset for the partitions in RESET that none is working on."""
        busy = {tp for _, tokens in self._resets for tp in tokens}
        todo: dict[str, dict[TopicPartition, int]] = {}
        for state in self._assignment:
            if state.phase is Phase.RESET and state.tp not in busy:
                todo.setdefault(state.reset_to, {})[state.tp] = state.token
        for how, tokens in todo.items():
            query = OffsetQuery(tokens, want_end=how == "latest", isolation=self._isolation,
                                backoff=self.backoff)
            self._resets.append((query, tokens))

    def _apply_resets(self) -> None:
        """Position the partitions whose reset query finished (unless sought meanwhile)."""
        left = []
        for query, tokens in self._resets:
            if not query.done:
                left.append((query, tokens))
                continue
            for tp, token in tokens.items():
                state = self._assignment.states.get(tp)
                if state is None or state.token != token or state.phase is not Phase.RESET:
                    continue
                ends = query.results.get(tp)
                if ends is not None:
                    state.seek(ends.log_start_offset if state.reset_to == "earliest" else
                               ends.last_stable_offset if self._isolation else ends.high_watermark)
                elif query.error is not None:
                    state.fail(query.error)
        self._resets = left
