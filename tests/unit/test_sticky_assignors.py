"""The sticky assignor and cooperative-sticky's hand-over rule (KIP-429), sans-IO.

Hand-worked cases pin the rules (balance, what stays, stale and disputed claims, static members,
mixed subscriptions); seeded random groups check the invariants over many shapes, each group also
rebuilt with its members, topics and claims in shuffled orders, which must change nothing.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection, Mapping

import pytest

from eosclient._consumer.assignors import (
    ASSIGNORS,
    Claim,
    cooperative_handover,
    owners,
    sticky_assign,
)
from eosclient._core.types import TopicPartition as TP

Assignment = dict[str, list[TP]]


def tps(topic: str, *numbers: int) -> list[TP]:
    return [TP(topic, n) for n in numbers]


def claims_of(assignment: Mapping[str, Collection[TP]], generation: int = 1) -> dict[str, Claim]:
    return {m: Claim(generation, list(ps)) for m, ps in assignment.items()}


def moved(before: Mapping[str, Collection[TP]], after: Mapping[str, Collection[TP]]) -> int:
    """Partitions that changed owner (a partition new to the group does not count)."""
    owner = {tp: m for m, ps in before.items() for tp in ps}
    return sum(1 for m, ps in after.items() for tp in ps if tp in owner and owner[tp] != m)


def check_valid(partitions: Mapping[str, int], subscriptions: Mapping[str, Collection[str]],
                result: Assignment) -> None:
    """Every subscribed partition to exactly one subscriber; every member named; sorted."""
    assert set(result) == set(subscriptions)
    given = Counter(tp for ps in result.values() for tp in ps)
    wanted = {TP(t, p) for ts in subscriptions.values() for t in ts
              for p in range(partitions.get(t, 0))}
    assert set(given) == wanted and set(given.values()) <= {1}
    for member, ps in result.items():
        assert ps == sorted(ps) and all(tp.topic in subscriptions[member] for tp in ps)


def check_balanced(subscriptions: Mapping[str, Collection[str]], result: Assignment) -> None:
    """Members with the same subscription differ by at most one; and no member holds a
    partition that a subscriber of its topic, holding two fewer, could take."""
    by_subscription: dict[frozenset[str], list[int]] = {}
    for member, ts in subscriptions.items():
        by_subscription.setdefault(frozenset(ts), []).append(len(result[member]))
    assert all(max(c) - min(c) <= 1 for c in by_subscription.values())
    for ps in result.values():
        for tp in ps:
            assert all(len(result[other]) > len(ps) - 2 for other in subscriptions
                       if tp.topic in subscriptions[other])


def test_registered_under_javas_eager_name_and_fresh_groups_balance() -> None:
    assert ASSIGNORS["sticky"] is sticky_assign
    subscriptions = {m: ["t"] for m in "abc"}
    result = sticky_assign({"t": 7}, subscriptions)
    check_valid({"t": 7}, subscriptions, result)
    assert [len(result[m]) for m in "abc"] == [3, 2, 2]


def test_nothing_moves_when_nothing_changed() -> None:
    partitions = {"t": 10, "u": 5}
    subscriptions = {m: ["t", "u"] for m in "abcd"}
    first = sticky_assign(partitions, subscriptions)
    # An assignment other than the one it would make from scratch: still kept whole.
    shuffled = {"a": tps("t", 0, 1, 2, 3), "b": tps("t", 4, 5, 6, 7),
                "c": tps("t", 8, 9) + tps("u", 0, 1), "d": tps("u", 2, 3, 4)}
    for before in (first, shuffled):
        assert sticky_assign(partitions, subscriptions, claims=claims_of(before)) == before


def test_a_member_joining_takes_only_its_share() -> None:
    subscriptions = {"a": ["t"], "b": ["t"]}
    before = {"a": tps("t", *range(6)), "b": tps("t", *range(6, 12))}
    after = sticky_assign({"t": 12}, {**subscriptions, "c": ["t"]}, claims=claims_of(before))
    assert [len(after[m]) for m in "abc"] == [4, 4, 4]
    assert moved(before, after) == 4  # exactly c's share: 2 from a, 2 from b
    assert set(after["a"]) < set(before["a"]) and set(after["b"]) < set(before["b"])


def test_a_member_leaving_moves_only_its_partitions() -> None:
    subscriptions = {m: ["t"] for m in "abc"}
    before = sticky_assign({"t": 12}, subscriptions)
    gone = {"a": ["t"], "b": ["t"]}
    after = sticky_assign({"t": 12}, gone, claims=claims_of(before))  # c's claim not sent
    assert [len(after[m]) for m in "ab"] == [6, 6]
    assert set(before["a"]) < set(after["a"]) and set(before["b"]) < set(after["b"])


def test_the_fewest_moves_when_owners_are_uneven() -> None:
    # a owned 10 of 12, b 2; balance needs 4 moved, not a reshuffle.
    before = {"a": tps("t", *range(10)), "b": tps("t", 10, 11)}
    after = sticky_assign({"t": 12}, {"a": ["t"], "b": ["t"]}, claims=claims_of(before))
    assert [len(after[m]) for m in "ab"] == [6, 6] and moved(before, after) == 4


def test_a_stale_claim_loses_to_the_higher_generation() -> None:
    # b missed a rebalance (generation 3) and still lists t-0 and t-1, which a got in 4.
    claims = {"a": Claim(4, tps("t", 0, 1)), "b": Claim(3, tps("t", 0, 1, 2)),
              "c": Claim(4, tps("t", 3))}
    assert owners(claims) == {TP("t", 0): "a", TP("t", 1): "a", TP("t", 2): "b",
                              TP("t", 3): "c"}
    after = sticky_assign({"t": 6}, {m: ["t"] for m in "abc"}, claims=claims)
    assert after["a"] == tps("t", 0, 1) and TP("t", 2) in after["b"]


def test_a_claim_disputed_within_one_generation_is_nobodys() -> None:
    claims = {"a": Claim(4, tps("t", 0, 1)), "b": Claim(4, tps("t", 1, 2))}
    assert owners(claims) == {TP("t", 0): "a", TP("t", 2): "b"}
    # ... unless a higher generation settles it, whatever order the claims come in
    settled = {"c": Claim(5, tps("t", 1)), **claims}
    assert owners(settled)[TP("t", 1)] == "c" == owners(dict(reversed(settled.items())))[
        TP("t", 1)]


def test_claims_on_gone_topics_partitions_and_members_are_ignored() -> None:
    claims = {"a": Claim(2, tps("t", 0, 1) + tps("gone", 0) + tps("t", 9, -1)),
              "left": Claim(2, tps("t", 2, 3))}
    after = sticky_assign({"t": 4}, {"a": ["t"], "b": ["t"]}, claims=claims)
    check_valid({"t": 4}, {"a": ["t"], "b": ["t"]}, after)
    assert after == {"a": tps("t", 0, 1), "b": tps("t", 2, 3)}


def test_a_member_that_unsubscribed_a_topic_loses_its_claim_on_it() -> None:
    claims = {"a": Claim(2, tps("t", 0, 1) + tps("u", 0)), "b": Claim(2, tps("u", 1))}
    after = sticky_assign({"t": 2, "u": 2}, {"a": ["t"], "b": ["t", "u"]}, claims=claims)
    assert after == {"a": tps("t", 0, 1), "b": tps("u", 0, 1)}


def test_static_members_are_ordered_by_instance_id_not_member_id() -> None:
    # A static member that restarts comes back under a new member id: same layout.
    before = sticky_assign({"t": 5}, {"m-1": ["t"], "m-2": ["t"]},
                           {"m-1": "worker-b", "m-2": "worker-a"})
    after = sticky_assign({"t": 5}, {"m-1": ["t"], "m-9": ["t"]},
                          {"m-1": "worker-b", "m-9": "worker-a"})
    assert before["m-2"] == after["m-9"] and before["m-1"] == after["m-1"]
    assert len(before["m-2"]) == 3  # worker-a sorts first: the extra partition is its


def test_different_subscriptions_share_the_common_topic() -> None:
    partitions = {"t": 6, "u": 6}
    subscriptions = {"a": ["t"], "b": ["t", "u"], "c": ["u"]}
    result = sticky_assign(partitions, subscriptions)
    check_valid(partitions, subscriptions, result)
    check_balanced(subscriptions, result)
    assert sorted(len(ps) for ps in result.values()) == [4, 4, 4]
    # b owned everything, then a and c joined: each takes its share of its own topic
    before = {"b": tps("t", *range(6)) + tps("u", *range(6))}
    after = sticky_assign(partitions, subscriptions, claims=claims_of(before))
    check_balanced(subscriptions, after)
    assert moved(before, after) == 8 and [len(after[m]) for m in "abc"] == [4, 4, 4]


def test_a_member_subscribed_to_nothing_that_exists_gets_nothing() -> None:
    result = sticky_assign({"t": 3}, {"a": ["t"], "b": ["missing"]})
    assert result == {"a": tps("t", 0, 1, 2), "b": []}


def test_a_thousand_partitions_over_fifty_members() -> None:
    # The size the issue names; a quadratic step would show here as a slow test, not a failure.
    partitions = {f"topic-{i}": 100 for i in range(10)}
    subscriptions = {f"member-{i:02d}": list(partitions) for i in range(50)}
    first = sticky_assign(partitions, subscriptions)
    check_valid(partitions, subscriptions, first)
    assert {len(ps) for ps in first.values()} == {20}
    joined = sticky_assign(partitions, {**subscriptions, "member-50": list(partitions)},
                           claims=claims_of(first))
    assert moved(first, joined) == len(joined["member-50"]) == 19
    check_balanced({**subscriptions, "member-50": list(partitions)}, joined)


def test_fifty_members_taking_over_from_one() -> None:
    # Scale out: every partition moves but the first member's share, and no more.
    partitions = {f"topic-{i}": 100 for i in range(10)}
    subscriptions = {f"member-{i:02d}": list(partitions) for i in range(50)}
    everything = [TP(t, p) for t, n in partitions.items() for p in range(n)]
    after = sticky_assign(partitions, subscriptions, claims={"member-00": Claim(3, everything)})
    check_valid(partitions, subscriptions, after)
    assert {len(ps) for ps in after.values()} == {20}
    assert moved({"member-00": everything}, after) == 980


# -- cooperative-sticky's hand-over --------------------------------------------------------------


def test_a_moving_partition_is_withheld_from_its_new_owner_until_revoked() -> None:
    before = {"a": tps("t", 0, 1, 2), "b": tps("t", 3, 4, 5)}
    claims = claims_of(before, 4)
    target = sticky_assign({"t": 6}, {m: ["t"] for m in "abc"}, claims=claims)
    first = cooperative_handover(target, claims)
    assert first.assignment["c"] == [] and first.withheld == sorted(target["c"])
    assert first.revoked == {m: sorted(set(before[m]) - set(target[m])) for m in "ab"} | {
        "c": []}
    assert all(set(first.assignment[m]) == set(target[m]) for m in "ab")  # kept, not revoked
    # The second rebalance: a and b join again owning what they kept; c gets what waited.
    claims = claims_of(first.assignment, 5)
    second = cooperative_handover(sticky_assign({"t": 6}, {m: ["t"] for m in "abc"},
                                                claims=claims), claims)
    assert second.assignment == target and second.withheld == [] and second.revoked == {
        m: [] for m in "abc"}


def test_the_partitions_of_a_member_that_left_move_at_once() -> None:
    claims = {"a": Claim(3, tps("t", 0)), "gone": Claim(3, tps("t", 1))}
    handover = cooperative_handover({"a": tps("t", 0, 1)}, claims)
    assert handover == ({"a": tps("t", 0, 1)}, {"a": []}, [])


def test_a_stale_claimant_revokes_while_the_owner_keeps_its_partition() -> None:
    claims = {"a": Claim(4, tps("t", 0)), "b": Claim(3, tps("t", 0, 1))}
    handover = cooperative_handover({"a": tps("t", 0), "b": tps("t", 1)}, claims)
    assert handover.assignment == {"a": tps("t", 0), "b": tps("t", 1)}
    assert handover.revoked == {"a": [], "b": tps("t", 0)} and handover.withheld == []


def test_a_disputed_partition_is_withheld_from_whoever_gets_it() -> None:
    # Two members claim t-0 in one generation: neither may be trusted to have let it go.
    claims = {"a": Claim(4, tps("t", 0)), "b": Claim(4, tps("t", 0))}
    handover = cooperative_handover({"a": tps("t", 0), "b": []}, claims)
    assert handover.assignment == {"a": [], "b": []} and handover.withheld == tps("t", 0)
    assert handover.revoked == {"a": tps("t", 0), "b": tps("t", 0)}


# -- seeded random groups -------------------------------------------------------------------------


def random_group(rng: random.Random) -> tuple[dict[str, int], dict[str, list[str]],
                                             dict[str, str | None]]:
    topic_names = [f"t{i}" for i in range(rng.randint(1, 5))]
    partitions = {t: rng.randint(0, 30) for t in topic_names}
    members = [f"m{i}" for i in rng.sample(range(100), rng.randint(1, 12))]
    same = rng.random() < 0.5
    shared = rng.sample(topic_names, rng.randint(1, len(topic_names)))
    subscriptions = {m: shared if same else rng.sample(topic_names,
                                                       rng.randint(1, len(topic_names)))
                     for m in members}
    instances = {m: (f"i{rng.randint(0, 50)}-{m}" if rng.random() < 0.3 else None)
                 for m in members}
    return partitions, subscriptions, instances


def shuffled(rng: random.Random, mapping: Mapping[str, list[object]]) -> dict[str, list[object]]:
    items = [(k, rng.sample(v, len(v))) for k, v in mapping.items()]
    rng.shuffle(items)
    return dict(items)


@pytest.mark.parametrize("seed", range(200))
def test_random_groups_rebalance_validly_balanced_sticky_and_deterministic(seed: int) -> None:
    rng = random.Random(seed)
    partitions, subscriptions, instances = random_group(rng)
    first = sticky_assign(partitions, subscriptions, instances)
    check_valid(partitions, subscriptions, first)
    check_balanced(subscriptions, first)
    # Unchanged group: nothing moves.
    assert sticky_assign(partitions, subscriptions, instances, claims_of(first)) == first
    # Change it: one member leaves, one joins, a topic grows; claims in a random order, some
    # of them stale (an older generation claiming partitions another member now has).
    changed = dict(subscriptions)
    if len(changed) > 1:
        del changed[rng.choice(sorted(changed))]
    changed[f"new{seed}"] = rng.sample(sorted(partitions), rng.randint(1, len(partitions)))
    grown = {t: n + rng.randint(0, 3) for t, n in partitions.items()}
    claims = claims_of(first, 7)
    victim = rng.choice(sorted(first))
    if first[victim]:
        claims[f"stale{seed}"] = Claim(6, first[victim][:2])
        changed[f"stale{seed}"] = sorted(grown)
    after = sticky_assign(grown, changed, instances, claims)
    check_valid(grown, changed, after)
    check_balanced(changed, after)
    # Stickiness: a member keeps every partition it held, or it is at or above its peers' share.
    for member, held in first.items():
        if member in after and not set(held) <= set(after[member]):
            lost = [tp for tp in held if tp not in after[member]]
            assert all(any(len(after[o]) <= len(after[member]) + 1 for o in changed
                           if tp.topic in changed[o] and o != member) for tp in lost)
    # Determinism: the same group in any order gives the same answer.
    again = sticky_assign(dict(reversed(grown.items())),
                          shuffled(rng, changed),  # type: ignore[arg-type]
                          dict(reversed(instances.items())),
                          {m: Claim(c.generation, rng.sample(list(c.partitions),
                                                             len(c.partitions)))
                           for m, c in reversed(claims.items())})
    assert again == after
    # The hand-over never gives a partition to a member while another still claims it.
    handover = cooperative_handover(after, claims)
    still = {tp: m for m, c in claims.items() if m in changed for tp in c.partitions
             if tp not in handover.revoked[m]}
    for member, ps in handover.assignment.items():
        assert set(ps) <= set(after[member])
        assert all(still.get(tp, member) == member for tp in ps)
    assert sorted(tp for m in changed for tp in after[m]
                  if tp not in handover.assignment[m]) == handover.withheld


@pytest.mark.parametrize("seed", range(200))
def test_random_equal_subscriptions_move_no_more_than_balance_requires(seed: int) -> None:
    # With one subscription the fewest moves are known: the members that owned the most take
    # the (partitions % members) larger shares, everybody keeps up to their share.
    rng = random.Random(seed)
    topics = {f"t{i}": rng.randint(1, 40) for i in range(rng.randint(1, 4))}
    members = [f"m{i}" for i in range(rng.randint(1, 10))]
    before = sticky_assign(topics, {m: list(topics) for m in members})
    # Some leave, some join, and the owners' shares are made uneven by hand-written moves.
    stay = rng.sample(members, rng.randint(1, len(members)))
    owned = {m: list(before[m]) for m in stay}
    for _ in range(rng.randint(0, 20)):
        giver, taker = rng.choice(stay), rng.choice(stay)
        if owned[giver]:
            owned[taker].append(owned[giver].pop(rng.randrange(len(owned[giver]))))
    after_members = stay + [f"new{i}" for i in range(rng.randint(0, 4))]
    after = sticky_assign(topics, {m: list(topics) for m in after_members},
                          claims=claims_of(owned))
    total, n = sum(topics.values()), len(after_members)
    counts = sorted((len(owned.get(m, [])) for m in after_members), reverse=True)
    shares = [total // n + (1 if i < total % n else 0) for i in range(n)]
    kept = sum(min(c, q) for c, q in zip(counts, shares, strict=True))
    assert moved(owned, after) == sum(counts) - kept


@pytest.mark.parametrize("seed", range(200))
def test_random_cooperative_rebalances_settle_and_never_share_a_partition(seed: int) -> None:
    # KIP-429's promise: the first rebalance revokes what moves, the next hands it over, and
    # no partition ever has two holders (a member lets go of what it revokes before it joins
    # again; a withheld partition is in nobody's assignment). The second rebalance places the
    # withheld partitions afresh (as Java's does): with one subscription that is the end;
    # with different ones the local balance may move one more partition (a third rebalance,
    # the most seen over 2,000 seeds).
    rng = random.Random(seed)
    partitions, subscriptions, instances = random_group(rng)
    first = sticky_assign(partitions, subscriptions, instances)
    changed = {m: ts for m, ts in subscriptions.items() if rng.random() < 0.8} or subscriptions
    changed |= {f"new{i}": rng.sample(sorted(partitions), rng.randint(1, len(partitions)))
                for i in range(rng.randint(0, 3))}
    claims = claims_of({m: ps for m, ps in first.items() if m in changed}, 3)
    rounds = 0
    while True:
        rounds += 1
        target = sticky_assign(partitions, changed, instances, claims)
        handover = cooperative_handover(target, claims)
        for m in changed:  # what a member keeps stays in its assignment
            owned = set(claims[m].partitions) if m in claims else set()
            assert owned - set(handover.revoked[m]) <= set(handover.assignment[m])
        holders = Counter(tp for ps in handover.assignment.values() for tp in ps)
        assert set(holders.values()) <= {1}
        claims = claims_of(handover.assignment, 3 + rounds)
        if not handover.withheld and not any(handover.revoked.values()):
            assert handover.assignment == target
            break
    one_subscription = len({frozenset(ts) for ts in changed.values()}) == 1
    assert rounds <= (2 if one_subscription else 3)
