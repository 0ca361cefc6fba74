"""Offset commits, committed-offset reads and start/end lookups, sans-IO: answers in, verdicts out.

Every code goes through ``eosclient.errors``; the tests check what each job does next: finish,
retry after the backoff, find the coordinator again, or end with the classified error.
"""

from __future__ import annotations

from typing import Any

import pytest

from eosclient._consumer import protocol as wire
from eosclient._consumer.lookups import OffsetQuery, Watermarks
from eosclient._consumer.offsets import OffsetJob
from eosclient._core.types import TopicPartition as TP
from eosclient._net.backoff import Backoff
from eosclient._protocol.apis import APIS
from eosclient.errors import (
    AbortableError,
    ApiKey,
    FatalError,
    FencedError,
    KafkaConnectionError,
    RetriableError,
)

A, B = TP("t", 0), TP("t", 1)
BACKOFF = Backoff(0.1, 1.0)
COMMIT = APIS[ApiKey.OFFSET_COMMIT].response
FETCH = APIS[ApiKey.OFFSET_FETCH].response
LIST = APIS[ApiKey.LIST_OFFSETS].response
PROBE = APIS[ApiKey.FETCH].response


def commit_answer(codes: dict[TP, int]) -> Any:
    topic = COMMIT.OffsetCommitResponseTopic
    return COMMIT(version=8, throttle_time_ms=0, topics=[topic(name="t", partitions=[
        topic.OffsetCommitResponsePartition(partition_index=tp.partition, error_code=code)
        for tp, code in codes.items()])])


def fetch_answer(offsets: dict[TP, tuple[int, int]], group_code: int = 0) -> Any:
    group = FETCH.OffsetFetchResponseGroup
    topics = group.OffsetFetchResponseTopics
    return FETCH(version=8, throttle_time_ms=0, groups=[group(group_id="g", error_code=group_code,
        topics=[topics(name="t", partitions=[topics.OffsetFetchResponsePartitions(
            partition_index=tp.partition, committed_offset=offset, metadata="",
            error_code=code) for tp, (offset, code) in offsets.items()])])])


def committing() -> OffsetJob:
    job = OffsetJob("g", BACKOFF, offsets={A: 5, B: 7}, generation=3, member_id="m")
    request = job.request()
    assert request.generation_id_or_member_epoch == 3 and request.member_id == "m"
    return job


def test_a_commit_that_succeeds() -> None:
    job = committing()
    assert not job.on_response(commit_answer({A: 0, B: 0}), 1.0)
    assert job.done and job.result == {A: 5, B: 7} and job.error is None


@pytest.mark.parametrize(("code", "lost"), [(16, True), (15, True), (7, True), (14, False),
                                            (3, False)])
def test_commit_errors_that_retry(code: int, lost: bool) -> None:
    job = committing()
    assert job.on_response(commit_answer({A: 0, B: code}), 1.0) is lost
    assert not job.done and not job.due(1.0) and job.due(1.2)
    assert isinstance(job.last_error, RetriableError) and job.last_error.code == code


@pytest.mark.parametrize(("code", "kind"), [(22, AbortableError), (25, AbortableError),
                                            (27, RetriableError), (30, FatalError)])
def test_commit_errors_that_end_the_job(code: int, kind: type[Exception]) -> None:
    # 22/25: the generation is gone (Java's CommitFailedException); 27: poll, then commit again.
    job = committing()
    job.on_response(commit_answer({A: code, B: 0}), 1.0)
    assert job.done and type(job.error) is kind and job.error.code == code


def test_a_cut_connection_retries() -> None:
    job = committing()
    job.on_failure(KafkaConnectionError("cut"), 1.0)
    assert not job.done and job.due(1.2)


def test_committed_offsets_none_where_nothing_is_committed() -> None:
    job = OffsetJob("g", BACKOFF, partitions=[B, A])
    assert job.request().require_stable is True
    job.on_response(fetch_answer({A: (4, 0), B: (-1, 0)}), 1.0)
    assert job.result == {A: 4, B: None}


def test_an_unstable_offset_is_asked_again() -> None:
    # KIP-447: a transaction that commits these offsets is still open.
    job = OffsetJob("g", BACKOFF, partitions=[A])
    job.request()
    assert not job.on_response(fetch_answer({A: (-1, 88)}), 1.0)
    assert not job.done and job.due(1.2)
    job.request()
    job.on_response(fetch_answer({A: (9, 0)}), 1.3)
    assert job.result == {A: 9}


