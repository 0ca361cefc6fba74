"""The consumer group assignors the leader runs: range, roundrobin and sticky (Kafka's eager
ones), and the assignment and hand-over rule of cooperative-sticky (KIP-429).

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
* **sticky** (Java's ``StickyAssignor``; :func:`sticky_assign`): balanced, and moving as few
  partitions as balance allows from the owners the members claim (:class:`Claim`: their
  subscription's owned partitions and generation). See the theory of operation below.
* **cooperative-sticky** (KIP-429; Java's ``CooperativeStickyAssignor``, librdkafka's only sticky
  assignor; :func:`cooperative_sticky_assign`): the same assignment, handed over in two
  rebalances by :func:`cooperative_handover`. A member that offers only this assignor follows
  the cooperative protocol (the membership keeps its partitions across a rejoin and revokes
  only those that move: :mod:`eosclient._consumer.membership`).

Sticky, theory of operation
---------------------------

1. *Who owns what.* Each member's claim counts for the partitions it lists; a partition claimed
   by several members belongs to the claimant of the highest generation (the others' claims are
   stale: they missed a rebalance, or lost their generation and have not heard yet); claimed by
   several at the same highest generation, it belongs to none of them (two members cannot both
   have been given it in one generation, so neither claim is trusted; Java does the same). A
   claim counts only while its member still subscribes to the topic and the partition exists.
2. *Keep.* Every member keeps what it owns.
3. *Fill.* The partitions nobody owns (new ones, those of members that left, unsubscribed or
   disputed ones) go one by one to the subscribed member holding the fewest, the partitions
   with the fewest possible takers first (they have the least choice), ties by the members'
   order.
4. *Balance.* While some member holds a partition that another subscriber of its topic, holding
   at least two fewer, could take, the fullest such member gives one to the emptiest such
   subscriber: a partition it was given in step 3 if it has one, else one it owned. Every move
   shrinks the sum of the squared counts, so this ends; and when it ends, members with the same
   subscription differ by at most one (each could take any of the other's partitions). With
   one subscription the moves are the fewest balance allows (the members that owned most keep
   the larger shares): with nothing changed, the claims come back as they were; a member
   joining takes only its share; one leaving moves only its partitions. With different
   subscriptions the balance is local: a move that only a chain would allow (a gives to b so
   that b can give to c) is not made.

The result depends only on the inputs' contents: members are taken in the order above, topics
and partitions sorted. Steps 3 and 4 find the next member from heaps (the emptiest per set of
subscribers, the fullest overall) and step 4 a member's next partition from per-topic queues,
so a move costs O(topics x log members): 1,000 partitions over 50 members assign in about a
millisecond, and 50 members taking over from one in about ten (``benchmarks/assignors.py``).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Collection, Mapping
from typing import Final, NamedTuple

from eosclient._core.types import TopicPartition

__all__ = [
    "ASSIGNORS",
    "COOPERATIVE",
    "COOPERATIVE_STICKY",
    "STICKY",
    "Assignor",
    "Claim",
    "Handover",
    "cooperative_handover",
    "cooperative_sticky_assign",
    "owners",
    "range_assign",
    "roundrobin_assign",
    "sticky_assign",
]

STICKY: Final = "sticky"
"""Java's protocol name of the eager sticky assignor."""
COOPERATIVE_STICKY: Final = "cooperative-sticky"
"""librdkafka's and Java's protocol name of the cooperative sticky assignor."""

Assignor = Callable[[Mapping[str, int], Mapping[str, Collection[str]],
                     Mapping[str, str | None], Mapping[str, "Claim"]],
                    dict[str, list[TopicPartition]]]
"""(partitions per topic, topics per member id, instance id per member id, what each member
claims to own) -> partitions per member id. range and roundrobin ignore the claims."""

_NO_INSTANCES: Mapping[str, str | None] = {}


class Claim(NamedTuple):
    """What a member says it owns: its subscription's owned partitions, and the generation it was
    given them in (-1 when its subscription does not say: v0 and v1)."""

    generation: int
    partitions: Collection[TopicPartition]


_NO_CLAIMS: Mapping[str, Claim] = {}


