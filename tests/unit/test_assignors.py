"""The range and roundrobin assignors: deterministic, balanced, every partition exactly once.

Pure functions of (partition counts, subscriptions); the properties hold for any group Hypothesis
draws, and a few hand-worked cases pin Kafka's own layouts (Java's RangeAssignor and
RoundRobinAssignor give the same answers for them).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eosclient._consumer.assignors import ASSIGNORS, range_assign, roundrobin_assign
from eosclient._core.types import TopicPartition as TP

TOPICS = ["a", "b", "c", "d"]
counts = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), min_size=1)
members = st.lists(st.text("mnopqrstuvwxyz", min_size=1, max_size=4), min_size=1, max_size=6,
                   unique=True)


@st.composite
def groups(draw: st.DrawFn, same: bool = False) -> tuple[dict[str, int], dict[str, set[str]]]:
    partitions = draw(counts)
    ids = draw(members)
    topics = st.sets(st.sampled_from(sorted(partitions)), min_size=1)
    if same:
        shared = draw(topics)
        return partitions, {m: set(shared) for m in ids}
    return partitions, {m: draw(topics) for m in ids}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@given(group=groups())
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(
        name: str, group: tuple[dict[str, int], dict[str, set[str]]]) -> None:
    partitions, subscriptions = group
    result = ASSIGNORS[name](partitions, subscriptions)
    assert set(result) == set(subscriptions)
    handed = Counter(tp for tps in result.values() for tp in tps)
    subscribed = {t for ts in subscriptions.values() for t in ts}
    expected = {TP(t, p) for t in subscribed for p in range(partitions[t])}
    assert set(handed) == expected
    assert all(n == 1 for n in handed.values())
    for member, tps in result.items():
        assert {tp.topic for tp in tps} <= subscriptions[member]


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@given(group=groups(), seed=st.integers())
def test_the_same_group_in_any_order_gets_the_same_assignment(
        name: str, group: tuple[dict[str, int], dict[str, set[str]]], seed: int) -> None:
    partitions, subscriptions = group
    shuffled_members = list(subscriptions.items())
    shuffled_topics = list(partitions.items())
    random.Random(seed).shuffle(shuffled_members)
    random.Random(seed).shuffle(shuffled_topics)
    again = ASSIGNORS[name](dict(shuffled_topics), dict(shuffled_members))
    assert again == ASSIGNORS[name](partitions, subscriptions)


@given(group=groups())
def test_range_balances_each_topic_over_its_subscribers(
        group: tuple[dict[str, int], dict[str, set[str]]]) -> None:
    partitions, subscriptions = group
    result = range_assign(partitions, subscriptions)
    for topic in {t for ts in subscriptions.values() for t in ts}:
        sizes = [sum(tp.topic == topic for tp in result[m])
                 for m, ts in subscriptions.items() if topic in ts]
        assert max(sizes) - min(sizes) <= 1


@given(group=groups(same=True))
def test_roundrobin_balances_members_with_the_same_subscription(
        group: tuple[dict[str, int], dict[str, set[str]]]) -> None:
    partitions, subscriptions = group
    sizes = [len(tps) for tps in roundrobin_assign(partitions, subscriptions).values()]
    assert max(sizes) - min(sizes) <= 1


def test_range_hands_out_consecutive_ranges_extras_first() -> None:
    result = range_assign({"a": 5, "b": 2}, {"m2": {"a", "b"}, "m1": {"a", "b"}})
    assert result == {"m1": [TP("a", 0), TP("a", 1), TP("a", 2), TP("b", 0)],
                      "m2": [TP("a", 3), TP("a", 4), TP("b", 1)]}


def test_roundrobin_deals_sorted_partitions_skipping_members_not_subscribed() -> None:
    result = roundrobin_assign({"a": 3, "b": 2}, {"x": {"a"}, "y": {"a", "b"}, "z": {"b"}})
    # The circle: a0->x, a1->y, a2 skips z (not subscribed to a) -> x, b0->y, b1->z.
    assert result == {"x": [TP("a", 0), TP("a", 2)], "y": [TP("a", 1), TP("b", 0)],
                      "z": [TP("b", 1)]}


def test_a_topic_without_partitions_or_metadata_assigns_nothing() -> None:
    for assign in ASSIGNORS.values():
        assert assign({}, {"m": {"gone"}}) == {"m": []}
        assert assign({"a": 0}, {"m": {"a"}, "n": {"a"}}) == {"m": [], "n": []}


# -- static members (KIP-345) ----------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@given(group=groups(), renamed=st.randoms(use_true_random=False))
def test_a_static_member_that_rejoins_under_a_new_member_id_keeps_its_partitions(
        name: str, group: tuple[dict[str, int], dict[str, set[str]]],
        renamed: random.Random) -> None:
    # Used to break: members were ordered by member id, so a restarted static leader (new member
    # id, same instance id) computed another layout; on noida-db, which keeps the generation, two
    # live members then owned the same partitions (duplicates under composed faults).
    partitions, subscriptions = group
    instances = {m: f"instance-{m}" for m in subscriptions}
    before = ASSIGNORS[name](partitions, subscriptions, instances)
    new_ids = {m: f"{renamed.randrange(10**6)}-{m}" for m in subscriptions}
    after = ASSIGNORS[name](partitions, {new_ids[m]: t for m, t in subscriptions.items()},
                            {new_ids[m]: i for m, i in instances.items()})
    assert {instances[m]: tps for m, tps in before.items()} == \
        {instances[m]: after[new_ids[m]] for m in subscriptions}


def test_static_members_come_first_in_instance_id_order_then_dynamic_by_member_id() -> None:
    # Java's MemberInfo order; "a" and "z" are dynamic, the two static ones sort by instance id.
    subscriptions = {"a": {"t"}, "z": {"t"}, "m1": {"t"}, "m2": {"t"}}
    instances = {"m1": "worker-2", "m2": "worker-1", "a": None}
    assert range_assign({"t": 4}, subscriptions, instances) == {
        "m2": [TP("t", 0)], "m1": [TP("t", 1)], "a": [TP("t", 2)], "z": [TP("t", 3)]}
    assert roundrobin_assign({"t": 4}, subscriptions, instances) == {
        "m2": [TP("t", 0)], "m1": [TP("t", 1)], "a": [TP("t", 2)], "z": [TP("t", 3)]}
