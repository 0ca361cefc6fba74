"""The consumer group assignors the leader runs: range and roundrobin (Kafka's eager ones).

Both are pure functions of the group's subscriptions and the partition counts, so every leader
computes the same assignment from the same input, whatever order the members or topics arrive in:
members are put in one order and topics sorted by name before anything is handed out.

The members' order is Kafka's (``AbstractPartitionAssignor.MemberInfo``): static members
(KIP-345) first, by ``group.instance.id``, then dynamic members by member id. The instance id
matters because a static member that restarts comes back under a *new* member id: ordered by
member id, the group's layout would change although its members did not. noida-db shows why that
is dangerous: when a restarted leader replaces itself under the same instance id, it keeps the
generation and applies whatever assignment the new leader sends, while the other members keep
their old partitions without being asked to rejoin. An assignor that hands out the same layout
again is the only thing that keeps two live members from owning one partition there
(docs/testing.md's broker facts; ``tests/integration/test_noida_quirks.py``).

* **range** (Java's ``RangeAssignor``): per topic, the members subscribed to it split its
  partitions into consecutive ranges; the first ``partitions % members`` get one more. Per topic
  the counts differ by at most one; across topics the first members carry the extras.
* **roundrobin** (Java's ``RoundRobinAssignor``): every subscribed partition, sorted by topic and
  partition, goes to the next member in a circle that is subscribed to its topic. With identical
  subscriptions the members' counts differ by at most one overall.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from eosclient._core.types import TopicPartition

__all__ = ["ASSIGNORS", "Assignor", "range_assign", "roundrobin_assign"]

Assignor = Callable[[Mapping[str, int], Mapping[str, Collection[str]],
                     Mapping[str, str | None]], dict[str, list[TopicPartition]]]
"""(partitions per topic, topics per member id, instance id per member id) -> partitions per
member id."""

_NO_INSTANCES: Mapping[str, str | None] = {}


def range_assign(partitions: Mapping[str, int], subscriptions: Mapping[str, Collection[str]],
                 instances: Mapping[str, str | None] = _NO_INSTANCES,
                 ) -> dict[str, list[TopicPartition]]:
    """Consecutive ranges of each topic's partitions, per topic, over its subscribers.

    Args:
        partitions: Partition count per topic; a subscribed topic missing here is not assigned.
        subscriptions: The topics each member subscribed to, by member id.
        instances: The ``group.instance.id`` of each static member, by member id (a member
            missing here, or mapped to None, is dynamic); it decides the members' order.

    Returns:
        Every member id mapped to its partitions (possibly none), sorted.
    """
    out: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
    for topic in sorted(_subscribed(subscriptions)):
        count = partitions.get(topic, 0)
        members = [m for m in _ordered(subscriptions, instances) if topic in subscriptions[m]]
        share, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = share + (1 if i < extra else 0)
            out[member] += [TopicPartition(topic, p) for p in range(start, start + size)]
            start += size
    return {member: sorted(tps) for member, tps in out.items()}


def roundrobin_assign(partitions: Mapping[str, int], subscriptions: Mapping[str, Collection[str]],
                      instances: Mapping[str, str | None] = _NO_INSTANCES,
                      ) -> dict[str, list[TopicPartition]]:
    """Every subscribed partition in order, dealt around the ordered members in a circle.

    A member not subscribed to a partition's topic is skipped for it (the circle moves on).
    Arguments and result as :func:`range_assign`.
    """
    out: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
    members = _ordered(subscriptions, instances)
    turn = 0
    for topic in sorted(_subscribed(subscriptions)):
        for p in range(partitions.get(topic, 0)):
            while topic not in subscriptions[members[turn % len(members)]]:
                turn += 1
            out[members[turn % len(members)]].append(TopicPartition(topic, p))
            turn += 1
    return out


def _ordered(subscriptions: Mapping[str, Collection[str]],
             instances: Mapping[str, str | None]) -> list[str]:
    """Member ids in Kafka's order: static members by instance id, then dynamic by member id."""
    def key(member: str) -> tuple[int, str]:
        instance = instances.get(member)
        return (1, member) if instance is None else (0, instance)
    return sorted(subscriptions, key=key)


def _subscribed(subscriptions: Mapping[str, Collection[str]]) -> set[str]:
    return {topic for topics in subscriptions.values() for topic in topics}


ASSIGNORS: Mapping[str, Assignor] = {"range": range_assign, "roundrobin": roundrobin_assign}
"""The assignors by their protocol name (the name JoinGroup carries)."""