def range_assign(partitions: Mapping[str, int], subscriptions: Mapping[str, Collection[str]],
                 instances: Mapping[str, str | None] = _NO_INSTANCES,
                 claims: Mapping[str, Claim] = _NO_CLAIMS,
                 ) -> dict[str, list[TopicPartition]]:
    """Consecutive ranges of each topic's partitions, per topic, over its subscribers.

    Args:
        partitions: Partition count per topic; a subscribed topic missing here is not assigned.
        subscriptions: The topics each member subscribed to, by member id.
        instances: The ``group.instance.id`` of each static member, by member id (a member
            missing here, or mapped to None, is dynamic); it decides the members' order.
        claims: Ignored (an eager assignor computes afresh; :func:`sticky_assign` reads them).

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
                      claims: Mapping[str, Claim] = _NO_CLAIMS,
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


def sticky_assign(partitions: Mapping[str, int], subscriptions: Mapping[str, Collection[str]],
                  instances: Mapping[str, str | None] = _NO_INSTANCES,
                  claims: Mapping[str, Claim] = _NO_CLAIMS) -> dict[str, list[TopicPartition]]:
    """A balanced assignment that keeps as many partitions with their owners as balance allows.

    See the module docstring's theory of operation. Without ``claims`` (an eager membership that
    reports nothing owned) it is a balanced assignment from scratch.

    Args:
        partitions, subscriptions, instances: As :func:`range_assign`.
        claims: What each member claims to own, by member id; claims of ids not in
            ``subscriptions`` (members no longer in the group) are ignored.

    Returns:
        Every member id mapped to its partitions (possibly none), sorted.
    """
    members = _ordered(subscriptions, instances)
    rank = {member: i for i, member in enumerate(members)}
    takers = {topic: [m for m in members if topic in subscriptions[m]]
              for topic in sorted(_subscribed(subscriptions)) if partitions.get(topic, 0) > 0}
    held: dict[str, set[TopicPartition]] = {member: set() for member in members}
    owned = {tp: member for tp, member in owners(claims, subscriptions).items()
             if tp.topic in subscriptions[member]
             and 0 <= tp.partition < partitions.get(tp.topic, 0)}
    for tp, member in owned.items():
        held[member].add(tp)
    free = [TopicPartition(topic, p) for topic in takers for p in range(partitions[topic])]
    _fill([tp for tp in free if tp not in owned], held, takers, rank)
    _balance(held, takers, rank, owned)
    return {member: sorted(held[member]) for member in subscriptions}


def _fill(free: list[TopicPartition], held: dict[str, set[TopicPartition]],
          takers: Mapping[str, list[str]], rank: Mapping[str, int]) -> None:
    """Step 3 of the theory of operation: each partition nobody owns to the subscriber of its
    topic holding the fewest, the partitions with the fewest possible takers first.

    One heap per set of subscribers; counts only grow here, so an entry whose count is behind
    its member's is refreshed when it reaches the top.
    """
    free.sort(key=lambda tp: len(takers[tp.topic]))  # stable: topics and partitions stay sorted
    heaps: dict[tuple[str, ...], list[tuple[int, int, str]]] = {}
    for tp in free:
        group = tuple(takers[tp.topic])
        heap = heaps.get(group)
        if heap is None:
            heap = heaps[group] = [(len(held[m]), rank[m], m) for m in group]
            heapq.heapify(heap)
        while heap[0][0] != len(held[heap[0][2]]):
            _, r, m = heapq.heappop(heap)
            heapq.heappush(heap, (len(held[m]), r, m))
        _, r, m = heap[0]
        held[m].add(tp)
        heapq.heapreplace(heap, (len(held[m]), r, m))


def _balance(held: dict[str, set[TopicPartition]], takers: Mapping[str, list[str]],
             rank: Mapping[str, int], owned: Mapping[TopicPartition, str]) -> None:
    """Step 4 of the theory of operation: one partition at a time, from the fullest member that
    can give one to a subscriber of its topic holding at least two fewer, until none can.

    Always the fullest: draining one member to balance would overshoot (two members of 6 and a
    newcomer: the first would give 3 and take one back from the second, 5 moves, not 4). The
    members are kept in heaps (the fullest overall; the emptiest per set of subscribers) and
    each member's partitions in per-topic queues, best to give first, so a move costs
    O(topics x log members), not a look at every member and partition.
    """
    balance = _Balance(held, takers, rank, owned)
    stuck: list[tuple[int, int, str]] = []  # givers with no move since the last move
    while (entry := balance.fullest()) is not None:
        count, giver = -entry[0], entry[2]
        if count - balance.emptiest() < 2:
            return  # nobody holds two fewer than this member, or than any after it
        move = balance.move(giver, count)
        if move is None:
            stuck.append(entry)
            continue
        balance.apply(giver, *move)
        balance.restore(stuck)
        stuck.clear()


class _Balance:
    """The state of step 4: who holds what, and the heaps and queues that find the next move.

    Heap entries are (count, rank, member) tuples (the count negated in the fullest-first
    heap); a member's entries are pushed again whenever its count changes, and an entry whose
    count is no longer the member's is dropped when it reaches the top.
    """

    def __init__(self, held: dict[str, set[TopicPartition]], takers: Mapping[str, list[str]],
                 rank: Mapping[str, int], owned: Mapping[TopicPartition, str]) -> None:
        self.held, self.rank, self.owned = held, rank, owned
        self.group = {topic: tuple(members) for topic, members in takers.items()}
        self.groups_of: dict[str, list[tuple[str, ...]]] = {}
        self.low: dict[tuple[str, ...], list[tuple[int, int, str]]] = {}
        for group in sorted(set(self.group.values())):
            self.low[group] = [(len(held[m]), rank[m], m) for m in group]
            heapq.heapify(self.low[group])
            for m in group:
                self.groups_of.setdefault(m, []).append(group)
        self.high = [(-len(ps), rank[m], m) for m, ps in held.items()]
        heapq.heapify(self.high)
        self.sizes: dict[int, int] = {}
        for ps in held.values():
            self.sizes[len(ps)] = self.sizes.get(len(ps), 0) + 1
        self.queues: dict[str, dict[str, list[TopicPartition]]] = {}

    def fullest(self) -> tuple[int, int, str] | None:
        """Take the fullest member's entry off its heap (None: no member left to try)."""
        while self.high and -self.high[0][0] != len(self.held[self.high[0][2]]):
            heapq.heappop(self.high)
        return heapq.heappop(self.high) if self.high else None

    def emptiest(self) -> int:
        return min(self.sizes)

    def restore(self, entries: list[tuple[int, int, str]]) -> None:
        for entry in entries:
            heapq.heappush(self.high, entry)

    def move(self, giver: str, count: int) -> tuple[TopicPartition, str] | None:
        """The partition ``giver`` should give and to whom, or None if balance needs nothing
        from it: to the emptiest subscriber of any of its topics, if two or more below it (the
        emptiest over all its topics, so that a member subscribed to two topics feeds the
        members of each in turn); of the partitions it could take, one ``giver`` did not own
        before if any, the lowest first."""
        best: tuple[int, int, str] | None = None
        heads: list[TopicPartition] = []
        for topic, queue in self._queues(giver).items():
            if not queue:
                continue
            low = self.low[self.group[topic]]
            while len(self.held[low[0][2]]) != low[0][0]:
                heapq.heappop(low)
            top = low[0]
            if top[2] == giver or top[0] > count - 2:
                continue
            if best is None or top < best:
                best, heads = top, [queue[0]]
            elif top == best:
                heads.append(queue[0])
        if best is None:
            return None
        return min(heads, key=self._key(giver)), best[2]

    def apply(self, giver: str, tp: TopicPartition, taker: str) -> None:
        self.queues[giver][tp.topic].remove(tp)  # its head: a short shift
        for member, step in ((giver, -1), (taker, 1)):
            before = len(self.held[member])
            self.sizes[before] -= 1
            if not self.sizes[before]:
                del self.sizes[before]
            self.sizes[before + step] = self.sizes.get(before + step, 0) + 1
        self.held[giver].remove(tp)
        self.held[taker].add(tp)
        if taker in self.queues:
            bisect.insort(self.queues[taker].setdefault(tp.topic, []), tp, key=self._key(taker))
        for member in (giver, taker):
            n, r = len(self.held[member]), self.rank[member]
            heapq.heappush(self.high, (-n, r, member))
            for group in self.groups_of.get(member, ()):
                heapq.heappush(self.low[group], (n, r, member))

    def _queues(self, member: str) -> dict[str, list[TopicPartition]]:
        queues = self.queues.get(member)
        if queues is None:
            queues = self.queues[member] = {}
            for tp in sorted(self.held[member], key=self._key(member)):
                queues.setdefault(tp.topic, []).append(tp)
        return queues

    def _key(self, member: str) -> Callable[[TopicPartition], tuple[bool, TopicPartition]]:
        return lambda tp: (self.owned.get(tp) == member, tp)


