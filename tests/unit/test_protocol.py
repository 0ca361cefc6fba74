"""The wire adapter, sans-IO: golden bytes built by hand from the protocol spec (not by the codec
under test), fed whole, one byte at a time, and followed by the start of another frame."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from eosclient import __version__
from eosclient._protocol.connection import Connection, Reply
from eosclient._protocol.framing import FrameDecoder, frame
from eosclient._protocol.versions import negotiate
from eosclient.errors import ApiKey, ProtocolError, ResponseTooLargeError, UnsupportedVersionError


def _str16(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def _compact(s: str) -> bytes:
    return bytes([len(s) + 1]) + s.encode()


def golden_api_versions_request(correlation_id: int, client_id: str) -> bytes:
    # Request header v2 (flexible, but client_id stays a classic nullable string), then body v3.
    header = struct.pack(">hhi", 18, 3, correlation_id) + _str16(client_id) + b"\x00"
    body = _compact("eosclient") + _compact(__version__) + b"\x00"
    return frame(header + body)


def golden_api_versions_response(correlation_id: int, ranges: list[tuple[int, int, int]],
                                 error: int = 0) -> bytes:
    # ApiVersions responses always use header v0 (no tagged fields), whatever the body version;
    # an error reply has a v0 body (classic array, no throttle time) so any client can read it.
    if error:
        entries = b"".join(struct.pack(">hhh", k, lo, hi) for k, lo, hi in ranges)
        body = struct.pack(">hi", error, len(ranges)) + entries
    else:
        entries = b"".join(struct.pack(">hhh", k, lo, hi) + b"\x00" for k, lo, hi in ranges)
        body = struct.pack(">h", error) + bytes([len(ranges) + 1]) + entries
        body += struct.pack(">i", 0) + b"\x00"
    return frame(struct.pack(">i", correlation_id) + body)


def golden_init_producer_id_response_flexible(correlation_id: int, pid: int, epoch: int) -> bytes:
    # Header v1 (flexible): correlation id + empty tagged fields; body ends with tagged fields too.
    body = struct.pack(">ihqh", 0, 0, pid, epoch) + b"\x00"
    return frame(struct.pack(">i", correlation_id) + b"\x00" + body)


BROKER = [(0, 0, 11), (1, 0, 17), (18, 0, 4), (22, 0, 5), (24, 0, 5), (26, 0, 4)]


def feeds(data: bytes) -> Iterator[tuple[str, list[bytes]]]:
    """The same bytes whole, one at a time, and with the first 3 bytes of another frame after."""
    yield "whole", [data]
    yield "bytewise", [data[i : i + 1] for i in range(len(data))]
    yield "trailing", [data + b"\x00\x00\x00"]


def feed_all(receive: Callable[[bytes], list[Reply]], chunks: list[bytes]) -> list[Reply]:
    out: list[Reply] = []
    for chunk in chunks:
        out += receive(chunk)
    return out


def handshaken() -> Connection:
    conn = Connection("probe")
    conn.handshake()
    conn.receive(golden_api_versions_response(0, BROKER))
    return conn


class TestFrameDecoder:
    @pytest.mark.parametrize("how", ["whole", "bytewise", "trailing"])
    def test_frames_come_out_once_however_the_bytes_arrive(self, how: str) -> None:
        data = frame(b"abc") + frame(b"") + frame(b"x" * 300)
        chunks = dict(feeds(data))[how]
        decoder = FrameDecoder()
        got = [f for chunk in chunks for f in decoder.feed(chunk)]
        assert got == [b"abc", b"", b"x" * 300]
        assert decoder.buffered == (3 if how == "trailing" else 0)

    @given(st.lists(st.binary(max_size=3000) | st.sampled_from([b"y" * 70_000]), min_size=1,
                    max_size=6), st.lists(st.integers(min_value=1), max_size=12))
    def test_any_cut_of_any_frames_gives_them_back_whole(self, bodies: list[bytes],
                                                         cuts: list[int]) -> None:
        # The decoder keeps the pieces and joins a frame once it is whole (a growing buffer
        # cost ~30x more on large Fetch answers): every way of cutting must come out the same.
        data = b"".join(frame(body) for body in bodies)
        ends = [*sorted({c % len(data) for c in cuts} - {0}), len(data)]
        decoder = FrameDecoder()
        got: list[bytes] = []
        start = 0
        for end in ends:
            got += decoder.feed(data[start:end])
            assert decoder.buffered == end - sum(4 + len(f) for f in got)
            start = end
        assert got == bodies

    def test_negative_size_is_a_protocol_error(self) -> None:
        with pytest.raises(ProtocolError, match="frame size -1"):
            FrameDecoder().feed(struct.pack(">i", -1))

    def test_oversized_frame_is_refused_before_it_is_buffered(self) -> None:
        # A 2 GiB announcement must fail at once, not after buffering gigabytes.
        with pytest.raises(ResponseTooLargeError, match="1025 bytes") as raised:
            FrameDecoder(max_frame_size=1024).feed(struct.pack(">i", 1025))
        assert (raised.value.size, raised.value.limit) == (1025, 1024)
        assert isinstance(raised.value, ProtocolError)

    def test_frames_before_an_oversized_one_come_out_first(self) -> None:
        # The oversized frame answers the request after those: they must not be lost with it.
        decoder = FrameDecoder(max_frame_size=1024)
        assert decoder.feed(frame(b"ok") + struct.pack(">i", 5000)) == [b"ok"]
        with pytest.raises(ResponseTooLargeError):
            decoder.feed(b"more")


class TestConnection:
    def test_handshake_bytes_match_the_spec(self) -> None:
        assert Connection("probe").handshake() == golden_api_versions_request(0, "probe")

    @pytest.mark.parametrize("how", ["whole", "bytewise", "trailing"])
    def test_api_versions_reply_negotiates(self, how: str) -> None:
        conn = Connection("probe")
        conn.handshake()
        chunks = dict(feeds(golden_api_versions_response(0, BROKER)))[how]
        replies = feed_all(conn.receive, chunks)
        assert [r.correlation_id for r in replies] == [0]
        assert conn.versions is not None
        assert conn.versions.version(ApiKey.PRODUCE) == 11
        assert conn.versions.version(ApiKey.API_VERSIONS) == 3
        assert conn.in_flight == 0

    @pytest.mark.parametrize("how", ["whole", "bytewise", "trailing"])
    def test_flexible_response_decodes_with_header_tags(self, how: str) -> None:
        conn = handshaken()
        data = conn.send(InitProducerIdRequest(transactional_id="t", transaction_timeout_ms=1000))
        assert struct.unpack_from(">hh", data, 4) == (22, 5)
        chunks = dict(feeds(golden_init_producer_id_response_flexible(1, 4242, 7)))[how]
        [reply] = feed_all(conn.receive, chunks)
        assert (reply.response.producer_id, reply.response.producer_epoch) == (4242, 7)

    def test_unsupported_api_versions_version_is_retried_at_the_brokers_newest(self) -> None:
        conn = Connection("probe")
        conn.handshake()
        # UNSUPPORTED_VERSION (35) comes with a v0 body listing what the broker speaks.
        [reply] = conn.receive(golden_api_versions_response(0, [(18, 0, 2)], error=35))
        assert conn.versions is None
        retry = conn.retry_handshake(reply)
        assert retry is not None and struct.unpack_from(">hh", retry, 4) == (18, 2)

    def test_unreadable_unsupported_version_answer_falls_back_to_v0(self) -> None:
        # librdkafka's mock answers ApiVersions v3 with error 35 in a body no schema reads
        # (bytes captured from it); the handshake used to fail with ProtocolError.
        conn = Connection("probe")
        conn.handshake()
        [reply] = conn.receive(bytes.fromhex("000000110000000000230100120000000200000000"))
        assert reply.response.error_code == 35
        retry = conn.retry_handshake(reply)
        assert retry is not None and struct.unpack_from(">hh", retry, 4) == (18, 0)

    def test_wrong_correlation_id_is_a_protocol_error(self) -> None:
        conn = Connection("probe")
        conn.handshake()
        with pytest.raises(ProtocolError, match="correlation id 5, expected 0"):
            conn.receive(golden_api_versions_response(5, BROKER))

    def test_response_with_nothing_pending_is_a_protocol_error(self) -> None:
        with pytest.raises(ProtocolError, match="none pending"):
            Connection().receive(golden_api_versions_response(0, BROKER))

    def test_truncated_body_is_a_protocol_error_naming_the_api(self) -> None:
        conn = handshaken()
        conn.send(InitProducerIdRequest(transactional_id="t", transaction_timeout_ms=1000))
        with pytest.raises(ProtocolError, match="INIT_PRODUCER_ID v5"):
            conn.receive(frame(struct.pack(">i", 1) + b"\x00\x00"))

    def test_an_answer_over_the_limit_names_the_request_it_answers(self) -> None:
        # The fetcher adapts only to its own refused answers: it must know which one this was.
        conn = Connection("probe", max_frame_size=1000)
        conn.handshake()
        conn.receive(golden_api_versions_response(0, BROKER))
        conn.send(InitProducerIdRequest(transactional_id="t", transaction_timeout_ms=1000))
        with pytest.raises(ResponseTooLargeError, match="InitProducerId") as raised:
            conn.receive(struct.pack(">i", 118 << 20))
        assert (raised.value.api, raised.value.size, raised.value.limit) == (
            ApiKey.INIT_PRODUCER_ID, 118 << 20, 1000)

    def test_send_before_handshake_is_refused(self) -> None:
        with pytest.raises(ProtocolError, match="before the ApiVersions handshake"):
            Connection().send(InitProducerIdRequest(transactional_id="t"))

    def test_acks_zero_produce_expects_no_response(self) -> None:
        conn = handshaken()
        conn.send(ProduceRequest(acks=0, timeout_ms=100, topic_data=[]))
        assert conn.in_flight == 0

    def test_correlation_ids_wrap_at_int32(self) -> None:
        conn = handshaken()
        conn._next_id = 0x7FFFFFFF
        first = conn.send(InitProducerIdRequest(transactional_id="t"))
        second = conn.send(InitProducerIdRequest(transactional_id="t"))
        assert struct.unpack_from(">i", first, 8) == (0x7FFFFFFF,)
        assert struct.unpack_from(">i", second, 8) == (0,)


class TestNegotiation:
    def test_highest_common_version_is_chosen(self) -> None:
        table = negotiate([(0, 0, 9), (1, 0, 17), (22, 0, 2)])
        assert table.version(ApiKey.PRODUCE) == 9
        assert table.version(ApiKey.FETCH) == 12  # client cap: v13 names topics by id
        assert table.version(ApiKey.INIT_PRODUCER_ID) == 2

    def test_add_partitions_to_txn_is_capped_at_v3(self) -> None:
        # Tansu advertises AddPartitionsToTxn v0-v5 and drops the connection on v4+.
        assert negotiate([(24, 0, 5)]).version(ApiKey.ADD_PARTITIONS_TO_TXN) == 3

    def test_caps_lower_one_api_for_one_broker(self) -> None:
        table = negotiate([(0, 0, 11)], caps={ApiKey.PRODUCE: 7})
        assert table.version(ApiKey.PRODUCE) == 7

    def test_no_common_version_names_both_ranges(self) -> None:
        # Produce below v3 cannot carry record batch v2, so a v0-v2 broker is refused.
        table = negotiate([(0, 0, 2)])
        assert not table.supports(ApiKey.PRODUCE)
        with pytest.raises(UnsupportedVersionError, match=r"client speaks v3-v11, broker v0-v2"):
            table.version(ApiKey.PRODUCE)

    def test_unadvertised_api_is_unsupported(self) -> None:
        with pytest.raises(UnsupportedVersionError, match="not advertised"):
            negotiate([]).version(ApiKey.END_TXN)
