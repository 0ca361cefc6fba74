"""The consumer's requests and responses, as kafka-python objects; and the consumer protocol.

Private to the consumer. Requests are built without a version: the I/O layer negotiates one per
broker and kafka-python encodes only the fields that version has, so fields of every version in
``eosclient._protocol.apis`` are set (FindCoordinator's ``key`` for v0-v3 and
``coordinator_keys`` for v4; OffsetFetch's top-level ``group_id``/``topics`` for v1-v7 and
``groups`` for v8; LeaveGroup's ``member_id`` for v0-v2 and ``members`` for v3+). A static
member's ``group_instance_id`` (KIP-345) goes where the version has the field (JoinGroup v5+,
SyncGroup and Heartbeat v3+, OffsetCommit v7+, LeaveGroup v3+) and is dropped below. Readers
return plain values and error codes; classifying codes is :mod:`eosclient.errors`' job.

The *consumer protocol* is what JoinGroup and SyncGroup carry as opaque bytes when
``protocol_type`` is ``"consumer"``: each member's subscription (its topics) in JoinGroup, each
member's assignment (its partitions) in SyncGroup. kafka-python's generated
``ConsumerProtocolSubscription``/``ConsumerProtocolAssignment`` encode them, a version header
first; subscriptions of newer versions (Java's v3, with owned partitions) decode at the newest
version kafka-python knows.

A subscription says what the member owns for the sticky assignors (KIP-429): v1 adds
``owned_partitions``, v2 the ``generation_id`` they were assigned in (so the leader can tell a
stale claim from a current one), v3 the ``rack_id``. An eager member sends v1 with nothing owned
(it gave everything up before joining, as Java's eager consumer does); a member that states its
ownership sends v3, the version Java's consumer sends (rack null). Every version down to v0
decodes (:func:`read_member_subscription`); a field the version lacks reads as "not said".

Java's sticky assignors also say it in ``user_data``, where the leader must look for members of
other clients (:func:`read_claim`): the eager ``sticky`` sends nothing owned (it revoked all)
and puts its previous assignment and generation there (``StickyAssignorUserData`` v1, no
version header; v0 lacks the generation), and ``cooperative-sticky`` puts its generation there
(an int32), for leaders that read subscriptions older than v2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData
from kafka.protocol.consumer import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from eosclient._core.types import TopicPartition
from eosclient._protocol.apis import APIS
from eosclient._protocol.fetch_request import FetchRequest
from eosclient.errors import ApiKey, ProtocolError

__all__ = [
    "CONSUMER_PROTOCOL",
    "EARLIEST",
    "Node",
    "Offset",
    "Subscription",
    "assignment_bytes",
    "by_topic",
    "fetch",
    "fetched",
    "find_coordinator",
    "heartbeat",
    "join_group",
    "leave_group",
    "list_offsets",
    "offset_commit",
    "offset_fetch",
    "read_assignment",
    "read_claim",
    "read_coordinator",
    "read_list_offsets",
    "read_member_subscription",
    "read_offset_commit",
    "read_offset_fetch",
    "read_subscription",
    "sticky_user_data",
    "subscription_bytes",
    "sync_group",
]

CONSUMER_PROTOCOL: Final = "consumer"
EARLIEST: Final = -2
"""ListOffsets' timestamp for the log start offset."""

_GROUP_KEY: Final = 0  # FindCoordinator key_type: 0 = group, 1 = transaction
_SUBSCRIPTION_VERSION: Final = 1
_OWNING_SUBSCRIPTION_VERSION: Final = 3  # owned partitions (v1), generation (v2), rack (v3)
_NO_GENERATION: Final = -1
_ASSIGNMENT_VERSION: Final = 1
_NO_OFFSET: Final = -1


class Node(NamedTuple):
    """A broker, as FindCoordinator names it."""

    node_id: int
    host: str
    port: int


class Offset(NamedTuple):
    """One partition's answer in an OffsetFetch or ListOffsets response."""

    error_code: int
    offset: int | None  # None: no committed offset (OffsetFetch answered -1)


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partition numbers grouped by topic, both sorted and each once (requests list them so)."""
    out: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


# -- the consumer protocol ------------------------------------------------------------------------


class Subscription(NamedTuple):
    """A member's JoinGroup metadata, decoded."""

    topics: list[str]
    owned: list[TopicPartition]  # sorted; empty before v1 or when the member owns nothing
    generation: int  # the generation ``owned`` was assigned in; -1 when not said (v0, v1)
    user_data: bytes | None


