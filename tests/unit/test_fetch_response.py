"""The Fetch answer reader, sans-IO: cross-checked against kafka-python's encoder and decoder at
every version it reads, on hand-picked and generated answers; truncated answers fail."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eosclient._protocol import fetch_response
from eosclient._protocol.apis import APIS
from eosclient._protocol.connection import Connection
from eosclient._protocol.framing import frame
from eosclient.errors import ApiKey, ProtocolError

RESPONSE = APIS[ApiKey.FETCH].response
TOPIC = RESPONSE.fields["responses"].data_class
PARTITION = TOPIC.fields["partitions"].data_class
ABORTED = PARTITION.fields["aborted_transactions"].data_class
VERSIONS = range(fetch_response.MIN_VERSION, fetch_response.MAX_VERSION + 1)


def encoded(version: int, topics: list[tuple[str, list[dict[str, Any]]]], *,
            error_code: int = 0, session_id: int = 0, throttle: int = 0) -> bytes:
    """kafka-python's bytes for an answer (from the correlation id on: what the reader gets)."""
    response = RESPONSE(
        throttle_time_ms=throttle, error_code=error_code, session_id=session_id,
        node_endpoints=[], responses=[TOPIC(topic=name, topic_id=None, partitions=[
            PARTITION(**fields) for fields in parts]) for name, parts in topics],
        version=version)
    response.API_VERSION = version
    response.with_header(correlation_id=7)
    return bytes(response.encode(header=True))


def plain(response: Any) -> list[Any]:
    """The fields the consumer reads, from either reader's objects."""
    return [response.error_code, [(t.topic, [
        (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
         None if p.aborted_transactions is None else
         [(a.producer_id, a.first_offset) for a in p.aborted_transactions],
         p.records) for p in t.partitions]) for t in response.responses]]


def partition(index: int, *, records: bytes | None = b"",
              aborted: list[tuple[int, int]] | None = None, **fields: Any) -> dict[str, Any]:
    return {"partition_index": index, "error_code": 0, "high_watermark": 10,
            "last_stable_offset": 8, "log_start_offset": 0, "preferred_read_replica": -1,
            "records": records, **fields, "aborted_transactions": None if aborted is None else [
                ABORTED(producer_id=p, first_offset=o) for p, o in aborted]}


@pytest.mark.parametrize("version", VERSIONS)
def test_it_reads_what_kafka_python_writes(version: int) -> None:
    frame_ = encoded(version, [
        ("t", [partition(0, records=b"\x01" * 70, aborted=[(5, 3), (9, 1), (5, 40)]),
               partition(1, records=None, aborted=[]),
               partition(2, error_code=1, high_watermark=-1, last_stable_offset=-1),
               partition(3, records=b"x", aborted=[(1 << 40, 1 << 50)])]),
        ("другой", [partition(7, aborted=[(2, 2)] * 300, records=b"y" * 1000)])],
        error_code=0 if version < 7 else 3, session_id=0 if version < 7 else 11)
    mine = fetch_response.read(frame_, version)
    assert mine is not None
    theirs = RESPONSE.decode(frame_, version=version, header=True)
    assert plain(mine) == plain(theirs)
    assert mine.session_id == (0 if version < 7 else 11)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_truncated_answer_is_refused(version: int) -> None:
    frame_ = encoded(version, [("t", [partition(0, records=b"\x01" * 20, aborted=[(5, 3)])])])
    for cut in range(4, len(frame_)):
        with pytest.raises(ValueError):
            fetch_response.read(frame_[:cut], version)


def test_tagged_fields_in_index_entries_are_stepped_over() -> None:
    # Kafka writes none, but an entry's tagged fields may be there (v12): each entry is then
    # read one by one, not stepped over by a fixed stride.
    frame_ = encoded(12, [("t", [partition(0, records=b"r", aborted=[(5, 3), (6, 4)])])])
    at = frame_.index(struct.pack(">qq", 5, 3)) + 16
    assert frame_[at] == 0 and frame_[at + 17] == 0
    tagged = frame_[:at] + b"\x01\x05\x02ab" + frame_[at + 1:]  # one tag, 2 bytes
    mine = fetch_response.read(tagged, 12)
    assert mine is not None and mine.responses is not None
    [part] = mine.responses[0].partitions or []
    assert part.aborted_transactions == [(5, 3), (6, 4)]
    assert part.records == b"r"


