#!/usr/bin/env python3
"""The sticky assignor beside kafka-python's: time to assign, and partitions moved.

No broker: both are pure computations over one group. eosclient's ``sticky_assign`` and
kafka-python's ``StickyAssignmentExecutor`` (its ``sticky`` and ``cooperative-sticky``
assignors' algorithm, without the wire decoding) assign the same groups, side by side in one
run; the report prints each one's median time, the partitions that changed owner, and the
ratio of the times.

    .venv/bin/python benchmarks/assignors.py               # 1,000 partitions x 50 members
    .venv/bin/python benchmarks/assignors.py --partitions 5000 --members 200 --repeat 3
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka.coordinator.assignors.sticky.sticky_assignor import (
    StickyAssignmentExecutor,
    StickyAssignorMemberMetadataV1,
)
from kafka.structs import TopicPartition as KafkaTP

from eosclient._consumer.assignors import Claim, sticky_assign
from eosclient._core.types import TopicPartition

Group = tuple[dict[str, int], dict[str, list[str]], dict[str, list[TopicPartition]]]
"""(partitions per topic, topics per member, what each member owned before)."""


class _Cluster:
    """What kafka-python's executor asks of the cluster metadata."""

    def __init__(self, partitions: Mapping[str, int]) -> None:
        self._partitions = partitions

    def topics(self) -> set[str]:
        return set(self._partitions)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self._partitions[topic])) if topic in self._partitions else None


def eosclient_assign(group: Group) -> dict[str, list[TopicPartition]]:
    partitions, subscriptions, owned = group
    return sticky_assign(partitions, subscriptions,
                         claims={m: Claim(1, ps) for m, ps in owned.items()})


def kafka_python_assign(group: Group) -> dict[str, list[TopicPartition]]:
    partitions, subscriptions, owned = group
    members: dict[str, Any] = {
        m: StickyAssignorMemberMetadataV1(
            partitions=[KafkaTP(tp.topic, tp.partition) for tp in owned.get(m, [])],
            generation=1 if m in owned else -1, subscription=topics)
        for m, topics in subscriptions.items()}
    executor = StickyAssignmentExecutor(_Cluster(partitions), members)
    executor.perform_initial_assignment()
    executor.balance()
    return {m: sorted(TopicPartition(topic, p) for topic, ps in executor.get_final_assignment(m)
                      for p in ps) for m in subscriptions}


def moved(before: Mapping[str, list[TopicPartition]],
          after: Mapping[str, list[TopicPartition]]) -> int:
    owner = {tp: m for m, ps in before.items() for tp in ps}
    return sum(1 for m, ps in after.items() for tp in ps if tp in owner and owner[tp] != m)


def scenarios(partitions: int, members: int, seed: int) -> dict[str, Group]:
    """fresh (nobody owns anything), steady (nothing changed), join (one more member), leave
    (one fewer: its partitions are not counted as moved), scale out (one member owned
    everything, the others join), mixed join (members subscribed to random halves of the
    topics, one joining)."""
    topics = {f"topic-{i}": partitions // 10 for i in range(10)}
    ids = [f"member-{i:03d}" for i in range(members)]
    same = {m: sorted(topics) for m in ids}
    base = sticky_assign(topics, same)
    rng = random.Random(seed)
    mixed = {m: sorted(rng.sample(sorted(topics), 5)) for m in ids}
    mixed_base = sticky_assign(topics, mixed)
    return {
        "fresh": (topics, same, {}),
        "steady": (topics, same, base),
        "join": (topics, {**same, "member-new": sorted(topics)}, base),
        "leave": (topics, {m: same[m] for m in ids[1:]}, {m: base[m] for m in ids[1:]}),
        "scale out": (topics, same, {ids[0]: [tp for ps in base.values() for tp in ps]}),
        "mixed join": (topics, {**mixed, "member-new": sorted(rng.sample(sorted(topics), 5))},
                       mixed_base),
    }


def timed(assign: Callable[[Group], dict[str, list[TopicPartition]]], group: Group,
          repeat: int) -> tuple[float, dict[str, list[TopicPartition]]]:
    times, result = [], {}
    for _ in range(repeat):
        start = time.perf_counter()
        result = assign(group)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000, help="over 10 topics")
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{args.partitions} partitions (10 topics) x {args.members} members, median of "
          f"{args.repeat}")
    print(f"{'scenario':<12} {'eosclient ms':>13} {'moved':>6} {'kafka-python ms':>16} "
          f"{'moved':>6} {'time ratio':>11} {'spread e/k':>11}")
    for name, group in scenarios(args.partitions, args.members, args.seed).items():
        ours, ours_result = timed(eosclient_assign, group, args.repeat)
        theirs, their_result = timed(kafka_python_assign, group, args.repeat)
        spreads = [max(map(len, r.values())) - min(map(len, r.values()))
                   for r in (ours_result, their_result)]
        print(f"{name:<12} {ours * 1000:>13.1f} {moved(group[2], ours_result):>6} "
              f"{theirs * 1000:>16.1f} {moved(group[2], their_result):>6} "
              f"{theirs / ours:>10.1f}x {spreads[0]:>5}/{spreads[1]:<5}")


if __name__ == "__main__":
    main()