def owners(claims: Mapping[str, Claim],
           members: Collection[str] | None = None) -> dict[TopicPartition, str]:
    """Each claimed partition's owner: its claimant of the highest generation, if only one
    member claims it at that generation (step 1 of the theory of operation).

    Args:
        claims: What each member claims, by member id.
        members: The members in the group; claims of others are ignored (None: all count).
    """
    best: dict[TopicPartition, tuple[int, str]] = {}
    disputed: set[TopicPartition] = set()
    for member, claim in claims.items():
        if members is not None and member not in members:
            continue
        for tp in set(claim.partitions):
            current = best.get(tp)
            if current is None or claim.generation > current[0]:
                best[tp] = (claim.generation, member)
                disputed.discard(tp)
            elif claim.generation == current[0]:
                disputed.add(tp)
    return {tp: member for tp, (_, member) in best.items() if tp not in disputed}


class Handover(NamedTuple):
    """One cooperative rebalance's outcome (:func:`cooperative_handover`)."""

    assignment: dict[str, list[TopicPartition]]
    """What SyncGroup gives each member now: its target, less the partitions still owned by
    another member."""
    revoked: dict[str, list[TopicPartition]]
    """What each member must give up now: what it claimed and is not given."""
    withheld: list[TopicPartition]
    """Partitions that move: in nobody's assignment now, handed over in the next rebalance."""


