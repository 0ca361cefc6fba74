"""KIP-429's cooperative protocol in the membership, sans-IO: scripted conversations with the
coordinator, time passed in, states reached through public inputs only.

A member that offers only ``cooperative-sticky`` keeps its partitions through a rejoin, claims
them in its subscription, revokes after SyncGroup only what moved, and joins again at once if
it revoked anything; one that lost its generation is told its partitions are lost. The last
tests drive the consumer's group step (what ``poll()`` runs) over the same membership.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Iterator, Mapping
from typing import Any

import pytest

from eosclient._consumer import protocol as wire
from eosclient._consumer.group import GroupCoordinator, RebalanceStep
from eosclient._consumer.membership import (
    COOPERATIVE_TABLE,
    TABLE,
    Input,
    Membership,
    Send,
    Settings,
    State,
)
from eosclient._consumer.session import ConsumerSession
from eosclient._core.types import TopicPartition as TP
from eosclient._protocol.apis import APIS
from eosclient.config import ConsumerConfig
from eosclient.errors import ApiKey

COOP = "cooperative-sticky"
SETTINGS = Settings(group_id="g", assignors=(COOP,), session_timeout=10.0,
                    rebalance_timeout=60.0, heartbeat_interval=1.0, retry_backoff=0.1,
                    retry_backoff_max=1.0)
UPGRADING = dataclasses.replace(SETTINGS, assignors=(COOP, "range"))  # KIP-429's first step
JOIN, SYNC, HEARTBEAT = (APIS[k].response for k in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP,
                                                      ApiKey.HEARTBEAT))
FIND = APIS[ApiKey.FIND_COORDINATOR].response
T = [TP("t", p) for p in range(6)]


def counts(topics: Collection[str]) -> Mapping[str, int]:
    return dict.fromkeys(topics, 6)


def one(sends: list[Send], kind: str) -> Send:
    [send] = [s for s in sends if s.kind == kind]
    return send


def joined(generation: int, *, member: str = "m1", leader: str = "m0", code: int = 0,
           claims: Mapping[str, tuple[int, list[TP]]] | None = None) -> Any:
    """A JoinGroup answer; ``claims`` (the leader's: each member's generation and partitions,
    as its v3 subscription says)."""
    members = [JOIN.JoinGroupResponseMember(
        member_id=m, group_instance_id=None,
        metadata=wire.subscription_bytes(["t"], owned=tps, generation=g))
        for m, (g, tps) in (claims or {}).items()]
    return JOIN(version=7, throttle_time_ms=0, error_code=code, generation_id=generation,
                protocol_type="consumer", protocol_name=COOP, leader=leader, member_id=member,
                members=members)


def synced(partitions: list[TP], code: int = 0) -> Any:
    return SYNC(version=5, throttle_time_ms=0, error_code=code, protocol_type="consumer",
                protocol_name=COOP, assignment=wire.assignment_bytes(partitions))


def beat(code: int = 0) -> Any:
    return HEARTBEAT(version=4, throttle_time_ms=0, error_code=code)


def claim(join: Send, protocol: str = COOP) -> tuple[list[TP], int]:
    """What a JoinGroup claims under ``protocol``: (owned partitions, generation)."""
    [metadata] = [p.metadata for p in join.request.protocols if p.name == protocol]
    sub = wire.read_member_subscription(metadata)
    return sub.owned, sub.generation


def join_and_sync(m: Membership, generation: int, given: list[TP], now: float) -> None:
    m.on_response(one(m.poll(now, counts), "join"), joined(generation), now)
    m.on_response(one(m.poll(now, counts), "sync"), synced(given), now)


def holding(partitions: list[TP], settings: Settings = SETTINGS) -> Membership:
    """A follower, STABLE in generation 5 with ``partitions``."""
    m = Membership(settings)
    m.subscribe(["t"], 0.0)
    m.lookup.request()
    m.lookup.on_response(FIND(version=3, error_code=0, error_message=None, node_id=1,
                              host="h", port=9), 0.0)
    join_and_sync(m, 5, partitions, 0.0)
    assert m.take_assignment(0.0) == partitions and m.state is State.STABLE
    return m


def asked_to_rejoin(m: Membership, now: float = 1.0) -> None:
    m.on_response(one(m.poll(now, counts), "heartbeat"), beat(27), now)


def test_a_cooperative_member_rejoins_keeping_and_claiming_its_partitions() -> None:
    m = holding(T[:3])
    asked_to_rejoin(m)
    # Eager goes to REVOKING and waits for the application to give everything up.
    assert m.state is State.JOINING
    join = one(m.poll(1.0, counts), "join")
    assert [p.name for p in join.request.protocols] == [COOP]
    assert claim(join) == (T[:3], 5)


def test_after_sync_only_what_moved_is_revoked_and_the_member_joins_again_at_once() -> None:
    m = holding(T[:3])
    asked_to_rejoin(m)
    join_and_sync(m, 6, [T[0], T[2], T[5]], 1.0)  # t-1 moves away, t-5 is new
    assert m.state is State.ASSIGNING and m.to_revoke() == [T[1]]
    m.gave_up([T[1]])
    assert m.take_assignment(1.5) == [T[0], T[2], T[5]]
    # The second rebalance, at once: the partition given up is handed to its new owner.
    assert m.state is State.JOINING
    assert claim(one(m.poll(1.5, counts), "join")) == ([T[0], T[2], T[5]], 6)


def test_a_leader_that_revoked_joins_again_a_heartbeat_interval_later() -> None:
    # noida-db answers the followers' JoinGroup after the leader's; a leader that joined again
    # at once (its SyncGroup is answered first) made it never answer theirs: 11 s stalls.
    m = holding(T[:3])
    asked_to_rejoin(m)
    m.on_response(one(m.poll(1.0, counts), "join"),
                  joined(6, member="m1", leader="m1",
                         claims={"m1": (5, T[:3]), "m2": (5, T[3:]), "m3": (-1, [])}), 1.0)
    sync = one(m.poll(1.0, counts), "sync")
    given = {a.member_id: wire.read_assignment(a.assignment) for a in sync.request.assignments}
    m.on_response(sync, synced(given["m1"]), 1.0)
    m.gave_up(m.to_revoke())
    m.take_assignment(1.0)
    assert m.state is State.JOINING and m.poll(1.5, counts) == []
    assert claim(one(m.poll(2.0, counts), "join")) == (given["m1"], 6)


@pytest.mark.parametrize("leader", ["m0", "m1"])
def test_a_second_rejoin_answered_with_the_same_generation_leaves_to_start_a_new_one(
        leader: str) -> None:
    # Tansu answers a static member's rejoin with the generation it was in, and the others are
    # never asked to rejoin: the partitions given up stayed withheld from everybody for good.
    m = holding(T[:3], dataclasses.replace(SETTINGS, group_instance_id="i-1"))
    asked_to_rejoin(m)
    join_and_sync(m, 6, T[:2], 1.0)
    m.gave_up(m.to_revoke())
    m.take_assignment(1.0)
    join = one(m.poll(5.0, counts), "join")
    m.on_response(join, joined(6, leader=leader, claims={"m1": (6, T[:2])}), 5.0)
    leave = one(m.poll(5.0, counts), "leave")
    assert leave.request.members[0].member_id == "m1" and m.state is State.JOINING
    m.on_response(leave, APIS[ApiKey.LEAVE_GROUP].response(
        version=3, throttle_time_ms=0, error_code=0, members=[]), 5.1)
    assert claim(one(m.poll(5.1, counts), "join")) == (T[:2], 6)  # as a new member


def test_nothing_revoked_means_no_second_rebalance() -> None:
    m = holding(T[:3])
    asked_to_rejoin(m)
    join_and_sync(m, 6, T[:4], 1.0)  # only gains
    assert m.to_revoke() == []
    assert m.take_assignment(1.5) == T[:4] and m.state is State.STABLE


def test_a_revocation_after_the_next_join_went_out_still_brings_another_rebalance() -> None:
    # The I/O thread joins again (the coordinator asked) while the application is still
    # revoking: that join claimed the partition, so the leader withheld it from its new owner;
    # unless this member joins once more, nobody reads it.
    m = holding(T[:3])
    asked_to_rejoin(m)
    join_and_sync(m, 6, [T[0], T[2]], 1.0)
    assert m.to_revoke() == [T[1]]
    m.on_response(one(m.poll(2.0, counts), "heartbeat"), beat(27), 2.0)  # JOINING again
    join = one(m.poll(2.0, counts), "join")
    assert claim(join) == (T[:3], 5)
    m.gave_up([T[1]])  # the application's on_revoke returns
    m.on_response(join, joined(7), 2.5)
    m.on_response(one(m.poll(2.5, counts), "sync"), synced([T[0], T[2]]), 2.5)
    assert m.to_revoke() == []
    m.take_assignment(3.0)
    assert m.state is State.JOINING


def test_the_leader_withholds_what_another_member_still_claims() -> None:
    m = holding(T[:3])
    asked_to_rejoin(m)
    mine, theirs = (5, T[:3]), (5, T[3:])
    m.on_response(one(m.poll(1.0, counts), "join"),
                  joined(6, member="m1", leader="m1",
                         claims={"m1": mine, "m2": theirs, "m3": (-1, [])}), 1.0)
    sync = one(m.poll(1.0, counts), "sync")
    given = {a.member_id: wire.read_assignment(a.assignment) for a in sync.request.assignments}
    # The target is 2 each; the two that move to m3 are withheld (their owners still hold them)
    assert {member: len(tps) for member, tps in given.items()} == {"m1": 2, "m2": 2, "m3": 0}
    assert set(given["m1"]) < set(T[:3]) and set(given["m2"]) < set(T[3:])


@pytest.mark.parametrize(("where", "code"), [
    ("heartbeat", 22), ("heartbeat", 25), ("join", 25), ("sync", 22), ("sync", 25)])
def test_a_member_that_lost_its_generation_is_told_its_partitions_are_lost(
        where: str, code: int) -> None:
    m = holding(T[:3])
    if where == "heartbeat":
        m.on_response(one(m.poll(1.0, counts), "heartbeat"), beat(code), 1.0)
    else:
        asked_to_rejoin(m)
        join = one(m.poll(1.0, counts), "join")
        if where == "join":
            m.on_response(join, joined(6, code=code), 1.0)
        else:
            m.on_response(join, joined(6), 1.0)
            m.on_response(one(m.poll(1.0, counts), "sync"), synced([], code=code), 1.0)
    # Eager, a member rejoining holds nothing and simply joins again (JOINING).
    assert m.state is State.REVOKING and m.generation == -1
    m.revoked(2.0)  # on_lost ran
    assert m.state is State.JOINING
    assert claim(one(m.poll(2.0, counts), "join")) == ([], -1)


def test_a_commit_refused_for_its_generation_rejoins_keeping_the_partitions() -> None:
    # noida-db bumps the generation as soon as a member joins and refuses the others' commits
    # with ILLEGAL_GENERATION before they hear of the rebalance: taken as lost, every kept
    # partition's transaction was aborted. The heartbeat and the JoinGroup still decide.
    m = holding(T[:3])
    m.refused(22, 1.0)
    assert m.state is State.JOINING and m.generation == 5
    assert claim(one(m.poll(1.0, counts), "join")) == (T[:3], 5)


def test_a_rejoining_member_still_commits_under_its_generation() -> None:
    m = holding(T[:3])
    asked_to_rejoin(m, 1.0)
    one(m.poll(1.0, counts), "join")
    # The coordinator holds the JoinGroup (Tansu: half the session timeout) and the member
    # sends no heartbeats meanwhile: the JoinGroup proves it alive as a heartbeat would. Eager,
    # a joining member holds nothing and commits nothing.
    assert m.poll(9.0, counts) == [] and m.has_generation() and m.in_generation(10.5)
    assert not m.in_generation(11.5)  # a session after the join went: not any more


def test_a_member_offering_an_eager_assignor_too_stays_eager_and_claims_nothing() -> None:
    m = holding(T[:3], UPGRADING)
    asked_to_rejoin(m)
    assert m.state is State.REVOKING  # gives everything up first, as range needs
    m.revoked(1.0)
    join = one(m.poll(1.0, counts), "join")
    assert [p.name for p in join.request.protocols] == [COOP, "range"]
    assert claim(join) == ([], -1)  # so a cooperative leader moves its partitions at once


def test_the_cooperative_table_differs_from_the_eager_one_only_where_kip_429_says() -> None:
    changed = {key: target for key, target in COOPERATIVE_TABLE.items()
               if TABLE.get(key) != target}
    rejoins = {(State.STABLE, cause): State.JOINING
               for cause in (Input.CALL_SUBSCRIBE, Input.RECV_REJOIN, Input.META_CHANGED)}
    lost = {(state, cause): State.REVOKING
            for state in (State.JOINING, State.SYNCING, State.ASSIGNING)
            for cause in (Input.RECV_LOST, Input.TIMER_EXPIRED)}
    assert changed == {**rejoins, **lost, (State.ASSIGNING, Input.CALL_HANDED_OVER):
                       State.JOINING}


# -- the consumer's rebalance steps over the membership --------------------------------------------


@pytest.fixture
def group() -> Iterator[tuple[ConsumerSession, GroupCoordinator]]:
    session = ConsumerSession(ConsumerConfig(bootstrap_servers=("127.0.0.1:9",), group_id="g",
                                             partition_assignment_strategy=(COOP,)))
    assert session.group is not None
    yield session, session.group
    session.abandon()


def steps(session: ConsumerSession, group: GroupCoordinator) -> list[RebalanceStep]:
    """Every rebalance step due now, each finished as poll() finishes it."""
    done = []
    while (step := group.start_step(session.assignment)) is not None:
        group.finish_step(session.loop, session.assignment, step)
        done.append(step)
    return done


def test_poll_revokes_what_moved_then_assigns_what_is_new_and_keeps_the_rest(
        group: tuple[ConsumerSession, GroupCoordinator]) -> None:
    session, coordinator = group
    m = coordinator.membership
    now = time.monotonic()  # the group's steps read the clock
    m.subscribe(["t"], now)
    m.lookup.request()
    m.lookup.on_response(FIND(version=3, error_code=0, error_message=None, node_id=1,
                              host="h", port=9), now)
    join_and_sync(m, 5, T[:3], now)
    assert [(s.revoking, s.partitions) for s in steps(session, coordinator)] == [(False, T[:3])]
    kept = session.assignment.states[T[0]]
    asked_to_rejoin(m, now + 3)
    assert steps(session, coordinator) == [] and list(session.assignment.states) == T[:3]
    join_and_sync(m, 6, [T[0], T[2], T[5]], now + 3)
    done = steps(session, coordinator)
    # on_revoke with just t-1, on_assign with just t-5; eager: all three revoked, all assigned
    assert [(s.revoking, s.partitions) for s in done] == [(True, [T[1]]), (False, [T[5]])]
    assert not done[0].lost
    assert session.assignment.states[T[0]] is kept  # its position and fetched data stay
    assert sorted(session.assignment.states) == [T[0], T[2], T[5]]
    assert m.state is State.JOINING  # the second rebalance


def test_poll_calls_on_assign_even_with_nothing_new(
        group: tuple[ConsumerSession, GroupCoordinator]) -> None:
    session, coordinator = group
    m = coordinator.membership
    now = time.monotonic()  # the group's steps read the clock
    m.subscribe(["t"], now)
    m.lookup.request()
    m.lookup.on_response(FIND(version=3, error_code=0, error_message=None, node_id=1,
                              host="h", port=9), now)
    join_and_sync(m, 5, T[:3], now)
    steps(session, coordinator)
    asked_to_rejoin(m, now + 3)
    join_and_sync(m, 6, T[:2], now + 3)
    done = steps(session, coordinator)
    assert [(s.revoking, s.partitions) for s in done] == [(True, [T[2]]), (False, [])]
