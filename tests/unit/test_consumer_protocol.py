"""The consumer's wire adapter: consumer protocol bytes, and requests at every version used.

Subscriptions and assignments are what JoinGroup and SyncGroup carry as opaque bytes; every
member of a group must read every other member's, so their layout is pinned with golden bytes
(Kafka's ConsumerProtocolSubscription v1 / ConsumerProtocolAssignment v1) and round-tripped.
Requests are encoded at every version eosclient may negotiate and decoded back with
kafka-python's schema, so a field set for the wrong version shows up here, not on a broker.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer import ConsumerProtocolSubscription

from eosclient._consumer import protocol as wire
from eosclient._core.types import TopicPartition as TP
from eosclient._protocol.apis import APIS
from eosclient.errors import ApiKey, ProtocolError

topics = st.lists(st.text("abcxyz-._", min_size=1, max_size=8), max_size=5, unique=True)
partitions = st.lists(st.builds(TP, st.sampled_from(["a", "b", "c"]), st.integers(0, 2**31 - 1)),
                      max_size=20)


def test_subscription_golden_bytes() -> None:
    # version 1, topics ["a", "b"], user_data null, owned_partitions []
    assert wire.subscription_bytes(["b", "a", "b"]) == (
        b"\x00\x01" b"\x00\x00\x00\x02" b"\x00\x01a" b"\x00\x01b" b"\xff\xff\xff\xff"
        b"\x00\x00\x00\x00")


def test_assignment_golden_bytes() -> None:
    # version 1, [("a", [0, 1])], user_data null
    assert wire.assignment_bytes([TP("a", 1), TP("a", 0)]) == (
        b"\x00\x01" b"\x00\x00\x00\x01" b"\x00\x01a" b"\x00\x00\x00\x02" b"\x00\x00\x00\x00"
        b"\x00\x00\x00\x01" b"\xff\xff\xff\xff")


@given(names=topics)
def test_subscription_round_trip(names: list[str]) -> None:
    assert wire.read_subscription(wire.subscription_bytes(names)) == sorted(names)


@given(tps=partitions)
def test_assignment_round_trip(tps: list[TP]) -> None:
    assert wire.read_assignment(wire.assignment_bytes(tps)) == sorted(set(tps))


def test_a_newer_subscription_version_is_read() -> None:
    # Java's consumers send v3 (owned partitions, generation, rack): its topics still count.
    data = ConsumerProtocolSubscription(topics=["x"], user_data=b"u", owned_partitions=[],
                                        generation_id=4, rack_id="r").encode(version=3)
    assert wire.read_subscription(bytes(data)) == ["x"]


def test_empty_assignment_bytes_mean_no_partitions() -> None:
    assert wire.read_assignment(b"") == [] and wire.read_assignment(None) == []


@pytest.mark.parametrize("data", [b"\x00", b"\x00\x01\x00\x00\x00\x05\x00"])
def test_garbage_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        wire.read_subscription(data)
    with pytest.raises(ProtocolError):
        wire.read_assignment(data)


REQUESTS: dict[ApiKey, Any] = {
    ApiKey.FIND_COORDINATOR: lambda: wire.find_coordinator("g"),
    ApiKey.JOIN_GROUP: lambda: wire.join_group("g", "m", session_timeout_ms=45_000,
                                               rebalance_timeout_ms=300_000,
                                               protocols=[("range", b"meta")]),
    ApiKey.SYNC_GROUP: lambda: wire.sync_group("g", 3, "m", "range", {"m": b"x", "n": b"y"}),
    ApiKey.HEARTBEAT: lambda: wire.heartbeat("g", 3, "m"),
    ApiKey.LEAVE_GROUP: lambda: wire.leave_group("g", "m"),
    ApiKey.OFFSET_COMMIT: lambda: wire.offset_commit("g", 3, "m", {TP("t", 1): 7}),
    ApiKey.OFFSET_FETCH: lambda: wire.offset_fetch("g", [TP("t", 1), TP("t", 0)]),
    ApiKey.LIST_OFFSETS: lambda: wire.list_offsets([TP("t", 0)], wire.EARLIEST, 1),
    ApiKey.FETCH: lambda: wire.fetch([(TP("t", 0), 5, 100)], isolation=1, max_wait_ms=500,
                                     min_bytes=1, max_bytes=1000),
}
VERSIONS = [(key, v) for key in REQUESTS
            for v in range(APIS[key].min_version, APIS[key].max_version + 1)]


@pytest.mark.parametrize(("key", "version"), VERSIONS, ids=str)
def test_every_request_encodes_at_every_version_used(key: ApiKey, version: int) -> None:
    request = REQUESTS[key]()
    decoded = APIS[key].request.decode(request.encode(version=version), version=version)
    if key is ApiKey.OFFSET_FETCH:
        if version >= 8:
            assert [t.partition_indexes for t in decoded.groups[0].topics] == [[0, 1]]
        else:
            assert decoded.group_id == "g" and decoded.topics[0].partition_indexes == [0, 1]
        assert decoded.require_stable is (version >= 7)
    elif key is ApiKey.LEAVE_GROUP:
        members = decoded.members if version >= 3 else None
        assert (members[0].member_id if members else decoded.member_id) == "m"
    elif key is ApiKey.FIND_COORDINATOR:
        assert (decoded.coordinator_keys == ["g"]) if version >= 4 else decoded.key == "g"


def test_offset_fetch_answers_are_read_in_both_shapes() -> None:
    cls = APIS[ApiKey.OFFSET_FETCH].response
    old_topic = cls.OffsetFetchResponseTopic
    old = cls(version=7, topics=[old_topic(name="t", partitions=[
        old_topic.OffsetFetchResponsePartition(partition_index=0, committed_offset=-1,
                                               metadata="", error_code=0),
        old_topic.OffsetFetchResponsePartition(partition_index=1, committed_offset=9,
                                               metadata="", error_code=88)])], error_code=0)
    group = cls.OffsetFetchResponseGroup
    new = cls(version=8, groups=[group(group_id="g", error_code=15, topics=[
        group.OffsetFetchResponseTopics(name="t", partitions=[
            group.OffsetFetchResponseTopics.OffsetFetchResponsePartitions(
                partition_index=0, committed_offset=4, metadata="", error_code=0)])])])
    assert wire.read_offset_fetch(old) == (0, {TP("t", 0): wire.Offset(0, None),
                                               TP("t", 1): wire.Offset(88, 9)})
    assert wire.read_offset_fetch(new) == (15, {TP("t", 0): wire.Offset(0, 4)})


def test_coordinator_answers_are_read_in_both_shapes() -> None:
    cls = APIS[ApiKey.FIND_COORDINATOR].response
    old = cls(version=3, error_code=0, error_message=None, node_id=2, host="h", port=9)
    new = cls(version=4, coordinators=[cls.Coordinator(key="g", node_id=-1, host="", port=-1,
                                                       error_code=15, error_message="loading")])
    assert wire.read_coordinator(old) == (0, wire.Node(2, "h", 9), None)
    assert wire.read_coordinator(new) == (15, None, "loading")


# KIP-345: the version each request first carries ``group_instance_id`` in.
STATIC: dict[ApiKey, tuple[int, Any]] = {
    ApiKey.JOIN_GROUP: (5, lambda: wire.join_group(
        "g", "m", session_timeout_ms=45_000, rebalance_timeout_ms=300_000,
        protocols=[("range", b"meta")], group_instance_id="i")),
    ApiKey.SYNC_GROUP: (3, lambda: wire.sync_group("g", 3, "m", "range", {"m": b"x"},
                                                   group_instance_id="i")),
    ApiKey.HEARTBEAT: (3, lambda: wire.heartbeat("g", 3, "m", group_instance_id="i")),
    ApiKey.OFFSET_COMMIT: (7, lambda: wire.offset_commit("g", 3, "m", {TP("t", 1): 7},
                                                         group_instance_id="i")),
    ApiKey.LEAVE_GROUP: (3, lambda: wire.leave_group("g", "m", group_instance_id="i")),
}
STATIC_VERSIONS = [(key, v) for key in STATIC
                   for v in range(APIS[key].min_version, APIS[key].max_version + 1)]


@pytest.mark.parametrize(("key", "version"), STATIC_VERSIONS, ids=str)
def test_a_static_member_id_is_sent_from_its_version_on(key: ApiKey, version: int) -> None:
    first, build = STATIC[key]
    request = build()
    decoded = type(request).decode(request.encode(version=version), version=version)
    if key is ApiKey.LEAVE_GROUP and version >= first:
        assert [(m.member_id, m.group_instance_id) for m in decoded.members] == [("m", "i")]
    elif key is not ApiKey.LEAVE_GROUP:
        assert getattr(decoded, "group_instance_id", None) == ("i" if version >= first else None)


def test_a_dynamic_member_sends_no_instance_id() -> None:
    for key, version in ((ApiKey.JOIN_GROUP, 9), (ApiKey.SYNC_GROUP, 5), (ApiKey.HEARTBEAT, 4),
                         (ApiKey.OFFSET_COMMIT, 8)):
        request = REQUESTS[key]()
        assert type(request).decode(request.encode(version=version),
                                    version=version).group_instance_id is None
    leave = wire.leave_group("g", "m")
    assert leave.decode(leave.encode(version=5), version=5).members[0].group_instance_id is None


def test_owning_subscription_golden_bytes() -> None:
    # version 3, topics ["a"], user_data null, owned [("a", [1, 2])], generation 5, rack null
    assert wire.subscription_bytes(["a"], owned=[TP("a", 2), TP("a", 1)], generation=5) == (
        b"\x00\x03" b"\x00\x00\x00\x01" b"\x00\x01a" b"\xff\xff\xff\xff"
        b"\x00\x00\x00\x01" b"\x00\x01a" b"\x00\x00\x00\x02" b"\x00\x00\x00\x01"
        b"\x00\x00\x00\x02" b"\x00\x00\x00\x05" b"\xff\xff")


@given(names=topics, owned=partitions, generation=st.integers(-1, 2**31 - 1))
def test_owning_subscription_round_trip(names: list[str], owned: list[TP],
                                        generation: int) -> None:
    data = wire.subscription_bytes(names, owned=owned, generation=generation)
    assert wire.read_member_subscription(data) == wire.Subscription(
        sorted(names), sorted(set(owned)), generation, None)
    assert wire.read_subscription(data) == sorted(names)


@pytest.mark.parametrize(("version", "owned", "generation"), [
    (0, [], -1), (1, [TP("x", 0), TP("y", 3)], -1), (2, [TP("x", 0)], 7), (3, [TP("x", 0)], 7)])
def test_every_subscription_version_decodes_what_it_has(version: int, owned: list[TP],
                                                        generation: int) -> None:
    # Java sends v3; older clients v0-v2 (a field the version lacks reads as "not said").
    entries = [ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=ps)
               for t, ps in wire.by_topic(owned).items()]
    data = ConsumerProtocolSubscription(topics=["y", "x"], user_data=b"u",
                                        owned_partitions=entries, generation_id=generation,
                                        rack_id="r").encode(version=version)
    assert wire.read_member_subscription(bytes(data)) == wire.Subscription(
        ["y", "x"], owned, generation, b"u")


def test_an_eager_subscription_owns_nothing_and_names_no_generation() -> None:
    assert wire.read_member_subscription(wire.subscription_bytes(["a"])) == wire.Subscription(
        ["a"], [], -1, None)


@pytest.mark.parametrize("cut", [1, 5, 12, 20])
def test_a_cut_owning_subscription_is_a_protocol_error(cut: int) -> None:
    data = wire.subscription_bytes(["a"], owned=[TP("a", 1)], generation=5)
    with pytest.raises(ProtocolError):
        wire.read_member_subscription(data[:cut])


def test_sticky_user_data_golden_bytes() -> None:
    # Java's StickyAssignorUserData v1, no version header: [("a", [1, 2])], generation 5
    assert wire.sticky_user_data([TP("a", 2), TP("a", 1)], 5) == (
        b"\x00\x00\x00\x01" b"\x00\x01a" b"\x00\x00\x00\x02" b"\x00\x00\x00\x01"
        b"\x00\x00\x00\x02" b"\x00\x00\x00\x05")


def _subscription(user_data: bytes | None, owned: list[TP] = [],  # noqa: B006 - read only
                  generation: int = -1, version: int = 1) -> wire.Subscription:
    entries = [ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=ps)
               for t, ps in wire.by_topic(owned).items()]
    return wire.read_member_subscription(bytes(ConsumerProtocolSubscription(
        topics=["a"], user_data=user_data, owned_partitions=entries, generation_id=generation,
        rack_id=None).encode(version=version)))


def test_a_java_eager_sticky_members_claim_is_in_its_user_data() -> None:
    v1 = wire.sticky_user_data([TP("a", 1), TP("a", 2)], 5)
    assert wire.read_claim(_subscription(v1), "sticky") == (5, [TP("a", 1), TP("a", 2)])
    v0 = v1[:-4]  # v0 has no generation: "not said"
    assert wire.read_claim(_subscription(v0), "sticky") == (-1, [TP("a", 1), TP("a", 2)])
    for nothing in (None, b"", b"\x00\x00"):
        assert wire.read_claim(_subscription(nothing), "sticky") == (-1, [])


def test_a_cooperative_members_claim_is_its_owned_partitions() -> None:
    owned = [TP("a", 0)]
    assert wire.read_claim(_subscription(None, owned, 7, version=3),
                           "cooperative-sticky") == (7, owned)
    # Before v2 Java's cooperative-sticky writes its generation as user data (an int32).
    assert wire.read_claim(_subscription(b"\x00\x00\x00\x09", owned, version=1),
                           "cooperative-sticky") == (9, owned)
    assert wire.read_claim(_subscription(b"\x00\x00\x00\x09", owned, version=1), "sticky") == (
        9, owned)  # an owning subscription on sticky (eosclient's, once it reports ownership)
    assert wire.read_claim(_subscription(None, owned, 7, version=3), "range") == (-1, [])