def cooperative_handover(target: Mapping[str, Collection[TopicPartition]],
                         claims: Mapping[str, Claim]) -> Handover:
    """KIP-429's rule: a partition moving from one member to another is withheld from the new
    owner in this rebalance, so that no two members ever hold it at once.

    The membership uses it so when it speaks the cooperative protocol: every member joins
    with what it owns and its generation (a v3 subscription); the leader computes ``target``
    with :func:`sticky_assign` over those claims, sends :attr:`Handover.assignment` in SyncGroup;
    each member compares what it owns with what it was given, calls ``on_revoke`` with just
    :attr:`Handover.revoked`'s partitions (the others keep working) and ``on_assign`` with just
    the new ones; a member that revoked anything joins again at once, and that second
    rebalance, finding the withheld partitions claimed by nobody, hands them over. A leader
    that finds :attr:`Handover.withheld` non-empty knows a second rebalance will follow. The
    second places the withheld partitions afresh: with one subscription that is the end; with
    different subscriptions it may move one more partition, and a third rebalance follows
    (the most seen in 2,000 seeded random groups).

    A partition stays with a member the claims resolve it to (:func:`owners`) even if a stale
    claimant (an older generation) still lists it: that claimant is told to revoke it in this
    same rebalance, and its commits carry the old generation, which the coordinator refuses.
    A partition disputed at one generation is withheld from whoever the target names.

    Args:
        target: The assignment wanted, by member id (every member of the group).
        claims: What each member claims to own, by member id; claims of ids not in ``target``
            (members that left) are ignored: their partitions move at once.

    Returns:
        The assignment to send now, what each member revokes, and what waits for the next
        rebalance; lists sorted.
    """
    present = set(target)
    resolved = owners(claims, present)
    claimants: dict[TopicPartition, set[str]] = {}
    for member, claim in claims.items():
        if member in present:
            for tp in claim.partitions:
                claimants.setdefault(tp, set()).add(member)
    withheld: set[TopicPartition] = set()
    assignment: dict[str, list[TopicPartition]] = {}
    for member, tps in target.items():
        moving = {tp for tp in tps
                  if resolved.get(tp) != member and claimants.get(tp, set()) - {member}}
        withheld |= moving
        assignment[member] = sorted(set(tps) - moving)
    revoked = {member: sorted(set(claims[member].partitions) - set(assignment[member]))
               if member in claims else [] for member in target}
    return Handover(assignment, revoked, sorted(withheld))


def cooperative_sticky_assign(partitions: Mapping[str, int],
                              subscriptions: Mapping[str, Collection[str]],
                              instances: Mapping[str, str | None] = _NO_INSTANCES,
                              claims: Mapping[str, Claim] = _NO_CLAIMS,
                              ) -> dict[str, list[TopicPartition]]:
    """cooperative-sticky: :func:`sticky_assign`'s target, less what still moves
    (:attr:`Handover.assignment` of :func:`cooperative_handover`). Arguments and result as
    :func:`sticky_assign`.

    Members of the eager protocol in the group (offering ``cooperative-sticky`` beside an eager
    assignor, KIP-429's upgrade) claim nothing, having revoked everything before joining, so
    their former partitions move at once.
    """
    return cooperative_handover(sticky_assign(partitions, subscriptions, instances, claims),
                                claims).assignment


def _ordered(subscriptions: Mapping[str, Collection[str]],
             instances: Mapping[str, str | None]) -> list[str]:
    """Member ids in Kafka's order: static members by instance id, then dynamic by member id."""
    def key(member: str) -> tuple[int, str]:
        instance = instances.get(member)
        return (1, member) if instance is None else (0, instance)
    return sorted(subscriptions, key=key)


def _subscribed(subscriptions: Mapping[str, Collection[str]]) -> set[str]:
    return {topic for topics in subscriptions.values() for topic in topics}


ASSIGNORS: Mapping[str, Assignor] = {"range": range_assign, "roundrobin": roundrobin_assign,
                                     STICKY: sticky_assign,
                                     COOPERATIVE_STICKY: cooperative_sticky_assign}
"""The assignors by their protocol name (the name JoinGroup carries)."""

COOPERATIVE: Final = frozenset({COOPERATIVE_STICKY})
"""The assignors that support KIP-429's cooperative protocol. A member follows it only if every
assignor it offers does (Java's rule): offering an eager one beside it keeps the member eager,
the first step of KIP-429's upgrade."""
