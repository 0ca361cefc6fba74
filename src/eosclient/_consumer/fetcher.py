"""The I/O thread's side of the partitions: Fetch requests per leader, and offset queries.

Runs under the consumer's lock, on the I/O thread, once per loop step. Per leader, at most one
Fetch is in flight, carrying every partition that is fetchable (:meth:`PartitionState.fetchable`:
positioned, nothing waiting to be fed, ready buffer under ``max.partition.fetch.bytes``). Its
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

Partitions in RESET are positioned by an :class:`~eosclient._consumer.lookups.OffsetQuery`
(earliest: the log start; latest: the LSO under read_committed, else the high watermark).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Final

from eosclient._consumer import protocol as wire
from eosclient._consumer.lookups import Ends, OffsetQuery, Step
from eosclient._consumer.loop import IoLoop
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
from eosclient.config import ConsumerConfig
from eosclient.errors import ApiKey, RetriableError, error_for

__all__ = ["Fetcher"]

_EMPTY_PAUSE: Final = 0.005  # seconds before re-asking a broker that did not hold an empty Fetch
_EMPTY_PAUSE_MAX: Final = 0.05  # doubled per empty answer in a row, up to this

Sent = list[tuple[PartitionState, int]]


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
        self._quiet_until: dict[int, float] = {}
        self._empty: dict[int, int] = {}  # node -> empty answers in a row, not held by it
        self._max_pause = min(self._max_wait, _EMPTY_PAUSE_MAX)
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

    def ends(self, tp: TopicPartition, loop: IoLoop, deadline: float,
             check: Callable[[], None]) -> Ends:
        """Where ``tp`` begins and ends now (the application's thread, under the lock).

        Raises:
            KafkaTimeoutError: no answer by ``deadline``.
            EosError: the leader's error; the metadata says the topic or partition is missing.
        """
        self._metadata.want((tp.topic,))
        query = self.query([tp], want_end=True)

        def checked() -> None:
            check()
            error = missing([tp], self._metadata)
            if error is not None:
                raise error

        try:
            loop.wait_until(lambda: query.done, deadline, f"the end offsets of {tp}", checked)
        finally:
            self.queries.remove(query)
        if query.error is not None:
            raise query.error
        return query.results[tp]

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
        bound = self._assignment.max_partition_bytes
        by_node: dict[int, list[PartitionState]] = {}
        for state in self._assignment:
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
        for node, states in by_node.items():
            self._fetch(node, states, now)
        return timer

    def _fetch(self, node: int, states: list[PartitionState], now: float) -> None:
        config = self._config
        states.sort(key=lambda s: -s.max_bytes)  # KIP-74: a grown partition goes first
        request = wire.fetch([(s.tp, s.ready.next_fetch, s.max_bytes) for s in states],
                             isolation=self._isolation, max_wait_ms=config.fetch_max_wait_ms,
                             min_bytes=config.fetch_min_bytes, max_bytes=config.fetch_max_bytes)
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
        if answer.error is not None or code:
            self._failed(sent, code, now)
            return
        wanted = {state.tp: (state, token) for state, token in sent}
        handed = False
        for tp, data in wire.fetched(answer.response):
            entry = wanted.get(tp)
            if entry is None or entry[0].token != entry[1] or entry[0].phase is not Phase.FETCHING:
                continue
            state, token = entry
            if data.error_code or data.records:
                state.completed = CompletedFetch(data, self.trust(node), token)
                handed = True
            else:
                state.high_watermark = data.high_watermark
                state.last_stable_offset = data.last_stable_offset
        if handed or now - sent_at >= self._max_wait / 2:
            self._empty.pop(node, None)
            return
        empty = self._empty[node] = self._empty.get(node, 0) + 1  # an idle broker not holding
        self._quiet_until[node] = now + min(_EMPTY_PAUSE * 2 ** min(empty - 1, 8),
                                            self._max_pause)

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