def test_a_group_level_error_counts_too() -> None:
    job = OffsetJob("g", BACKOFF, partitions=[A])
    job.request()
    assert job.on_response(fetch_answer({}, group_code=16), 1.0)  # NOT_COORDINATOR
    job.request()
    job.on_response(fetch_answer({}, group_code=30), 1.0)
    assert isinstance(job.error, FatalError)


def list_answer(offsets: dict[TP, tuple[int, int]]) -> Any:
    topic = LIST.ListOffsetsTopicResponse
    return LIST(version=8, throttle_time_ms=0, topics=[topic(name="t", partitions=[
        topic.ListOffsetsPartitionResponse(partition_index=tp.partition, error_code=code,
                                           timestamp=-1, offset=offset, leader_epoch=-1)
        for tp, (offset, code) in offsets.items()])])


def probe_answer(ends: dict[TP, tuple[int, int, int]]) -> Any:
    topic = PROBE.FetchableTopicResponse
    return PROBE(version=12, throttle_time_ms=0, error_code=0, session_id=0, responses=[
        topic(topic="t", partitions=[topic.PartitionData(
            partition_index=tp.partition, error_code=code, high_watermark=hw,
            last_stable_offset=lso, log_start_offset=0, aborted_transactions=None,
            preferred_read_replica=-1, records=b"") for tp, (code, hw, lso) in ends.items()])])


def leader(tp: TP) -> int:
    return 1


def test_the_end_is_a_fetch_after_the_start() -> None:
    # Tansu answers ListOffsets(latest) wrongly while a transaction is open; a Fetch never.
    query = OffsetQuery([A, B], want_end=True, isolation=1, backoff=BACKOFF)
    [start] = query.steps(0.0, leader)
    assert not start.probe and start.request.isolation_level == 1
    assert query.steps(0.0, leader) == []  # busy
    query.on_response(start, list_answer({A: (0, 0), B: (3, 0)}), 0.0)
    [probe] = query.steps(0.0, leader)
    assert probe.probe and [p.fetch_offset for t in probe.request.topics
                            for p in t.partitions] == [0, 3]
    query.on_response(probe, probe_answer({A: (0, 10, 8), B: (0, 5, 5)}), 0.0)
    assert query.done and query.results == {A: Watermarks(0, 10, 8), B: Watermarks(3, 5, 5)}


def test_a_not_leader_answer_retries_after_the_backoff() -> None:
    query = OffsetQuery([A], want_end=False, isolation=1, backoff=BACKOFF)
    [start] = query.steps(0.0, leader)
    query.on_response(start, list_answer({A: (-1, 6)}), 0.0)
    assert query.stale_leaders and query.steps(0.0, leader) == []
    [again] = query.steps(query.next_timer(), leader)
    query.on_response(again, list_answer({A: (2, 0)}), 1.0)
    assert query.results == {A: Watermarks(2, -1, -1)}


def test_a_probe_out_of_range_starts_over_and_a_fatal_error_ends_the_query() -> None:
    query = OffsetQuery([A], want_end=True, isolation=0, backoff=BACKOFF)
    [start] = query.steps(0.0, leader)
    query.on_response(start, list_answer({A: (0, 0)}), 0.0)
    [probe] = query.steps(0.0, leader)
    query.on_response(probe, probe_answer({A: (1, -1, -1)}), 0.0)  # the log start moved
    [start] = query.steps(0.0, leader)
    assert not start.probe
    query.on_response(start, list_answer({A: (-1, 29)}), 0.0)  # TOPIC_AUTHORIZATION_FAILED
    assert query.done and isinstance(query.error, FatalError) and "t-0" in str(query.error)


def test_a_partition_without_a_leader_waits() -> None:
    query = OffsetQuery([A], want_end=False, isolation=1, backoff=BACKOFF)
    assert query.steps(0.0, lambda tp: None) == [] and not query.done
    assert wire.EARLIEST == -2


def test_a_static_members_commit_carries_its_instance_id_and_may_be_fenced() -> None:
    job = OffsetJob("g", BACKOFF, offsets={A: 5}, generation=3, member_id="m",
                    group_instance_id="i-1")
    assert job.request().group_instance_id == "i-1"
    assert OffsetJob("g", BACKOFF, offsets={A: 5}).request().group_instance_id is None
    assert not job.on_response(commit_answer({A: 82}), 1.0)  # FENCED_INSTANCE_ID
    assert job.done and isinstance(job.error, FencedError) and job.error.code == 82
