"""The consumer group assignors the leader runs: range and roundrobin (Kafka's eager ones).

Both are pure functions of the group's subscriptions and the partition counts, so every leader
computes the same assignment from the same input, whatever order the members or topics arrive in:
members are sorted by member id and topics by name before anything is handed out.

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

Assignor = Callable[[Mapping[str, int], Mapping[str, Collection[str]]],
                    dict[str, list[TopicPartition]]]
"""(partitions per topic, topics per member id) -> partitions per member id."""


def range_assign(partitions: Mapping[str, int],
                 subscriptions: Mapping[str, Collection[str]]) -> dict[str, list[TopicPartition]]:
    """Consecutive ranges of each topic's partitions, per topic, over its subscribers.

    Args:
        partitions: Partition count per topic; a subscribed topic missing here is not assigned.
        subscriptions: The topics each member subscribed to, by member id.

    Returns:
        Every member id mapped to its partitions (possibly none), sorted.
    """
    out: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
    for topic in sorted(_subscribed(subscriptions)):
        count = partitions.get(topic, 0)
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        share, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = share + (1 if i < extra else 0)
            out[member] += [TopicPartition(topic, p) for p in range(start, start + size)]
            start += size
    return {member: sorted(tps) for member, tps in out.items()}


def roundrobin_assign(partitions: Mapping[str, int], subscriptions: Mapping[str, Collection[str]],
                      ) -> dict[str, list[TopicPartition]]:
    """Every subscribed partition in order, dealt around the sorted members in a circle.

    A member not subscribed to a partition's topic is skipped for it (the circle moves on).
    Arguments and result as :func:`range_assign`.
    """
    out: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
    members = sorted(subscriptions)
    turn = 0
    for topic in sorted(_subscribed(subscriptions)):
        for p in range(partitions.get(topic, 0)):
            while topic not in subscriptions[members[turn % len(members)]]:
                turn += 1
            out[members[turn % len(members)]].append(TopicPartition(topic, p))
            turn += 1
    return out


def _subscribed(subscriptions: Mapping[str, Collection[str]]) -> set[str]:
    return {topic for topics in subscriptions.values() for topic in topics}


ASSIGNORS: Mapping[str, Assignor] = {"range": range_assign, "roundrobin": roundrobin_assign}
"""The assignors by their protocol name (the name JoinGroup carries)."""
