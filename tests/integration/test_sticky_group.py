"""The sticky assignor in a real group: a third member joining moves only its share.

First with members driven by hand on their own connections: each joins with a version 3
subscription naming what it owns and since which generation, the leader decodes everybody's,
runs ``sticky_assign`` and sends the result in SyncGroup. What the broker adds is everything
between: it carries the subscriptions to the leader byte for byte, picks ``sticky`` as the
group's protocol, forms the generations, and hands each member its share. Then the same with
``ReadCommittedConsumer`` members that offer ``sticky``: the membership sends what it was last
given (eager: all of it was revoked before the rejoin, as Java's eager ``StickyAssignor``
reports its previous assignment) and the leader honours the claims. Last, consumers offering
``cooperative-sticky`` (KIP-429): the two that keep partitions go on fetching them through both
rebalances, and give up only the partitions that move.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import confluent_kafka as ck
import pytest

from eosclient import ReadCommittedConsumer, TopicPartition
from eosclient._consumer import protocol as wire
from eosclient._consumer.assignors import Claim, sticky_assign
from eosclient._net.blocking import BlockingConnection
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = pytest.mark.broker

PARTITIONS = 12
_SESSION_MS = 6000
_REBALANCE_IN_PROGRESS = 27
_MEMBER_ID_REQUIRED = 79  # KIP-394


def wait_for(condition: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


class StickyMember:
    """A group member on a thread and a connection of its own: join with what it owns, lead if
    named (sticky_assign over the decoded subscriptions), sync, heartbeat until the
    coordinator asks for a rebalance, and again; until stopped, then leave."""

    def __init__(self, broker: RunningBroker, group: str, topic: str, name: str) -> None:
        self.member_id, self.generation = "", -1
        self.owned: list[TopicPartition] = []
        self.history: list[tuple[int, list[TopicPartition]]] = []  # (generation, assignment)
        self.error: BaseException | None = None
        self._group, self._topic = group, topic
        self._conn = BlockingConnection(broker.host, broker.port, client_id=name)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self._conn.request(wire.leave_group(self._group, self.member_id))
        self._conn.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._join_and_sync():
                    while not self._stop.wait(0.2) and not self._rebalancing():
                        pass
        except BaseException as exc:  # the test thread reports it
            self.error = exc

    def _join_and_sync(self) -> bool:
        metadata = wire.subscription_bytes([self._topic], owned=self.owned,
                                           generation=self.generation)
        joined = self._conn.request(wire.join_group(
            self._group, self.member_id, session_timeout_ms=_SESSION_MS,
            rebalance_timeout_ms=30_000, protocols=[("sticky", metadata)]), timeout=60)
        if joined.error_code == _MEMBER_ID_REQUIRED:
            self.member_id = joined.member_id
            return False
        assert joined.error_code == 0, joined
        assert joined.protocol_name == "sticky", joined
        self.member_id = joined.member_id
        assignments: dict[str, bytes] = {}
        if joined.leader == joined.member_id:
            subscriptions = {m.member_id: wire.read_member_subscription(m.metadata)
                             for m in joined.members}
            result = sticky_assign(
                {self._topic: PARTITIONS}, {m: s.topics for m, s in subscriptions.items()},
                claims={m: Claim(s.generation, s.owned) for m, s in subscriptions.items()})
            assignments = {m: wire.assignment_bytes(ps) for m, ps in result.items()}
        synced = self._conn.request(wire.sync_group(
            self._group, joined.generation_id, self.member_id, joined.protocol_name,
            assignments), timeout=30)
        if synced.error_code == _REBALANCE_IN_PROGRESS:
            return False
        assert synced.error_code == 0, synced
        self.generation = joined.generation_id
        self.owned = wire.read_assignment(synced.assignment)
        self.history.append((self.generation, self.owned))
        return True

    def _rebalancing(self) -> bool:
        beat = self._conn.request(wire.heartbeat(self._group, self.generation, self.member_id))
        assert beat.error_code in (0, _REBALANCE_IN_PROGRESS), beat
        return bool(beat.error_code == _REBALANCE_IN_PROGRESS)


def settled(members: list[StickyMember]) -> dict[str, list[TopicPartition]] | None:
    """Every member's assignment once all of them synced in one generation that gives out
    every partition; None before."""
    for member in members:
        assert member.error is None, member.error
    if any(not m.history for m in members):
        return None
    generations = {m.history[-1][0] for m in members}
    given = sorted(tp for m in members for tp in m.history[-1][1])
    if len(generations) != 1 or given != [TopicPartition(members[0]._topic, p)
                                          for p in range(PARTITIONS)]:
        return None
    return {m.member_id: m.history[-1][1] for m in members}


def test_a_third_member_joining_moves_only_its_share(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    topics.create_topic(broker, topic_name, PARTITIONS)
    group = unique_name("group")
    members = [StickyMember(broker, group, topic_name, name) for name in ("a", "b")]
    try:
        wait_for(lambda: settled(members) is not None)
        before = settled(members)
        assert before is not None and sorted(len(ps) for ps in before.values()) == [6, 6]
        members.append(StickyMember(broker, group, topic_name, "c"))
        wait_for(lambda: settled(members) is not None and len(members[2].history) > 0)
        after = settled(members)
        assert after is not None and sorted(len(ps) for ps in after.values()) == [4, 4, 4]
        # a and b each keep 4 of their 6; the 4 that move are all c's.
        for member_id, kept in before.items():
            assert set(after[member_id]) < set(kept)
        assert set(after[members[2].member_id]).isdisjoint(
            set(after[members[0].member_id]) | set(after[members[1].member_id]))
    finally:
        for member in members:
            member.stop()


def test_consumers_offering_sticky_keep_their_partitions_when_a_member_joins(
        noida_broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    topics.create_topic(noida_broker, topic_name, PARTITIONS)
    group = unique_name("group")
    config: dict[str, object] = {"partition.assignment.strategy": "sticky",
                                 "session.timeout.ms": _SESSION_MS,
                                 "heartbeat.interval.ms": 200}
    consumers = [ReadCommittedConsumer(noida_broker.bootstrap_servers, group_id=group,
                                       config=config) for _ in range(3)]
    stop = threading.Event()

    def poll(consumer: ReadCommittedConsumer) -> None:
        consumer.subscribe([topic_name])
        while not stop.is_set():
            consumer.poll(0.1)

    pollers = [threading.Thread(target=poll, args=(c,)) for c in consumers]
    for poller in pollers[:2]:
        poller.start()
    try:
        wait_for(lambda: sorted(len(c.assignment()) for c in consumers[:2]) == [6, 6])
        before = [set(c.assignment()) for c in consumers[:2]]
        pollers[2].start()
        wait_for(lambda: sorted(len(c.assignment()) for c in consumers) == [4, 4, 4])
        given = sorted(tp for c in consumers for tp in c.assignment())
        assert given == [TopicPartition(topic_name, p) for p in range(PARTITIONS)]
        # Sticky: the two kept 4 of their 6 each; only the newcomer's share moved.
        assert [len(set(c.assignment()) & had) for c, had in zip(consumers, before,
                                                                  strict=False)] == [4, 4]
    finally:
        stop.set()
        for poller in pollers:
            poller.join(30)
        for consumer in consumers:
            consumer.close()


class CooperativeMember:
    """A ``cooperative-sticky`` consumer polling on a thread of its own; what it saw, in order:
    ``("assign" | "revoke" | "lost" | "records", partition numbers)``."""

    def __init__(self, broker: RunningBroker, group: str, topic: str,
                 strategy: str = "cooperative-sticky") -> None:
        self.events: list[tuple[str, frozenset[int]]] = []
        self.consumer = ReadCommittedConsumer(broker.bootstrap_servers, group_id=group, config={
            "partition.assignment.strategy": strategy,
            "session.timeout.ms": _SESSION_MS, "heartbeat.interval.ms": 200,
            "auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic], on_assign=self._callback("assign"),
                                on_revoke=self._callback("revoke"),
                                on_lost=self._callback("lost"))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _callback(self, kind: str) -> Callable[[list[TopicPartition]], None]:
        return lambda tps: self.events.append((kind, frozenset(tp.partition for tp in tps)))

    def _run(self) -> None:
        while not self._stop.is_set():
            records = self.consumer.poll(0.1)
            if records:
                self.events.append(("records", frozenset(r.partition for r in records)))

    def held(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


def produce_until(broker: RunningBroker, topic: str, stop: threading.Event) -> None:
    """A record to every partition every 20 ms, until ``stop``."""
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    while not stop.wait(0.02):
        for p in range(PARTITIONS):
            producer.produce(topic, b"x", partition=p)
        producer.poll(0)
    assert producer.flush(10) == 0


@pytest.mark.long_on_tansu
def test_cooperative_consumers_keep_fetching_their_partitions_while_a_member_joins(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    topics.create_topic(broker, topic_name, PARTITIONS)
    group = unique_name("group")
    stop = threading.Event()
    producer = threading.Thread(target=produce_until, args=(broker, topic_name, stop))
    producer.start()
    members = [CooperativeMember(broker, group, topic_name) for _ in range(2)]
    try:
        wait_for(lambda: sorted(len(m.held()) for m in members) == [6, 6])
        before = [m.held() for m in members]
        start = [len(m.events) for m in members]
        members.append(CooperativeMember(broker, group, topic_name))
        wait_for(lambda: sorted(len(m.held()) for m in members) == [4, 4, 4])
        after = [m.held() for m in members]
        # each keeper's last on_assign (the second rebalance's, with nothing new) has run
        wait_for(lambda: all(sum(kind == "assign" for kind, _ in m.events[n:]) >= 2
                             for m, n in zip(members, start, strict=False)))
        seen = [list(m.events) for m in members]  # (close() revokes everything)
    finally:
        stop.set()
        producer.join(30)
        for member in members:
            member.close()
    assert sorted(p for held in after for p in held) == list(range(PARTITIONS))
    assert len(after[2]) == 4 and "revoke" not in {kind for kind, _ in seen[2]}
    for full, had, kept, n in zip(seen, before, after, start, strict=False):
        events = full[n:]
        # on_revoke saw only the two partitions that moved to the newcomer, once; nothing lost
        assert [ps for kind, ps in events if kind in ("revoke", "lost")] == [had - kept]
        assert len(had - kept) == 2 and kept < had
        # and between that revoke and the last on_assign (the second rebalance ran meanwhile)
        # the kept partitions' records kept coming. Eager: revoke all, nothing, assign all.
        kinds = [kind for kind, _ in events]
        revoked, last_assign = kinds.index("revoke"), len(kinds) - 1 - kinds[::-1].index("assign")
        assigned_then = [ps for kind, ps in events[revoked:last_assign] if kind == "assign"]
        assert assigned_then and not any(assigned_then)  # on_assign with nothing new (KIP-429)
        assert any(kind == "records" and ps <= kept for kind, ps in events[revoked:last_assign])


@pytest.mark.long_on_tansu
def test_the_rolling_upgrades_second_step_mixes_eager_and_cooperative_members(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # KIP-429's upgrade: a member still offering range beside cooperative-sticky (restarted in
    # the first step) is eager; one restarted in the second offers cooperative-sticky alone.
    # The group picks cooperative-sticky; the eager member revokes everything and claims
    # nothing, the cooperative one gives up only what moves, and nothing is owned twice.
    topics.create_topic(broker, topic_name, PARTITIONS)
    group = unique_name("group")
    stop = threading.Event()
    producer = threading.Thread(target=produce_until, args=(broker, topic_name, stop))
    producer.start()
    eager = CooperativeMember(broker, group, topic_name, "cooperative-sticky,range")
    members = [eager, CooperativeMember(broker, group, topic_name)]
    try:
        wait_for(lambda: sorted(len(m.held()) for m in members) == [6, 6])
        before = [m.held() for m in members]
        start = [len(m.events) for m in members]
        members.append(CooperativeMember(broker, group, topic_name))
        wait_for(lambda: sorted(len(m.held()) for m in members) == [4, 4, 4])
        after = [m.held() for m in members]
        seen = [list(m.events) for m in members]
    finally:
        stop.set()
        producer.join(30)
        for member in members:
            member.close()
    assert sorted(p for held in after for p in held) == list(range(PARTITIONS))
    gone = [[ps for kind, ps in events[n:] if kind in ("revoke", "lost")]
            for events, n in zip(seen, start, strict=False)]
    assert gone[0][0] == before[0]  # eager: all of them, first
    assert gone[1] == [before[1] - after[1]] and len(gone[1][0]) == 2  # cooperative: 2, once
