"""Metadata (eosclient._net.metadata) and Backoff (eosclient._net.backoff), sans-IO."""

from __future__ import annotations

from typing import Any

import pytest

from eosclient._core.types import TopicPartition
from eosclient._net.backoff import Backoff
from eosclient._net.metadata import Metadata
from eosclient._protocol.apis import APIS
from eosclient.errors import ApiKey, FatalError

RESPONSE = APIS[ApiKey.METADATA].response
BROKER = RESPONSE.fields["brokers"].data_class
TOPIC = RESPONSE.fields["topics"].data_class
PARTITION = TOPIC.fields["partitions"].data_class


def response(topics: dict[str, tuple[int, list[int]]], epoch: int = 0) -> Any:
    """``{name: (error code, [leader per partition])}``, every leader at ``epoch``."""
    return RESPONSE(
        brokers=[BROKER(node_id=1, host="h1", port=1, rack=None),
                 BROKER(node_id=2, host="h2", port=2, rack=None)],
        topics=[TOPIC(error_code=code, name=name, is_internal=False, partitions=[
            PARTITION(error_code=0, partition_index=i, leader_id=leader, leader_epoch=epoch,
                      replica_nodes=[], isr_nodes=[], offline_replicas=[])
            for i, leader in enumerate(leaders)]) for name, (code, leaders) in topics.items()],
        cluster_id="c", controller_id=1, throttle_time_ms=0)


def fresh() -> Metadata:
    return Metadata(max_age=300.0, backoff=0.1)


def test_nothing_is_asked_until_a_topic_is_wanted() -> None:
    meta = fresh()
    assert not meta.due(0.0) and meta.next_update(0.0) == float("inf")
    meta.want(["t"])
    assert meta.due(0.0)
    request = meta.build_request(0.0)
    assert [t.name for t in request.topics] == ["t"] and request.allow_auto_topic_creation
    assert not meta.due(0.0)  # one in flight at a time


def test_an_answer_gives_nodes_counts_and_leaders() -> None:
    meta = fresh()
    meta.want(["t"])
    meta.build_request(0.0)
    meta.on_response(response({"t": (0, [1, 2, 1])}), 1.0)
    assert meta.nodes == {1: ("h1", 1), 2: ("h2", 2)}
    assert meta.partition_count("t") == 3
    assert meta.leader(TopicPartition("t", 1)) == 2
    assert meta.version == 1
    assert meta.next_update(1.0) == pytest.approx(301.0)  # refreshed at metadata.max.age.ms


def test_a_leaderless_partition_or_a_creating_topic_asks_again_after_the_backoff() -> None:
    meta = fresh()
    meta.want(["t", "new"])
    meta.build_request(0.0)
    meta.on_response(response({"t": (0, [1, -1]), "new": (3, [])}), 0.0)
    assert meta.leader(TopicPartition("t", 1)) is None
    assert meta.partition_count("new") is None and meta.topic_error("new") is None
    assert not meta.due(0.05) and meta.due(0.1)


def test_a_non_retriable_topic_error_is_kept_for_callers() -> None:
    meta = fresh()
    meta.want(["secret"])
    meta.build_request(0.0)
    meta.on_response(response({"secret": (29, [])}), 0.0)  # TOPIC_AUTHORIZATION_FAILED
    assert isinstance(meta.topic_error("secret"), FatalError)


def test_request_update_and_failure_force_a_request_after_the_backoff() -> None:
    meta = fresh()
    meta.want(["t"])
    meta.build_request(0.0)
    meta.on_failure()
    assert meta.next_update(0.0) == pytest.approx(0.1)
    meta.build_request(0.1)
    meta.on_response(response({"t": (0, [1])}), 0.2)
    assert not meta.due(0.3)
    meta.request_update()
    assert meta.due(0.3)


def test_backoff_doubles_up_to_the_cap_with_bounded_jitter() -> None:
    backoff = Backoff(0.1, 1.0)
    assert backoff.delay(0) == 0.0
    for attempt, base in ((1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8)):
        delays = [backoff.delay(attempt) for _ in range(50)]
        assert all(base <= d <= min(base + 0.02, 1.0) for d in delays), (attempt, delays)
    assert all(backoff.delay(10) == 1.0 for _ in range(10))
    assert Backoff(0.0, 1.0).delay(3) == 0.0


def test_want_all_lists_every_topic_for_a_pattern_and_refreshes_by_age() -> None:
    meta = fresh()
    meta.want(["t"])
    meta.build_request(0.0)
    meta.on_response(response({"t": (0, [1])}), 0.5)
    assert meta.all_topics is None  # a named-topics answer lists nothing more
    meta.want_all()
    assert meta.due(0.6)  # forced at once
    assert meta.build_request(0.6).topics is None  # None: all topics
    answer = response({"t": (0, [1]), "u": (0, [2]), "denied": (29, [])})
    answer.topics.append(TOPIC(error_code=0, name="__consumer_offsets", is_internal=True,
                               partitions=[]))
    meta.on_response(answer, 1.0)
    assert meta.all_topics == {"t", "u"}  # errors and internal topics left out
    assert meta.partition_count("u") == 1
    assert meta.next_update(1.0) == pytest.approx(301.0)


def test_an_answer_with_an_older_leader_epoch_keeps_the_newer_leader_and_asks_again() -> None:
    # KIP-320: a broker that has not heard of an election yet names the old leader; following
    # it sent the client back to a broker that no longer leads the partition.
    meta = fresh()
    meta.want(["t"])
    meta.build_request(0.0)
    meta.on_response(response({"t": (0, [2])}, epoch=5), 1.0)
    meta.build_request(1.0)
    meta.on_response(response({"t": (0, [1])}, epoch=4), 2.0)  # a lagging broker's view
    assert meta.leader(TopicPartition("t", 0)) == 2
    assert meta.leader_epochs() == {TopicPartition("t", 0): 5}
    assert meta.due(2.0)  # again after the backoff, not at metadata.max.age.ms
    meta.build_request(2.1)
    meta.on_response(response({"t": (0, [1])}, epoch=6), 3.0)  # a newer election
    assert meta.leader(TopicPartition("t", 0)) == 1
    assert meta.leader_epochs() == {TopicPartition("t", 0): 6}


def test_a_topic_recreated_under_its_name_starts_its_epochs_again() -> None:
    meta = fresh()
    meta.want(["t"])
    for topic_id, epoch, leader in ((b"a" * 16, 7, 2), (b"b" * 16, 0, 1)):
        answer = response({"t": (0, [leader])}, epoch=epoch)
        answer.topics[0].topic_id = topic_id
        meta.build_request(0.0)
        meta.on_response(answer, 1.0)
    assert meta.leader(TopicPartition("t", 0)) == 1
    assert meta.leader_epochs() == {TopicPartition("t", 0): 0}
