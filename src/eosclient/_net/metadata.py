"""The cluster as Metadata describes it: brokers, topics, partitions and their leaders.

Sans-IO: :class:`Metadata` decides *when* a Metadata request is due and *what* it asks, and
reads the answer; :class:`~eosclient._net.client.NetworkClient` sends it. A request is due when
the application asked about a topic it has not seen (:meth:`Metadata.want`), when a caller
reports stale leadership (:meth:`Metadata.request_update`, e.g. after NOT_LEADER_OR_FOLLOWER), and
when the data is older than ``metadata.max.age.ms``; never more often than the retry backoff
allows, and one request at a time.

A pattern subscription needs every topic's name: after :meth:`Metadata.want_all`, every
request asks for all topics, and :attr:`Metadata.all_topics` holds the names the latest answer
listed (internal topics left out, as Java's ``exclude.internal.topics`` does by default), so the
pattern is matched again on every refresh (at least every ``metadata.max.age.ms``).

Leader epochs (KIP-320): an answer (Metadata v7+) gives each partition's leader epoch, which
only grows while the topic lives. A broker whose view lags may answer with an older leader
than an answer already read (a cluster's brokers learn of a leader election at different
times): such a partition keeps the newer leader, and another request is due after the backoff,
rather than send the client back to a broker that no longer leads it. A topic recreated under
the same name (a new topic id, Metadata v10+) starts its epochs again. The epochs are also
sent with Fetch (``current_leader_epoch``), so a broker that is not at that epoch says so
(FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH: retried after a refresh) instead of answering
from a view older or newer than the client's.

Error codes are classified only by :func:`eosclient.errors.error_for`: a retriable topic error
(UNKNOWN_TOPIC_OR_PARTITION while a topic is being created, LEADER_NOT_AVAILABLE) keeps the
topic wanted and asks again after the backoff; anything else is kept as the topic's error for
callers to raise (:meth:`Metadata.topic_error`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from eosclient._core.types import TopicPartition
from eosclient._protocol.apis import APIS
from eosclient.errors import ApiKey, EosError, RetriableError, error_for, is_success

__all__ = ["Metadata"]

_NO_LEADER = -1


class Metadata:
    """Topics wanted, what the last answer said about them, and when to ask again.

    Args:
        max_age: Seconds after which the data is refreshed (``metadata.max.age.ms``).
        backoff: Seconds between a failed or forced request and the next one.
        auto_create: Ask brokers to create missing topics (the producer's default in Java).
    """

    def __init__(self, *, max_age: float, backoff: float, auto_create: bool = True) -> None:
        self._max_age = max_age
        self._backoff = backoff
        self._auto_create = auto_create
        self._wanted: set[str] = set()
        self._leaders: dict[TopicPartition, int] = {}
        self._epochs: dict[TopicPartition, int] = {}  # KIP-320: the leader epoch of each
        self._topic_ids: dict[str, object] = {}  # v10+: a new id is a new topic (epochs anew)
        self._counts: dict[str, int] = {}
        self._errors: dict[str, EosError] = {}
        self._last_errors: dict[str, EosError] = {}
        self.nodes: dict[int, tuple[str, int]] = {}
        self.updated_at = float("-inf")  # the last successful answer
        self._attempted_at = float("-inf")
        self._forced = False
        self.in_flight = False
        self.version = 0  # bumped by every answer, so waiters can tell a new one came
        self.listing = False  # every request asks for all topics (want_all)
        #: The topics the latest all-topics answer named (None before one).
        self.all_topics: frozenset[str] | None = None
        self._listed = False  # the request in flight asks for all topics

    # -- questions -----------------------------------------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        """How many partitions ``topic`` has, or None while unknown."""
        return self._counts.get(topic)

    def leader(self, tp: TopicPartition) -> int | None:
        """The node id leading ``tp``, or None if unknown or leaderless."""
        return self._leaders.get(tp)

    def topic_error(self, topic: str) -> EosError | None:
        """The non-retriable error the last answer gave for ``topic``, if any."""
        return self._errors.get(topic)

    def last_error(self, topic: str) -> EosError | None:
        """The error the last answer gave for ``topic``, retriable ones included (a consumer
        assigned a topic that does not exist is told UNKNOWN_TOPIC_OR_PARTITION), or None."""
        return self._last_errors.get(topic)

    def leaders(self) -> Mapping[TopicPartition, int]:
        """Every known partition's leader."""
        return self._leaders

    def leader_epochs(self) -> Mapping[TopicPartition, int]:
        """Every known partition's leader epoch (KIP-320); a partition without one (an
        answer before Metadata v7, a broker that gives -1) is absent."""
        return self._epochs

    # -- when to ask ---------------------------------------------------------------------------

    def want(self, topics: Iterable[str]) -> None:
        """Keep ``topics`` in every request; a topic not known yet forces one."""
        for topic in topics:
            if topic not in self._wanted:
                self._wanted.add(topic)
                self._forced = True

    def want_all(self) -> None:
        """Ask for every topic from now on (a pattern subscription); forces a request."""
        if not self.listing:
            self.listing = self._forced = True

    def request_update(self) -> None:
        """Ask again as soon as the backoff allows (leadership moved, a topic is missing)."""
        self._forced = True

    def next_update(self, now: float) -> float:
        """When a request is due (may be in the past); inf while one is in flight."""
        if self.in_flight:
            return float("inf")
        earliest = self._attempted_at + self._backoff
        if self._forced:
            return earliest
        if not self._wanted and not self.listing and self.updated_at == float("-inf"):
            return float("inf")  # nothing asked about yet: no traffic
        return max(earliest, self.updated_at + self._max_age)

    def due(self, now: float) -> bool:
        """Whether to send a Metadata request now."""
        return self.next_update(now) <= now

    # -- asking and hearing --------------------------------------------------------------------

    def build_request(self, now: float) -> Any:
        """The Metadata request for the wanted topics; marks one in flight."""
        self.in_flight, self._attempted_at, self._forced = True, now, False
        cls = APIS[ApiKey.METADATA].request
        self._listed = self.listing
        topics = None if self.listing else [
            cls.MetadataRequestTopic(name=t) for t in sorted(self._wanted)]
        return cls(topics=topics, allow_auto_topic_creation=self._auto_create,
                   include_cluster_authorized_operations=False,
                   include_topic_authorized_operations=False)

    def on_failure(self) -> None:
        """The request got no answer: ask again after the backoff."""
        self.in_flight, self._forced = False, True

    def on_response(self, response: Any, now: float) -> None:
        """Read an answer: brokers, and each topic's partitions and leaders."""
        self.in_flight = False
        self.nodes = {b.node_id: (b.host, b.port) for b in response.brokers}
        for topic in response.topics:
            self._read_topic(topic)
        if self._listed:
            self.all_topics = frozenset(
                t.name for t in response.topics
                if is_success(ApiKey.METADATA, t.error_code) and not getattr(t, "is_internal",
                                                                             False))
        self.updated_at = now
        self.version += 1

    def _read_topic(self, topic: Any) -> None:
        name = topic.name
        if not is_success(ApiKey.METADATA, topic.error_code):
            error = error_for(ApiKey.METADATA, topic.error_code)
            self._last_errors[name] = error
            if isinstance(error, RetriableError):
                self._forced = True
            else:
                self._errors[name] = error
            return
        self._errors.pop(name, None)
        self._last_errors.pop(name, None)
        self._counts[name] = len(topic.partitions)
        topic_id = getattr(topic, "topic_id", None)
        if topic_id and self._topic_ids.get(name, topic_id) != topic_id:
            self._epochs = {tp: e for tp, e in self._epochs.items() if tp.topic != name}
        if topic_id:
            self._topic_ids[name] = topic_id
        for part in topic.partitions:
            tp = TopicPartition(name, part.partition_index)
            epoch = getattr(part, "leader_epoch", -1)
            if 0 <= epoch < self._epochs.get(tp, -1):  # KIP-320: a view older than ours
                self._forced = True
            elif part.leader_id == _NO_LEADER:
                self._leaders.pop(tp, None)
                self._forced = True
            else:
                self._leaders[tp] = part.leader_id
                if epoch >= 0:
                    self._epochs[tp] = epoch