def test_the_current_leader_is_read_and_other_tagged_fields_stepped_over() -> None:
    # KIP-951: a node that does not lead a partition names the leader (the cluster front's
    # tests read it from a refused Fetch).
    leader = PARTITION.fields["current_leader"].data_class
    diverging = PARTITION.fields["diverging_epoch"].data_class
    frame_ = encoded(12, [("t", [
        partition(0, records=b"", current_leader=leader(leader_id=3, leader_epoch=9),
                  diverging_epoch=diverging(epoch=4, end_offset=70)),
        partition(1, records=b"r")])])
    mine = fetch_response.read(frame_, 12)
    theirs = RESPONSE.decode(frame_, version=12, header=True)
    assert mine is not None and mine.responses is not None
    first, second = mine.responses[0].partitions or []
    assert first.current_leader == (3, 9) == (theirs.responses[0].partitions[0].current_leader
                                              .leader_id, 9)
    assert second.current_leader is None and second.records == b"r"
    assert plain(mine) == plain(theirs)


def test_versions_it_does_not_read_are_left_to_kafka_python() -> None:
    assert fetch_response.read(b"\x00" * 8, fetch_response.MAX_VERSION + 1) is None


def test_the_connection_reads_fetch_answers_with_it() -> None:
    connection = Connection()
    connection.send(APIS[ApiKey.FETCH].request(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1, isolation_level=1,
        session_id=0, session_epoch=-1, topics=[], forgotten_topics_data=[], rack_id=""), 12)
    body = encoded(12, [("t", [partition(0, records=b"r", aborted=[(1, 2)])])])
    [reply] = connection.receive(frame(struct.pack(">i", 0) + body[4:]))
    assert isinstance(reply.response, fetch_response.FetchResponse)
    assert plain(reply.response)[1] == [("t", [(0, 0, 10, 8, [(1, 2)], b"r")])]


def test_a_broken_fetch_answer_is_a_protocol_error() -> None:
    connection = Connection()
    connection.send(APIS[ApiKey.FETCH].request(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1, isolation_level=1,
        session_id=0, session_epoch=-1, topics=[], forgotten_topics_data=[], rack_id=""), 12)
    body = encoded(12, [("t", [partition(0, records=b"rrrr", aborted=[(1, 2)])])])
    with pytest.raises(ProtocolError):
        connection.receive(frame(struct.pack(">i", 0) + body[4:-6]))


_entries = st.lists(st.tuples(st.integers(-1, 1 << 62), st.integers(-1, 1 << 62)), max_size=40)
_partitions = st.lists(st.builds(
    lambda i, e, hw, lso, records, aborted: partition(i, error_code=e, high_watermark=hw,
                                                      last_stable_offset=lso, records=records,
                                                      aborted=aborted),
    st.integers(0, 1 << 20), st.integers(0, 120), st.integers(-1, 1 << 60),
    st.integers(-1, 1 << 60), st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), _entries)), max_size=6)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(list(VERSIONS)),
       st.lists(st.tuples(st.text(min_size=1, max_size=12), _partitions), max_size=4))
def test_generated_answers_read_alike(version: int,
                                      topics: list[tuple[str, list[dict[str, Any]]]]) -> None:
    frame_ = encoded(version, topics)
    mine = fetch_response.read(frame_, version)
    assert plain(mine) == plain(RESPONSE.decode(frame_, version=version, header=True))


def test_only_partitions_without_records_keep_their_index_undecoded() -> None:
    # A partition with records waits in the consumer until poll() takes it in: with its index
    # left undecoded it kept the whole answer's bytes (65 MB at 1,000 partitions) alive.
    frame_ = encoded(12, [("t", [partition(0, records=b"r", aborted=[(1, 2)]),
                                 partition(1, records=b"", aborted=[(1, 2)])])])
    mine = fetch_response.read(frame_, 12)
    assert mine is not None and mine.responses is not None
    full, empty = mine.responses[0].partitions or []
    assert full._buf == b"" and full._decoded == [(1, 2)]
    assert empty._buf is frame_ and empty._decoded is None
    assert empty.aborted_transactions == [(1, 2)] and empty._buf == b""