def subscription_bytes(topics: Iterable[str], *, owned: Iterable[TopicPartition] | None = None,
                       generation: int = _NO_GENERATION) -> bytes:
    """A member's JoinGroup metadata: its topics, sorted.

    Without ``owned``: version 1, owning nothing (an eager member). With ``owned`` (possibly
    empty): version 3, the partitions the member holds and the ``generation`` it got them in.
    """
    names = sorted(set(topics))
    if owned is None:
        data = ConsumerProtocolSubscription(topics=names, user_data=None, owned_partitions=[])
        return bytes(data.encode(version=_SUBSCRIPTION_VERSION, header=True))
    entries = [ConsumerProtocolSubscription.TopicPartition(topic=topic, partitions=numbers)
               for topic, numbers in by_topic(owned).items()]
    data = ConsumerProtocolSubscription(topics=names, user_data=None, owned_partitions=entries,
                                        generation_id=generation, rack_id=None)
    return bytes(data.encode(version=_OWNING_SUBSCRIPTION_VERSION, header=True))


def read_member_subscription(data: bytes) -> Subscription:
    """Everything in a member's JoinGroup metadata, of any version.

    Raises:
        ProtocolError: the bytes are not a consumer protocol subscription.
    """
    try:
        decoded = ConsumerProtocolSubscription.decode(data, header=True)
    except Exception as exc:  # kafka-python raises assorted types for short or bad data
        raise ProtocolError(f"a member's subscription does not decode: {exc!r}") from exc
    owned = getattr(decoded, "owned_partitions", None) or []
    generation = getattr(decoded, "generation_id", None)
    return Subscription(
        list(decoded.topics),
        sorted({TopicPartition(entry.topic, p) for entry in owned for p in entry.partitions}),
        _NO_GENERATION if generation is None else int(generation),
        None if decoded.user_data is None else bytes(decoded.user_data))


def read_subscription(data: bytes) -> list[str]:
    """The topics in a member's JoinGroup metadata.

    Raises:
        ProtocolError: the bytes are not a consumer protocol subscription.
    """
    return read_member_subscription(data).topics


def sticky_user_data(owned: Iterable[TopicPartition], generation: int) -> bytes:
    """The ``user_data`` Java's eager ``StickyAssignor`` sends: its previous assignment and
    generation (``StickyAssignorUserData`` v1, without a version header)."""
    entries = [StickyAssignorUserData.TopicPartition(topic=topic, partitions=numbers)
               for topic, numbers in by_topic(owned).items()]
    data = StickyAssignorUserData(previous_assignment=entries, generation=generation)
    return bytes(data.encode(version=1, header=False))


def read_claim(subscription: Subscription, assignor: str) -> tuple[int, list[TopicPartition]]:
    """(generation, partitions) that a member claims to own, read as the Java client of the
    chosen ``assignor`` writes it; (-1, []) when it claims nothing or its user data does not
    decode (Java's leader then ignores it too).

    ``sticky``: the subscription's owned partitions if it lists any, else the previous
    assignment in its user data (v1, else v0 without a generation). ``cooperative-sticky``: the
    owned partitions, with the subscription's generation (v2+) or else the int32 generation in
    its user data. Other assignors claim nothing.
    """
    if assignor == "sticky" and not subscription.owned:
        for version in (1, 0):
            try:
                data = StickyAssignorUserData.decode(subscription.user_data or b"",
                                                     version=version, header=False)
            except Exception:  # kafka-python raises assorted types for short or bad data
                continue
            owned = sorted({TopicPartition(entry.topic, p)
                            for entry in data.previous_assignment for p in entry.partitions})
            return getattr(data, "generation", _NO_GENERATION), owned
        return _NO_GENERATION, []
    if assignor not in ("sticky", "cooperative-sticky"):
        return _NO_GENERATION, []
    generation = subscription.generation
    user_data = subscription.user_data
    if generation == _NO_GENERATION and user_data is not None and len(user_data) == 4:
        generation = int.from_bytes(user_data, "big", signed=True)
    return generation, list(subscription.owned)


