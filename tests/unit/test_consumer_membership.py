"""Group membership, sans-IO: scripted conversations with the coordinator, time passed in.

Responses are kafka-python objects built by hand; every error code goes through
``eosclient.errors.error_for`` inside the machine, and the tests check what each kind of code
makes it do next: join again (and with which member id and generation), find the coordinator
again, retry later, or fail. States are reached only through public inputs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Mapping
from typing import Any

import pytest

from eosclient._consumer import protocol as wire
from eosclient._consumer.membership import TABLE, Input, Membership, Send, Settings, State
from eosclient._core.types import TopicPartition as TP
from eosclient._protocol.apis import APIS
from eosclient.errors import (
    ApiKey,
    EosError,
    FatalError,
    FencedError,
    IllegalStateError,
    KafkaTimeoutError,
)

SETTINGS = Settings(group_id="g", assignors=("range", "roundrobin"), session_timeout=10.0,
                    rebalance_timeout=60.0, heartbeat_interval=1.0, retry_backoff=0.1,
                    retry_backoff_max=1.0)
JOIN, SYNC, HEARTBEAT = (APIS[k].response for k in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP,
                                                      ApiKey.HEARTBEAT))
FIND = APIS[ApiKey.FIND_COORDINATOR].response
STATIC = dataclasses.replace(SETTINGS, group_instance_id="i-1")


def counts(topics: Collection[str]) -> Mapping[str, int]:
    return dict.fromkeys(topics, 4)


def no_counts(topics: Collection[str]) -> None:
    return None


def found(m: Membership, now: float = 0.0) -> None:
    m.lookup.request()
    m.lookup.on_response(FIND(version=3, error_code=0, error_message=None, node_id=1, host="h",
                              port=9), now)


def joined(member: str = "m1", leader: str = "m1", generation: int = 5, code: int = 0,
           members: dict[str, list[str]] | None = None) -> Any:
    subs = members if members is not None else {member: ["t"]}
    return JOIN(version=7, throttle_time_ms=0, error_code=code, generation_id=generation,
                protocol_type="consumer", protocol_name="range", leader=leader,
                member_id=member, members=[
                    JOIN.JoinGroupResponseMember(member_id=m, group_instance_id=None,
                                                 metadata=wire.subscription_bytes(ts))
                    for m, ts in subs.items()] if leader == member else [])


def synced(partitions: list[TP], code: int = 0) -> Any:
    return SYNC(version=5, throttle_time_ms=0, error_code=code, protocol_type="consumer",
                protocol_name="range", assignment=wire.assignment_bytes(partitions))


def beat(code: int = 0) -> Any:
    return HEARTBEAT(version=4, throttle_time_ms=0, error_code=code)


def one(sends: list[Send], kind: str) -> Send:
    [send] = [s for s in sends if s.kind == kind]
    return send


def joining(now: float = 0.0, settings: Settings = SETTINGS) -> tuple[Membership, Send]:
    m = Membership(settings)
    m.subscribe(["t"], now)
    found(m, now)
    return m, one(m.poll(now, counts), "join")


def stable(now: float = 0.0, settings: Settings = SETTINGS) -> tuple[Membership, float]:
    m, join = joining(now, settings)
    m.on_response(join, joined(), now)
    sync = one(m.poll(now, counts), "sync")
    m.on_response(sync, synced([TP("t", 0), TP("t", 1)]), now)
    assert m.take_assignment(now) == [TP("t", 0), TP("t", 1)]
    return m, now


def test_a_leader_joins_assigns_and_syncs() -> None:
    m = Membership(SETTINGS)
    m.subscribe(["t"], 0.0)
    assert m.state is State.JOINING and m.poll(0.0, counts) == []  # no coordinator yet
    found(m)
    join = one(m.poll(0.0, counts), "join")
    assert join.timeout == 15.0  # the session timeout (shorter than the rebalance's), plus 5 s
    assert [p.name for p in join.request.protocols] == ["range", "roundrobin"]
    assert wire.read_subscription(join.request.protocols[0].metadata) == ["t"]
    # KIP-394: the first join is refused with a member id to join with.
    m.on_response(join, joined(member="m1", code=79), 0.0)
    again = one(m.poll(0.0, counts), "join")
    assert again.request.member_id == "m1"
    m.on_response(again, joined(members={"m1": ["t"], "m2": ["t"]}), 0.0)
    assert m.state is State.SYNCING and (m.member_id, m.generation) == ("m1", 5)
    sync = one(m.poll(0.0, counts), "sync")
    handed = {a.member_id: wire.read_assignment(a.assignment) for a in sync.request.assignments}
    assert handed == {"m1": [TP("t", 0), TP("t", 1)], "m2": [TP("t", 2), TP("t", 3)]}
    m.on_response(sync, synced(handed["m1"]), 0.0)
    assert m.state is State.ASSIGNING
    assert m.take_assignment(0.1) == handed["m1"] and m.state is State.STABLE
    assert m.poll(0.5, counts) == []
    assert one(m.poll(1.0, counts), "heartbeat").request.generation_id == 5


def test_the_leader_waits_for_the_metadata_of_every_members_topics() -> None:
    m, join = joining()
    m.on_response(join, joined(members={"m1": ["t"], "m2": ["u"]}), 0.0)
    assert m.poll(0.0, no_counts) == []
    sync = one(m.poll(0.1, counts), "sync")
    assert len(sync.request.assignments) == 2


def test_a_follower_syncs_without_assignments() -> None:
    m, join = joining()
    m.on_response(join, joined(member="m2", leader="m1"), 0.0)
    assert one(m.poll(0.0, no_counts), "sync").request.assignments == []


@pytest.mark.parametrize(("code", "state", "member"), [
    (0, State.SYNCING, "m2"),
    (27, State.SYNCING, "m2"),  # the SyncGroup in flight decides
    (25, State.JOINING, ""),  # the session ran out meanwhile: join again, as a new member
])
def test_a_member_heartbeats_while_its_sync_group_is_held(code: int, state: State,
                                                          member: str) -> None:
    # Tansu holds SyncGroup for 3 s and counts only heartbeats as alive: with no heartbeat
    # between the JoinGroup answer and the SyncGroup answer, a 6 s session ran out in the
    # middle of every rebalance, and the group never settled (the nemesis, Tansu seed 5).
    m, join = joining()
    m.on_response(join, joined(member="m2", leader="m1"), 0.0)
    sync = one(m.poll(0.0, counts), "sync")
    assert m.poll(0.5, counts) == []  # heartbeat.interval.ms after the JoinGroup answer
    sent = one(m.poll(1.0, counts), "heartbeat")
    assert (sent.request.generation_id, sent.request.member_id) == (5, "m2")
    m.on_response(sent, beat(code), 1.0)
    assert (m.state, m.member_id) == (state, member)
    if state is State.SYNCING:
        m.on_response(sync, synced([TP("t", 1)]), 2.0)
        assert m.state is State.ASSIGNING


@pytest.mark.parametrize(("code", "state", "member", "generation"), [
    (27, State.REVOKING, "m1", 5),  # REBALANCE_IN_PROGRESS: rejoin, generation still valid
    (22, State.REVOKING, "m1", -1),  # ILLEGAL_GENERATION
    (25, State.REVOKING, "", -1),  # UNKNOWN_MEMBER_ID: a new member id too
    (16, State.STABLE, "m1", 5),  # NOT_COORDINATOR: find it again, keep heartbeating
    (14, State.STABLE, "m1", 5),  # COORDINATOR_LOAD_IN_PROGRESS: heartbeat again later
])
def test_heartbeat_errors(code: int, state: State, member: str, generation: int) -> None:
    m, _ = stable()
    m.on_response(one(m.poll(1.0, counts), "heartbeat"), beat(code), 1.0)
    assert (m.state, m.member_id, m.generation) == (state, member, generation)
    assert (m.lookup.node is None) is (code == 16)


@pytest.mark.parametrize(("code", "kind"), [(30, FatalError), (82, FencedError), (35, FatalError)])
def test_fatal_heartbeat_errors_fail_the_membership(code: int, kind: type[Exception]) -> None:
    m, _ = stable()
    m.on_response(one(m.poll(1.0, counts), "heartbeat"), beat(code), 1.0)
    assert m.state is State.FAILED and isinstance(m.error, kind) and m.error.code == code


def test_revoking_waits_for_the_application_then_joins_again() -> None:
    m, _ = stable()
    m.on_response(one(m.poll(1.0, counts), "heartbeat"), beat(27), 1.0)
    assert [s.kind for s in m.poll(1.0, counts)] == []  # nothing until the application revoked
    m.revoked(1.2)
    join = one(m.poll(1.2, counts), "join")
    assert join.request.member_id == "m1"


@pytest.mark.parametrize(("code", "member", "sent_at"), [
    (25, "", 0.0),  # UNKNOWN_MEMBER_ID: at once, without a member id
    (27, "m1", 0.0),  # REBALANCE_IN_PROGRESS: at once
    (14, "m1", 0.1),  # COORDINATOR_LOAD_IN_PROGRESS: after the backoff
])
def test_join_errors_that_join_again(code: int, member: str, sent_at: float) -> None:
    m, join = joining()
    m.on_response(join, joined(member="m1", code=79), 0.0)  # KIP-394: now it is "m1"
    join = one(m.poll(0.0, counts), "join")
    m.on_response(join, joined(member="", code=code), 0.0)
    assert m.state is State.JOINING
    if sent_at:
        assert m.poll(0.0, counts) == []
    again = one(m.poll(sent_at + 0.05, counts), "join")
    assert again.request.member_id == member


def test_a_cut_join_finds_the_coordinator_again() -> None:
    m, join = joining()
    m.on_failure(join, FatalError("cut"), 0.0)
    assert m.lookup.node is None and m.poll(5.0, counts) == []
    found(m, 5.0)
    assert one(m.poll(5.0, counts), "join")


def test_a_join_is_held_no_longer_than_the_shorter_of_the_two_timeouts() -> None:
    short = dataclasses.replace(SETTINGS, session_timeout=30.0, rebalance_timeout=20.0)
    m = Membership(short)
    m.subscribe(["t"], 0.0)
    found(m)
    assert one(m.poll(0.0, counts), "join").timeout == 25.0


def test_a_held_join_that_times_out_is_sent_again_under_the_same_member_id(
        caplog: pytest.LogCaptureFixture) -> None:
    # noida-db once never answered a member's JoinGroup while it formed a generation naming
    # that member its leader: the member must not wait for the rebalance timeout.
    m, join = joining(settings=STATIC)
    m.on_response(join, joined(member="m1", code=79), 0.0)  # KIP-394: the id to join with
    held = one(m.poll(0.0, counts), "join")
    assert m.poll(5.0, counts) == m.poll(10.0, counts) == []  # the driver runs meanwhile
    with caplog.at_level(logging.INFO, logger="eosclient.consumer"):
        m.on_failure(held, KafkaTimeoutError("no answer within 15 s"), 15.0)
    assert "no answer to JoinGroup (no answer within 15 s): joining again" in caplog.text
    assert m.state is State.JOINING and m.member_id == "m1"
    found(m, 15.0)
    again = one(m.poll(16.0, counts), "join")
    assert (again.request.member_id, again.request.group_instance_id) == ("m1", "i-1")


@pytest.mark.parametrize("code", [23, 24, 26, 81])
def test_fatal_join_errors(code: int) -> None:
    m, join = joining()
    m.on_response(join, joined(code=code), 0.0)
    assert m.state is State.FAILED and m.error is not None and m.error.code == code


@pytest.mark.parametrize("code", [22, 25, 27, 16])
def test_sync_errors_join_again(code: int) -> None:
    m, join = joining()
    m.on_response(join, joined(), 0.0)
    m.on_response(one(m.poll(0.0, counts), "sync"), synced([], code=code), 0.0)
    assert m.state is State.JOINING


def test_an_answer_from_before_a_rejoin_is_ignored() -> None:
    m, join = joining()
    m.subscribe(["t", "u"], 0.1)  # the topics changed: a new join attempt
    m.on_response(join, joined(), 0.2)
    assert m.state is State.JOINING and m.generation == -1
    assert wire.read_subscription(one(m.poll(0.2, counts), "join").request.protocols[0]
                                  .metadata) == ["t", "u"]


def test_a_silent_coordinator_ends_the_session() -> None:
    m, _ = stable()
    for t in range(1, 10):
        m.on_failure(one(m.poll(float(t), counts), "heartbeat"), FatalError("cut"), float(t))
        found(m, float(t))
    m.poll(10.0, counts)
    assert (m.state, m.generation) == (State.REVOKING, -1)
    # The member id is kept: only the coordinator knows whether it dropped the member.
    m.revoked(10.0)
    found(m, 10.0)
    join = one(m.poll(10.0, counts), "join")
    assert join.request.member_id == "m1"
    m.on_response(join, joined(code=25), 10.0)  # it did: UNKNOWN_MEMBER_ID
    assert one(m.poll(10.0, counts), "join").request.member_id == ""


def test_the_last_join_outlives_a_lost_session() -> None:
    # group_metadata() used to fall back to generation -1 and no member id once the session was
    # lost, which lets a zombie's transactional offset commit skip the coordinator's KIP-447 check.
    m, _ = stable()
    m.refused(22, 0.5)
    assert m.generation == -1
    assert m.last_joined == (5, "m1")


def test_no_poll_for_the_poll_interval_leaves_the_group() -> None:
    m, _ = stable()
    for t in range(1, 60):  # heartbeats answered, but the application never polls again
        m.on_response(one(m.poll(float(t), counts), "heartbeat"), beat(), float(t))
    sends = m.poll(60.0, counts)
    assert one(sends, "leave").request.member_id == "m1"
    assert m.state is State.REVOKING and m.generation == -1


def test_the_leader_rejoins_when_a_partition_count_changes() -> None:
    m, _ = stable()
    m.poll(0.5, lambda topics: dict.fromkeys(topics, 5))
    assert m.state is State.REVOKING


def test_a_refused_commit_makes_the_member_join_again() -> None:
    m, _ = stable()
    m.refused(22, 0.5)
    assert m.state is State.REVOKING and m.generation == -1


def test_leave_sends_leave_group_once() -> None:
    m, _ = stable()
    m.leave(0.5)
    assert one(m.poll(0.5, counts), "leave").request.member_id == "m1"
    m.leave(0.6)
    assert m.poll(0.6, counts) == [] and m.state is State.UNJOINED


def test_a_static_member_leaves_only_when_told_and_then_by_member_id_alone() -> None:
    m, _ = stable(settings=STATIC)
    m.leave(0.5)  # keeps its place for a restart (KIP-345)
    assert m.poll(0.5, counts) == [] and m.state is State.UNJOINED
    m, _ = stable(settings=STATIC)
    m.leave(0.5, static_too=True)  # replaced, or gone for good
    [member] = one(m.poll(0.5, counts), "leave").request.members
    # the instance id left out: a coordinator removes this member id or nothing
    assert (member.member_id, member.group_instance_id) == ("m1", None)


def test_a_member_offering_sticky_rejoins_claiming_what_it_was_given() -> None:
    sticky = dataclasses.replace(SETTINGS, assignors=("sticky", "range"))
    m, join = joining(settings=sticky)
    first = wire.read_member_subscription(join.request.protocols[0].metadata)
    assert (first.owned, first.generation) == ([], -1)  # a new member owns nothing
    m.on_response(join, joined(), 0.0)
    m.on_response(one(m.poll(0.0, counts), "sync"), synced([TP("t", 0), TP("t", 1)]), 0.0)
    m.take_assignment(0.0)
    m.on_response(one(m.poll(1.0, counts), "heartbeat"), beat(27), 1.0)  # a rebalance
    m.revoked(1.0)
    again = one(m.poll(1.0, counts), "join")
    claim = wire.read_member_subscription(again.request.protocols[0].metadata)
    assert (claim.owned, claim.generation) == ([TP("t", 0), TP("t", 1)], 5)


def test_a_sticky_leader_keeps_each_member_on_what_it_claims() -> None:
    sticky = dataclasses.replace(SETTINGS, assignors=("sticky",))
    m, join = joining(settings=sticky)
    owns = {"m1": [TP("t", 2), TP("t", 3)], "m2": [TP("t", 0), TP("t", 1)]}
    members = [JOIN.JoinGroupResponseMember(
        member_id=member, group_instance_id=None,
        metadata=wire.subscription_bytes(["t"], owned=tps, generation=4))
        for member, tps in owns.items()]
    answer = JOIN(version=7, throttle_time_ms=0, error_code=0, generation_id=5,
                  protocol_type="consumer", protocol_name="sticky", leader="m1",
                  member_id="m1", members=members)
    m.on_response(join, answer, 0.0)
    sync = one(m.poll(0.0, counts), "sync")
    given = {a.member_id: wire.read_assignment(a.assignment) for a in sync.request.assignments}
    assert given == owns  # range would have given m1 partitions 0 and 1


@pytest.mark.parametrize(("code", "again"), [(0, True), (25, False)])  # 25: UNKNOWN_MEMBER_ID
def test_a_join_answered_after_leave_is_left_again(code: int, again: bool) -> None:
    # Tansu completes a JoinGroup it held after a LeaveGroup that overtook it (JoinGroup has a
    # connection of its own) and so admits the member again: it would hold partitions, never
    # heartbeat, and never be removed. The member waits for that answer and leaves again.
    m, _ = stable()
    m.on_response(one(m.poll(1.0, counts), "heartbeat"), beat(27), 1.0)  # a rebalance
    m.revoked(1.0)
    join = one(m.poll(1.0, counts), "join")
    m.leave(2.0)
    assert one(m.poll(2.0, counts), "leave").request.member_id == "m1"
    assert m.pending  # the held JoinGroup's answer decides whether the member is out
    m.on_response(join, joined(generation=6, code=code), 3.0)
    sends = m.poll(3.0, counts)
    assert [s.request.member_id for s in sends if s.kind == "leave"] == (["m1"] if again else [])
    assert not m.pending and m.state is State.UNJOINED


def _rejoined(settings: Settings = SETTINGS) -> tuple[Membership, Send]:
    """Stable in generation 5 as m1, then asked to rejoin (REBALANCE_IN_PROGRESS)."""
    m, _ = stable(settings=settings)
    m.on_response(one(m.poll(1.0, counts), "heartbeat"), beat(27), 1.0)
    m.revoked(1.0)
    return m, one(m.poll(1.0, counts), "join")


def _leaves_then_joins_anew(m: Membership, settings: Settings, now: float) -> None:
    leave = one(m.poll(now, counts), "leave")  # a static member too
    assert leave.request.members[0].member_id == "m1"
    assert leave.request.members[0].group_instance_id == settings.group_instance_id
    assert m.state is State.JOINING and m.poll(now + 0.5, counts) == []  # the join waits
    m.on_response(leave, APIS[ApiKey.LEAVE_GROUP].response(
        version=3, throttle_time_ms=0, error_code=0, members=[]), now + 1)
    assert one(m.poll(now + 1, counts), "join").request.member_id == ""  # a new member


@pytest.mark.parametrize("settings", [SETTINGS, STATIC])
def test_a_follower_whose_rejoin_keeps_the_generation_leaves_and_joins_anew(
        settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    # Tansu answers a static member's rejoin after REBALANCE_IN_PROGRESS with the generation it
    # was in, and its SyncGroup then hands out that generation's stale assignment: a departed
    # member's partitions stayed unassigned for good. A LeaveGroup makes it start a new one.
    m, join = _rejoined(settings)
    m.on_response(join, joined(member="m1", leader="m2", generation=5), 2.0)  # not 6
    assert "answered the rejoin of a follower with the same generation 5," in caplog.text
    _leaves_then_joins_anew(m, settings, 2.0)


@pytest.mark.parametrize("settings", [SETTINGS, STATIC])
def test_a_follower_never_synced_in_its_generation_rejoins_it_without_leaving(
        settings: Settings) -> None:
    # While a generation forms, Tansu answers a follower's SyncGroup REBALANCE_IN_PROGRESS and
    # its rejoin with the same generation. Leaving then (as after a stale assignment) started
    # the next round for every member, which left in turn: no generation formed for minutes
    # (nemesis Tansu seed 9).
    m, join = joining(settings=settings)
    m.on_response(join, joined(member="m1", leader="m2", generation=5), 1.0)
    m.on_response(one(m.poll(1.0, counts), "sync"), synced([], code=27), 1.5)
    m.on_response(one(m.poll(1.5, counts), "join"),
                  joined(member="m1", leader="m2", generation=5), 2.0)
    assert m.state is State.SYNCING and m.generation == 5
    # (and asks whether its leader is a member: below, a leader gone from its generation)
    assert [s.kind for s in m.poll(2.0, counts)] == ["stand-in", "sync"]


@pytest.mark.parametrize("settings", [SETTINGS, STATIC])
def test_a_rejoin_after_a_lost_answer_may_keep_the_generation(settings: Settings) -> None:
    # A static member joining again by itself gets the generation it was in (KIP-345; noida-db,
    # after a cut connection). Leaving then made a zombie take its instance over from the live
    # replacement (nemesis noida-db seed 19), and starts a rebalance for nothing.
    m, join = _rejoined(settings)
    m.on_response(join, joined(member="m1", leader="m2", generation=6), 2.0)
    sync = one(m.poll(2.0, counts), "sync")
    m.on_failure(sync, EosError("cut"), 2.5)  # no answer: find the coordinator, join again
    found(m, 10.0)
    m.on_response(one(m.poll(10.0, counts), "join"),
                  joined(member="m1", leader="m2", generation=6), 11.0)
    assert m.state is State.SYNCING and m.generation == 6
    assert [s.kind for s in m.poll(11.0, counts)] == ["sync"]


@pytest.mark.parametrize(("settings", "held"), [(STATIC, True), (SETTINGS, False)])
def test_a_stopped_static_member_without_a_member_id_joins_once_confirmed(
        settings: Settings, held: bool) -> None:
    # UNKNOWN_MEMBER_ID, a join with no member id sent, then the process was stopped (SIGSTOP)
    # and a replacement took its instance id. Sent again on resume, that join took the
    # instance back from the live replacement, which died (nemesis noida-db seed 14). A static
    # member waits for the application's on_lost (a processor proves it was not replaced).
    m, _ = stable(settings=settings)
    m.on_response(one(m.poll(1.0, counts), "heartbeat"), beat(25), 1.0)
    m.revoked(1.0)
    join = one(m.poll(1.0, counts), "join")
    assert join.request.member_id == ""
    m.poll(30.0, counts)  # resumed: more than a session since the last turn
    found(m, 30.0)
    assert m.held is held
    sends = m.poll(30.0, counts)
    assert [s.kind for s in sends if s.kind == "join"] == ([] if held else ["join"])
    if held:
        m.confirmed(31.0)
        assert not m.held
        assert one(m.poll(31.0, counts), "join").request.member_id == ""


def test_a_leader_whose_assignment_was_ignored_leaves_and_joins_anew(
        caplog: pytest.LogCaptureFixture) -> None:
    m, join = _rejoined(STATIC)
    m.on_response(join, joined(generation=5), 2.0)  # the leader, generation 5 again
    sync = one(m.poll(2.0, counts), "sync")  # it assigns m1 t-0..t-3
    m.on_response(sync, synced([TP("t", 0), TP("t", 1)]), 3.0)  # the old share, not its own
    assert "ignored the leader's assignment of generation 5 and" in caplog.text
    _leaves_then_joins_anew(m, STATIC, 3.0)


def _unnamed_sync(m: Membership, now: float, generation: int = 5) -> None:
    """m1 joins generation ``generation`` as a follower; its SyncGroup answer has no bytes."""
    join = one(m.poll(now, counts), "join")
    m.on_response(join, joined(member="m1", leader="m2", generation=generation), now)
    sync = one(m.poll(now, counts), "sync")
    m.on_response(sync, SYNC(version=5, throttle_time_ms=0, error_code=0,
                             protocol_type="consumer", protocol_name="range", assignment=b""),
                  now)


@pytest.mark.parametrize("settings", [SETTINGS, STATIC])
def test_a_member_the_leaders_assignment_does_not_name_leaves_and_joins_anew(
        settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    # noida-db listed a static member under a member id it held before; the leader assigned
    # that id two partitions, the member's SyncGroup answer had no assignment at all, and the
    # partitions were read by nobody while every member heartbeat in the generation (nemesis
    # noida-db seed 15). A new generation names the member.
    m, join = joining(settings=settings)
    m.on_response(join, joined(member="m1", leader="m2", generation=4), 0.0)
    m.on_response(one(m.poll(0.0, counts), "sync"), SYNC(
        version=5, throttle_time_ms=0, error_code=0, protocol_type="consumer",
        protocol_name="range", assignment=b""), 1.0)
    assert "with no assignment for member 'm1': the leader's member list did not" in caplog.text
    _leaves_then_joins_anew(m, settings, 1.0)


def test_an_empty_assignment_the_leader_wrote_is_taken() -> None:
    # More members than partitions: the leader names this member and gives it nothing.
    m, join = joining()
    m.on_response(join, joined(member="m1", leader="m2", generation=4), 0.0)
    m.on_response(one(m.poll(0.0, counts), "sync"), synced([]), 1.0)
    assert m.state is State.ASSIGNING and m.take_assignment(1.0) == []


def test_a_leader_that_always_leaves_the_member_out_is_given_in_to_at_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    m = Membership(SETTINGS)
    m.subscribe(["t"], 0.0)
    found(m)
    for attempt in range(3):  # three new generations, each without this member
        _unnamed_sync(m, float(attempt), generation=4 + attempt)
        leave = one(m.poll(float(attempt), counts), "leave")
        m.on_response(leave, APIS[ApiKey.LEAVE_GROUP].response(
            version=3, throttle_time_ms=0, error_code=0, members=[]), float(attempt))
    assert "again has no assignment" not in caplog.text
    _unnamed_sync(m, 3.0, generation=7)
    assert "generation 7 again has no assignment for member 'm1' (4 times in a row)" \
        in caplog.text
    assert m.state is State.ASSIGNING and m.take_assignment(3.0) == []
    m.on_response(one(m.poll(4.0, counts), "heartbeat"), beat(27), 4.0)  # a rebalance
    m.revoked(4.0)
    _unnamed_sync(m, 4.0, generation=8)
    assert "generation 8 again has no assignment for member 'm1' (5 times in a row)" \
        in caplog.text


def test_a_leader_whose_assignment_was_applied_in_the_same_generation_stays() -> None:
    # Tansu completes a rebalance of static members without a new generation while the group is
    # still forming, and then applies the leader's assignment: nothing to mend (and a leader that
    # left then would stay named leader, with nobody assigning).
    m, join = _rejoined(STATIC)
    m.on_response(join, joined(generation=5), 2.0)
    sync = one(m.poll(2.0, counts), "sync")
    mine = wire.read_assignment(sync.request.assignments[0].assignment)
    m.on_response(sync, synced(mine), 3.0)
    assert m.state is State.ASSIGNING and m.take_assignment(3.0) == mine


def test_a_static_member_stands_in_at_once_for_its_own_old_id_named_leader() -> None:
    # Tansu, after a static leader's process died and its session ran out, went on naming its
    # old member id as leader when the restarted instance joined under a new one: nobody
    # assigned, every SyncGroup got REBALANCE_IN_PROGRESS, for good. No live member holds an
    # old id of this member's own instance: the stand-in goes without waiting for a refusal.
    m, join = joining(settings=STATIC)
    old = "i-1-0f66bc71-fd48-919e-856c-8edbce53a410"
    m.on_response(join, joined(member="i-1-new", leader=old, generation=4), 1.0)
    assert m.state is State.SYNCING and m.member_id == "i-1-new"
    probe = one(m.poll(1.0, counts), "stand-in").request
    assert (probe.API_KEY, probe.member_id) == (ApiKey.HEARTBEAT, old)


@pytest.mark.parametrize(("settings", "leader"), [
    (STATIC, "i-2-0f66bc71-fd48-919e-856c-8edbce53a410"),  # another instance's member id
    (STATIC, "i-1-x-0f66bc71-fd48-919e-856c-8edbce53a410"),  # instance "i-1-x", not "i-1"
    (SETTINGS, "i-1-0f66bc71-fd48-919e-856c-8edbce53a410"),  # a dynamic member has no instance
])
def test_a_leader_id_of_another_instance_is_not_stood_in_for_at_once(settings: Settings,
                                                                      leader: str) -> None:
    m, join = joining(settings=settings)
    m.on_response(join, joined(member="i-1-new", leader=leader, generation=4), 1.0)
    assert m.state is State.SYNCING and m.member_id == "i-1-new"
    assert [s.kind for s in m.poll(1.0, counts)] == ["sync"]


def test_a_rejoin_answered_with_a_new_generation_syncs() -> None:
    m, join = _rejoined()
    m.on_response(join, joined(member="m1", leader="m2", generation=6), 2.0)
    assert m.state is State.SYNCING and m.generation == 6
    assert [s.kind for s in m.poll(2.0, counts)] == ["sync"]


def reach(state: State) -> Membership:
    """A membership in ``state``, reached through public inputs only."""
    if state is State.UNJOINED:
        return Membership(SETTINGS)
    if state is State.FAILED:
        m, join = joining()
        m.on_response(join, joined(code=23), 0.0)
        return m
    m, join = joining()
    if state is State.JOINING:
        return m
    m.on_response(join, joined(member="m2", leader="m1"), 0.0)
    if state is State.SYNCING:
        return m
    m.on_response(one(m.poll(0.0, counts), "sync"), synced([TP("t", 0)]), 0.0)
    if state is State.ASSIGNING:
        return m
    m.take_assignment(0.0)
    if state is State.REVOKING:
        m.on_response(one(m.poll(1.0, counts), "heartbeat"), beat(27), 1.0)
    return m


@pytest.mark.parametrize("state", list(State))
def test_reach_gets_every_state(state: State) -> None:
    assert reach(state).state is state


CALLS = {Input.CALL_ASSIGNED: lambda m: m.take_assignment(2.0),
         Input.CALL_REVOKED: lambda m: m.revoked(2.0),
         Input.CALL_SUBSCRIBE: lambda m: m.subscribe(["other"], 2.0),
         Input.CALL_LEAVE: lambda m: m.leave(2.0)}


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("call", list(CALLS))
def test_every_application_call_follows_the_table(state: State, call: Input) -> None:
    m = reach(state)
    target = TABLE.get((state, call))
    if call is Input.CALL_LEAVE and state is State.FAILED:
        target = State.FAILED  # leave() after a failure is a no-op: the error stays
    if target is None:
        with pytest.raises(IllegalStateError):
            CALLS[call](m)
        assert m.state is state  # refused: nothing changed
    else:
        CALLS[call](m)
        assert m.state is target


# -- static membership (KIP-345) -------------------------------------------------------------------



def test_a_static_member_sends_its_instance_id_in_join_sync_and_heartbeat() -> None:
    m, join = joining(settings=STATIC)
    assert join.request.group_instance_id == "i-1"
    m.on_response(join, joined(), 0.0)
    sync = one(m.poll(0.0, counts), "sync")
    assert sync.request.group_instance_id == "i-1"
    m.on_response(sync, synced([TP("t", 0)]), 0.0)
    m.take_assignment(0.0)
    assert one(m.poll(1.0, counts), "heartbeat").request.group_instance_id == "i-1"


def test_a_dynamic_member_sends_none() -> None:
    _, join = joining()
    assert join.request.group_instance_id is None


def test_a_static_member_does_not_leave_when_it_closes() -> None:
    m, _ = stable(settings=STATIC)
    m.leave(0.5)  # Java: a static member keeps its place for session.timeout.ms
    assert m.poll(0.5, counts) == [] and not m.pending and m.state is State.UNJOINED


def test_a_static_member_does_not_leave_when_the_poll_interval_runs_out() -> None:
    m, _ = stable(settings=STATIC)
    for t in range(1, 60):
        m.on_response(one(m.poll(float(t), counts), "heartbeat"), beat(), float(t))
    assert [s.kind for s in m.poll(60.0, counts)] == []
    # and keeps its member id (see the next test for why)
    assert m.state is State.REVOKING and (m.member_id, m.generation) == ("m1", -1)


@pytest.mark.parametrize("timer", ["session", "poll interval"])
def test_a_static_member_resumed_after_a_long_pause_is_the_one_fenced(timer: str) -> None:
    # Used to break: a paused static member cleared its member id when its session ran out, and
    # its JoinGroup with no member id and the same instance id then replaced (fenced) the live
    # member that had taken its place meanwhile; both processes ended dead.
    m, _ = stable(settings=STATIC)
    if timer == "session":  # the process was stopped: nothing answered, nothing polled
        now = 10.5
    else:
        for t in range(1, 60):
            m.on_response(one(m.poll(float(t), counts), "heartbeat"), beat(), float(t))
        now = 60.0
    m.poll(now, counts)
    assert m.state is State.REVOKING
    m.revoked(now)
    found(m, now)
    join = one(m.poll(now, counts), "join")
    assert (join.request.member_id, join.request.group_instance_id) == ("m1", "i-1")
    m.on_response(join, joined(code=82), now)  # the coordinator fences the old process
    assert m.state is State.FAILED and isinstance(m.error, FencedError)


@pytest.mark.parametrize("kind", ["join", "sync"])
def test_a_replaced_static_member_is_fenced(kind: str) -> None:
    # 82 FENCED_INSTANCE_ID: another member joined with this group.instance.id
    m, join = joining(settings=STATIC)
    if kind == "join":
        m.on_response(join, joined(code=82), 0.0)
    else:
        m.on_response(join, joined(), 0.0)
        m.on_response(one(m.poll(0.0, counts), "sync"), synced([], code=82), 0.0)
    assert m.state is State.FAILED and isinstance(m.error, FencedError) and m.error.code == 82


def test_a_heartbeat_answer_read_after_a_long_pause_does_not_renew_the_session() -> None:
    # Used to break: the answer to a heartbeat sent just before the process was stopped sat in
    # the socket; read on resume it set "heard at" to now, so the member kept its generation and
    # its partitions although the group had moved on during the pause (Tansu then let two
    # members commit the same input: duplicates). Alive since the heartbeat was *sent*.
    m, _ = stable()
    beat_sent = one(m.poll(1.0, counts), "heartbeat")
    m.on_response(beat_sent, beat(), 20.0)  # the process was stopped from 1 s to 20 s
    assert not m.in_generation(20.0)
    m.poll(20.0, counts)
    assert m.state is State.REVOKING and m.generation == -1


@pytest.mark.parametrize("state", [State.JOINING, State.SYNCING])
def test_a_join_answered_while_the_process_was_stopped_is_not_trusted(state: State) -> None:
    # Used to break: a JoinGroup (or SyncGroup) sent just before a SIGSTOP was answered while
    # the process was stopped; read on resume, it installed an assignment of a generation the
    # group had left meanwhile (Tansu answered the SyncGroup of it anyway), and two members
    # owned the same partitions. A driver that did not run for a session joins again.
    m, join = joining()
    sent = join
    if state is State.SYNCING:
        m.on_response(join, joined(member="m2", leader="m1"), 0.5)
        sent = one(m.poll(0.5, counts), "sync")
    m.on_response(sent, joined() if state is State.JOINING else synced([TP("t", 0)]), 30.0)
    assert m.state is State.JOINING and m.generation == -1 and not m.assignment
    found(m, 30.0)
    again = one(m.poll(30.0, counts), "join")
    assert again.attempt > sent.attempt and again.request.member_id == m.member_id


def test_a_rebalance_that_does_not_end_is_said_at_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    # A group that could form no generation for minutes (a nemesis run on Tansu) logged
    # nothing at all: it looked like an idle one.
    m, join = joining()
    clock = [0.0]

    def until(end: float) -> int:
        """Turn the driver each second (as the I/O thread does) up to ``end``: the warnings."""
        while clock[0] < end:
            clock[0] += 1.0
            m.poll(clock[0], counts)
        return len(caplog.records)

    with caplog.at_level(logging.WARNING, "eosclient.consumer"):
        assert until(29.0) == 0 and m.next_timer() == 30.0
        assert until(30.0) == 1
        assert caplog.records[0].getMessage() == (
            "group 'g': no generation for 30 s (JoinGroup in flight: the coordinator holds it "
            "until every member it knows joins, or the rebalance timeout; member '', last "
            "generation -1)")
        assert until(59.0) == 1
        assert until(60.0) == 2  # then each time it has lasted twice as long
        m.on_response(join, joined(), 61.0)
        m.on_response(one(m.poll(61.0, counts), "sync"), synced([TP("t", 0)]), 61.0)
        m.take_assignment(61.0)
        for clock[0] in range(62, 80):  # a generation: the clock starts again at the next one
            for send in m.poll(clock[0], counts):
                m.on_response(send, beat(0), clock[0])
        assert len(caplog.records) == 2 and m.state is State.STABLE
        m.on_response(one(m.poll(80.0, counts) or m.poll(83.0, counts), "heartbeat"),
                      beat(27), 83.0)  # REBALANCE_IN_PROGRESS
        m.revoked(83.0)
        clock[0] = 83.0
        assert until(112.0) == 2
        assert until(113.0) == 3


def _refused_then_same_leader(leader: str = "gone") -> tuple[Membership, list[Send]]:
    """A follower of ``leader`` whose SyncGroup was answered REBALANCE_IN_PROGRESS and whose
    next JoinGroup the same generation and leader; what it sends next."""
    m, join = joining()
    m.on_response(join, joined(leader=leader), 0.0)
    m.on_response(one(m.poll(0.0, counts), "sync"), synced([], code=27), 4.8)
    m.on_response(one(m.poll(4.8, counts), "join"), joined(leader=leader), 7.8)
    return m, m.poll(7.8, counts)


def test_a_follower_stands_in_for_a_leader_gone_from_its_generation(
        caplog: pytest.LogCaptureFixture) -> None:
    # Tansu keeps naming as leader a member that left a forming generation: nobody assigns, and
    # every SyncGroup is refused, for good (a rolling restart: a member joins, the leader
    # closes). A follower asks whether the leader is a member, and if not joins in its name,
    # assigns nothing to anyone, and leaves: the next generation has no leader named.
    m, sends = _refused_then_same_leader()
    assert m.state is State.SYNCING  # this member goes on as usual meanwhile
    assert [s.kind for s in sends] == ["stand-in", "sync"]
    probe = one(sends, "stand-in").request
    assert (probe.API_KEY, probe.member_id, probe.generation_id) == (ApiKey.HEARTBEAT, "gone", 5)
    assert m.pending  # close() waits for the stand-in
    m.on_response(one(sends, "stand-in"), beat(25), 8.0)  # UNKNOWN_MEMBER_ID: not a member
    assert "leader 'gone', which left the group; standing in for it" in caplog.text
    join = one(m.poll(8.0, counts), "stand-in")
    assert (join.request.API_KEY, join.request.member_id) == (ApiKey.JOIN_GROUP, "gone")
    assert join.request.group_instance_id is None
    m.on_response(join, joined(member="gone", leader="gone", generation=5,
                               members={"gone": ["t"], "m1": ["t"], "m2": ["t"]}), 11.0)
    sync = one(m.poll(11.0, counts), "stand-in").request
    assert (sync.API_KEY, sync.member_id, sync.generation_id) == (ApiKey.SYNC_GROUP, "gone", 5)
    assert {a.member_id: wire.read_assignment(a.assignment) for a in sync.assignments} == {
        "gone": [], "m1": [], "m2": []}
    m.on_response(_sent(m, sync), synced([]), 11.1)
    leave = one(m.poll(11.1, counts), "stand-in").request
    assert (leave.API_KEY, leave.members[0].member_id) == (ApiKey.LEAVE_GROUP, "gone")
    m.on_response(_sent(m, leave), APIS[ApiKey.LEAVE_GROUP].response(
        version=3, throttle_time_ms=0, error_code=0, members=[]), 11.2)
    assert not m.pending and m.poll(11.2, counts) == []


def _sent(m: Membership, request: Any) -> Send:
    return Send(request, "stand-in", m.attempt)


def test_no_leader_named_is_not_stood_in_for() -> None:
    _, sends = _refused_then_same_leader(leader="")
    assert [s.kind for s in sends] == ["sync"]


def test_a_leader_that_is_a_member_is_not_stood_in_for() -> None:
    m, sends = _refused_then_same_leader()
    m.on_response(one(sends, "stand-in"), beat(27), 8.0)  # a member, slow to assign
    assert not m.pending and [s.kind for s in m.poll(8.0, counts)] == []


def test_a_stand_in_cut_after_its_join_leaves_in_the_leaders_name() -> None:
    m, sends = _refused_then_same_leader()
    m.on_response(one(sends, "stand-in"), beat(25), 8.0)
    join = one(m.poll(8.0, counts), "stand-in")
    m.on_failure(join, EosError("cut"), 9.0)  # it may have been taken in as the leader
    leave = one(m.poll(9.0, counts), "stand-in").request
    assert (leave.API_KEY, leave.members[0].member_id) == (ApiKey.LEAVE_GROUP, "gone")


@pytest.mark.parametrize("second", [joined(leader="other"), joined(leader="gone", generation=6)])
def test_a_refused_sync_then_a_new_leader_or_generation_stands_in_for_nobody(second: Any) -> None:
    # Kafka and noida-db answer the rejoin after a refused SyncGroup with a new generation
    m, join = joining()
    m.on_response(join, joined(leader="gone"), 0.0)
    m.on_response(one(m.poll(0.0, counts), "sync"), synced([], code=27), 4.8)
    m.on_response(one(m.poll(4.8, counts), "join"), second, 7.8)
    assert [s.kind for s in m.poll(7.8, counts)] == ["sync"]