def assignment_bytes(partitions: Iterable[TopicPartition]) -> bytes:
    """A member's SyncGroup assignment."""
    entries = [ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=numbers)
               for topic, numbers in by_topic(partitions).items()]
    data = ConsumerProtocolAssignment(assigned_partitions=entries, user_data=None)
    return bytes(data.encode(version=_ASSIGNMENT_VERSION, header=True))


def read_assignment(data: bytes | None) -> list[TopicPartition]:
    """The partitions in a SyncGroup answer's assignment (empty bytes: none), sorted.

    Raises:
        ProtocolError: the bytes are not a consumer protocol assignment.
    """
    if not data:
        return []
    try:
        decoded = ConsumerProtocolAssignment.decode(data, header=True)
    except Exception as exc:  # kafka-python raises assorted types for short or bad data
        raise ProtocolError(f"the group's assignment does not decode: {exc!r}") from exc
    return sorted(TopicPartition(entry.topic, p) for entry in decoded.assigned_partitions
                  for p in entry.partitions)


# -- group coordinator requests -------------------------------------------------------------------


def find_coordinator(group_id: str) -> Any:
    """FindCoordinator for a consumer group."""
    return APIS[ApiKey.FIND_COORDINATOR].request(key=group_id, key_type=_GROUP_KEY,
                                                 coordinator_keys=[group_id])


def read_coordinator(response: Any) -> tuple[int, Node | None, str | None]:
    """(error code, the coordinator or None, the broker's message) of a FindCoordinator answer."""
    entry = response.coordinators[0] if getattr(response, "coordinators", None) else response
    if entry.error_code:
        return entry.error_code, None, entry.error_message
    return 0, Node(entry.node_id, entry.host, entry.port), None


def join_group(group_id: str, member_id: str, *, session_timeout_ms: int,
               rebalance_timeout_ms: int, protocols: Iterable[tuple[str, bytes]],
               group_instance_id: str | None = None) -> Any:
    """JoinGroup offering ``protocols`` (assignor name, subscription bytes), preferred first;
    ``group_instance_id`` makes the member static (KIP-345, v5+)."""
    cls = APIS[ApiKey.JOIN_GROUP].request
    return cls(group_id=group_id, session_timeout_ms=session_timeout_ms,
               rebalance_timeout_ms=rebalance_timeout_ms, member_id=member_id,
               group_instance_id=group_instance_id, protocol_type=CONSUMER_PROTOCOL,
               protocols=[cls.JoinGroupRequestProtocol(name=name, metadata=metadata)
                          for name, metadata in protocols],
               reason=None)


def sync_group(group_id: str, generation_id: int, member_id: str, protocol_name: str,
               assignments: Mapping[str, bytes], *,
               group_instance_id: str | None = None) -> Any:
    """SyncGroup; the leader sends every member's assignment, the others none."""
    cls = APIS[ApiKey.SYNC_GROUP].request
    return cls(group_id=group_id, generation_id=generation_id, member_id=member_id,
               group_instance_id=group_instance_id, protocol_type=CONSUMER_PROTOCOL,
               protocol_name=protocol_name,
               assignments=[cls.SyncGroupRequestAssignment(member_id=m, assignment=a)
                            for m, a in sorted(assignments.items())])


def heartbeat(group_id: str, generation_id: int, member_id: str, *,
              group_instance_id: str | None = None) -> Any:
    """Heartbeat for this generation."""
    return APIS[ApiKey.HEARTBEAT].request(group_id=group_id, generation_id=generation_id,
                                          member_id=member_id,
                                          group_instance_id=group_instance_id)


def leave_group(group_id: str, member_id: str, *, group_instance_id: str | None = None,
                reason: str = "the consumer is closing") -> Any:
    """LeaveGroup for this member (v0-v2 ``member_id``, v3+ ``members``)."""
    cls = APIS[ApiKey.LEAVE_GROUP].request
    return cls(group_id=group_id, member_id=member_id, members=[cls.MemberIdentity(
        member_id=member_id, group_instance_id=group_instance_id, reason=reason)])


# -- offsets --------------------------------------------------------------------------------------


def offset_commit(group_id: str, generation_id: int, member_id: str,
                  offsets: Mapping[TopicPartition, int], *,
                  group_instance_id: str | None = None) -> Any:
    """OffsetCommit under this generation (-1 and "" for a consumer outside the group)."""
    cls = APIS[ApiKey.OFFSET_COMMIT].request
    topic_cls = cls.OffsetCommitRequestTopic
    part_cls = topic_cls.OffsetCommitRequestPartition
    topics = [topic_cls(name=topic, partitions=[
        part_cls(partition_index=p, committed_offset=offsets[TopicPartition(topic, p)],
                 committed_leader_epoch=-1, commit_timestamp=-1, committed_metadata="")
        for p in numbers]) for topic, numbers in by_topic(offsets).items()]
    return cls(group_id=group_id, generation_id_or_member_epoch=generation_id,
               member_id=member_id, group_instance_id=group_instance_id, retention_time_ms=-1,
               topics=topics)


def read_offset_commit(response: Any) -> dict[TopicPartition, int]:
    """The error code per partition of an OffsetCommit answer."""
    return {TopicPartition(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}


def offset_fetch(group_id: str, partitions: Iterable[TopicPartition]) -> Any:
    """OffsetFetch with ``require_stable`` (KIP-447): offsets of open transactions are refused
    (UNSTABLE_OFFSET_COMMIT) rather than answered with the last committed one."""
    cls = APIS[ApiKey.OFFSET_FETCH].request
    grouped = by_topic(partitions)
    old = [cls.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in grouped.items()]
    group_cls = cls.OffsetFetchRequestGroup
    new = [group_cls.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
           for t, ps in grouped.items()]
    return cls(group_id=group_id, topics=old, require_stable=True, groups=[group_cls(
        group_id=group_id, member_id=None, member_epoch=-1, topics=new)])


def read_offset_fetch(response: Any) -> tuple[int, dict[TopicPartition, Offset]]:
    """(group error code, per-partition answers) of an OffsetFetch answer (v1-v7 or v8)."""
    groups = getattr(response, "groups", None)
    if groups:
        group_code, topics = groups[0].error_code, groups[0].topics
    else:
        group_code, topics = getattr(response, "error_code", 0) or 0, response.topics
    answers = {}
    for t in topics or ():
        for p in t.partitions:
            offset = None if p.committed_offset == _NO_OFFSET else p.committed_offset
            answers[TopicPartition(t.name, p.partition_index)] = Offset(p.error_code, offset)
    return group_code, answers


def list_offsets(partitions: Iterable[TopicPartition], timestamp: int, isolation: int) -> Any:
    """ListOffsets (v2+: with ``isolation_level``) for ``timestamp`` in every partition."""
    cls = APIS[ApiKey.LIST_OFFSETS].request
    part_cls = cls.ListOffsetsTopic.ListOffsetsPartition
    topics = [cls.ListOffsetsTopic(name=topic, partitions=[
        part_cls(partition_index=p, current_leader_epoch=-1, timestamp=timestamp)
        for p in numbers]) for topic, numbers in by_topic(partitions).items()]
    return cls(replica_id=-1, isolation_level=isolation, topics=topics, timeout_ms=0)


def read_list_offsets(response: Any) -> dict[TopicPartition, Offset]:
    """The offset (or error code) per partition of a ListOffsets answer."""
    return {TopicPartition(t.name, p.partition_index): Offset(p.error_code, p.offset)
            for t in response.topics for p in t.partitions}


def fetch(partitions: Iterable[tuple[TopicPartition, int, int]], *, isolation: int,
          max_wait_ms: int, min_bytes: int, max_bytes: int,
          epochs: Mapping[TopicPartition, int] | None = None) -> FetchRequest:
    """Fetch (v4+) of ``(partition, fetch offset, partition max bytes)``, in the order given
    (KIP-74: only the first partition may exceed its limit), without a fetch session; each
    partition at its leader epoch in ``epochs`` (KIP-320, v9+), -1 (unchecked) if absent.
    Written by :mod:`eosclient._protocol.fetch_request`, not kafka-python (its docstring
    says why)."""
    return FetchRequest(partitions, isolation=isolation, max_wait_ms=max_wait_ms,
                        min_bytes=min_bytes, max_bytes=max_bytes, epochs=epochs)


def fetched(response: Any) -> Iterable[tuple[TopicPartition, Any]]:
    """Each partition's data in a Fetch answer."""
    for topic in response.responses:
        for data in topic.partitions:
            yield TopicPartition(topic.topic, data.partition_index), data
