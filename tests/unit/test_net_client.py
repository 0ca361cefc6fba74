"""The selector loop (eosclient._net.client / node) against a scripted fake broker on loopback.

The fake answers ApiVersions itself and every other request through a script the test gives:
a response object, DROP (never answer), or CLOSE (cut the connection). No real broker.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from eosclient import ReadCommittedConsumer, TopicMetadata, TransactionalProducer
from eosclient._consumer import protocol as wire
from eosclient._core.types import TopicPartition
from eosclient._net.client import Answer, NetworkClient
from eosclient._net.node import NodeConnection
from eosclient._protocol.apis import APIS, api_for
from eosclient._protocol.connection import Reply
from eosclient._protocol.framing import FrameDecoder
from eosclient.config import ClientConfig
from eosclient.errors import (
    ApiKey,
    KafkaConnectionError,
    KafkaTimeoutError,
    ProtocolError,
    ResponseTooLargeError,
    RetriableError,
)
from eosclient.testing._proxy_rules import encode_response

DROP, CLOSE = "drop", "close"
METADATA = APIS[ApiKey.METADATA]
_HEADER = struct.Struct(">hhi")


def metadata_response(port: int, topics: dict[str, int] | None = None) -> Any:
    cls = METADATA.response
    broker = cls.fields["brokers"].data_class
    topic = cls.fields["topics"].data_class
    part = topic.fields["partitions"].data_class
    return cls(
        brokers=[broker(node_id=7, host="127.0.0.1", port=port, rack=None)],
        topics=[topic(error_code=0, name=name, is_internal=False, partitions=[
            part(error_code=0, partition_index=p, leader_id=7, leader_epoch=0, replica_nodes=[7],
                 isr_nodes=[7], offline_replicas=[]) for p in range(count)])
            for name, count in (topics or {}).items()],
        cluster_id="fake", controller_id=7, throttle_time_ms=0)


class FakeBroker:
    """Answers ApiVersions; everything else as ``script(api_key, request)`` says."""

    def __init__(self, script: Callable[[ApiKey, Any], Any], port: int = 0) -> None:
        self.script = script
        self.server = socket.create_server(("127.0.0.1", port))
        self.port: int = self.server.getsockname()[1]
        self.seen: list[ApiKey] = []
        self.connections = 0
        self.handshake = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        with conn:
            while data := _recv(conn):
                for frame in decoder.feed(data):
                    if not self._answer(conn, frame):
                        return

    def _answer(self, conn: socket.socket, frame: bytes) -> bool:
        key, version, correlation_id = _HEADER.unpack_from(frame)
        api = api_for(key)
        request = api.request.decode(frame, version=version, header=True)
        self.seen.append(ApiKey(key))
        if key == ApiKey.API_VERSIONS:
            if not self.handshake:
                return True
            reply = versions_response()
        else:
            reply = self.script(ApiKey(key), request)
        if reply is CLOSE:
            return False
        if reply is not DROP:
            conn.sendall(encode_response(api, reply, version, correlation_id))
        return True

    def close(self) -> None:
        self.server.close()


def _recv(conn: socket.socket) -> bytes:
    try:
        return conn.recv(65536)
    except OSError:
        return b""


def versions_response() -> Any:
    api = APIS[ApiKey.API_VERSIONS]
    entry = api.response.fields["api_keys"].data_class
    return api.response(error_code=0, throttle_time_ms=0, api_keys=[
        entry(api_key=int(k), min_version=a.min_version, max_version=a.max_version)
        for k, a in APIS.items()])


@pytest.fixture
def fake() -> Iterator[Callable[[Callable[[ApiKey, Any], Any]], FakeBroker]]:
    made: list[FakeBroker] = []

    def make(script: Callable[[ApiKey, Any], Any]) -> FakeBroker:
        made.append(FakeBroker(script))
        return made[-1]

    yield make
    for broker in made:
        broker.close()


def client_for(port: int, **settings: Any) -> NetworkClient:
    return NetworkClient(ClientConfig(bootstrap_servers=(f"127.0.0.1:{port}",), **settings))


def run(client: NetworkClient, wanted: int, rounds: int = 200) -> list[Answer]:
    """Poll until ``wanted`` answers arrived (each poll waits at most 0.05 s)."""
    answers: list[Answer] = []
    for _ in range(rounds):
        answers.extend(client.poll(0.05))
        if len(answers) >= wanted:
            break
    return answers


def metadata_request() -> Any:
    return METADATA.request(topics=[], allow_auto_topic_creation=False,
                            include_cluster_authorized_operations=False,
                            include_topic_authorized_operations=False)


def collect(into: list[Answer]) -> Callable[[Answer], None]:
    return into.append


def test_requests_wait_for_the_handshake_then_pipeline_in_order(fake: Any) -> None:
    broker = fake(lambda key, request: metadata_response(0))
    client = client_for(broker.port)
    requests = [metadata_request() for _ in range(3)]
    for request in requests:
        client.send(None, request, lambda answer: None)
    answers = run(client, 3)
    assert [a.request for a in answers] == requests
    assert all(a.error is None and a.node_id == -1 for a in answers)
    assert broker.seen == [ApiKey.API_VERSIONS] + [ApiKey.METADATA] * 3
    assert broker.connections == 1
    client.close()


def test_sockets_use_tcp_nodelay(fake: Any) -> None:
    broker = fake(lambda key, request: metadata_response(0))
    client = client_for(broker.port)
    client.send(None, metadata_request(), lambda answer: None)
    run(client, 1)
    conn = client._conns[-1]
    assert conn.sock is not None
    assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    client.close()


def test_a_request_timeout_fails_it_and_cuts_the_connection(fake: Any) -> None:
    calls = []

    def script(key: ApiKey, request: Any) -> Any:
        calls.append(key)
        return DROP if len(calls) <= 2 else metadata_response(0)

    broker = fake(script)
    client = client_for(broker.port, request_timeout_ms=200, reconnect_backoff_ms=0)
    first, second = metadata_request(), metadata_request()
    client.send(None, first, lambda answer: None)
    client.send(None, second, lambda answer: None, timeout=30)
    answers = {id(a.request): a for a in run(client, 2)}
    assert isinstance(answers[id(first)].error, KafkaTimeoutError)
    assert isinstance(answers[id(second)].error, KafkaConnectionError)  # cut with the first
    assert not client.ready(-1)
    client.send(None, metadata_request(), lambda answer: None)  # a new connection works
    [again] = run(client, 1)
    assert again.error is None and broker.connections == 2
    client.close()


def test_a_skipped_correlation_id_closes_the_connection(fake: Any) -> None:
    calls = []

    def script(key: ApiKey, request: Any) -> Any:
        calls.append(key)
        return DROP if len(calls) == 1 else metadata_response(0)  # the 2nd answer comes first

    client = client_for(fake(script).port)
    for _ in range(2):
        client.send(None, metadata_request(), lambda answer: None)
    answers = run(client, 2)
    assert [type(a.error) for a in answers] == [KafkaConnectionError] * 2
    assert "correlation id" in str(answers[0].error.__cause__)  # type: ignore[union-attr]
    client.close()


def test_a_cut_connection_fails_what_is_in_flight(fake: Any) -> None:
    client = client_for(fake(lambda key, request: CLOSE).port)
    client.send(None, metadata_request(), lambda answer: None)
    [answer] = run(client, 1)
    assert isinstance(answer.error, KafkaConnectionError)
    client.close()


def test_refused_connections_back_off_exponentially() -> None:
    with socket.socket() as holder:  # a port nobody listens on
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
    client = client_for(port, reconnect_backoff_ms=100, reconnect_backoff_max_ms=1_000)
    waits = []
    for _ in range(3):
        client.send(-1, metadata_request(), lambda answer: None)
        [answer] = run(client, 1, rounds=100)
        assert isinstance(answer.error, KafkaConnectionError)
        waits.append(client._not_before[-1] - client._clock())
    assert waits[0] < waits[1] < waits[2] <= 1.0


def test_setup_times_out_when_the_handshake_is_never_answered(fake: Any) -> None:
    broker = fake(lambda key, request: metadata_response(0))
    broker.handshake = False
    client = client_for(broker.port, socket_connection_setup_timeout_ms=200)
    client.send(None, metadata_request(), lambda answer: None)
    [answer] = run(client, 1)
    assert isinstance(answer.error, KafkaConnectionError) and "setup" in str(answer.error)
    client.close()


def test_metadata_names_nodes_and_leaders(fake: Any) -> None:
    broker = fake(lambda key, request: metadata_response(broker.port, {"t": 3}))
    client = client_for(broker.port)
    client.metadata.want(["t"])
    client.maybe_update_metadata(client._clock())
    for answer in run(client, 1):
        answer.on_done(answer)
    assert client.metadata.partition_count("t") == 3
    assert set(client.metadata.leaders().values()) == {7}
    client.send(7, metadata_request(), lambda answer: None)  # node 7, by its own address
    [answer] = run(client, 1)
    assert answer.error is None and answer.node_id == 7
    assert client.least_loaded(client._clock()) in (-1, 7)
    client.close()


def test_a_broker_left_out_of_a_later_answer_keeps_its_address(fake: Any) -> None:
    # A down broker that still leads partitions is left out of the mock's broker list: the
    # client forgot its address, so the batches waiting for it never reconnected (a wedge).
    def answer(key: ApiKey, request: Any) -> Any:
        response = metadata_response(broker.port, {"t": 1})
        if broker.seen.count(ApiKey.METADATA) > 1:
            response.brokers = []  # node 7 still leads "t", but is not listed
        return response

    broker = fake(answer)
    client = client_for(broker.port, retry_backoff_ms=1)
    client.metadata.want(["t"])
    for _ in range(2):
        time.sleep(0.01)
        client.maybe_update_metadata(client._clock())
        client.dispatch(run(client, 1))
        client.metadata.request_update()
    assert client.metadata.nodes == {} and client.metadata.leaders() == {
        TopicPartition("t", 0): 7}
    client.send(7, metadata_request(), lambda answer: None)
    [answer] = run(client, 1)
    assert answer.error is None and answer.node_id == 7
    client.close()


def test_a_leader_with_no_known_address_asks_for_metadata(fake: Any) -> None:
    broker = fake(lambda key, request: metadata_response(broker.port))
    client = client_for(broker.port)
    now = client._clock() + 1
    assert not client.metadata.due(now)
    client.connect(9)  # a leader id that no answer listed
    assert client.metadata.due(now)
    client.close()


def test_wakeup_from_another_thread_ends_a_poll(fake: Any) -> None:
    client = client_for(fake(lambda key, request: DROP).port)
    done = threading.Event()

    def poll() -> None:
        client.poll(60)
        done.set()

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    client.wakeup()
    assert done.wait(30)
    client.close()


def test_close_fails_everything_and_is_idempotent(fake: Any) -> None:
    client = client_for(fake(lambda key, request: DROP).port)
    client.send(None, metadata_request(), lambda answer: None)
    run(client, 0, rounds=2)
    [answer] = client.close()
    assert isinstance(answer.error, KafkaConnectionError)
    assert client.close() == []


def test_send_and_connect_leave_host_name_lookups_to_poll(
        fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # r6: send() and connect(), run under the producer's lock, resolved host names (2.8 s send)
    lookups: list[str] = []
    real = socket.getaddrinfo

    def recording(host: str, *args: Any, **kwargs: Any) -> Any:
        lookups.append(host)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    broker = fake(lambda key, request: metadata_response(broker.port, {"t": 1}))
    client = client_for(broker.port)
    client.send(None, metadata_request(), lambda answer: None)
    client.connect(-1)
    assert lookups == [] and not client.ready(-1)
    [answer] = run(client, 1)
    assert answer.error is None and lookups == ["127.0.0.1"]
    client.close()


def test_a_close_by_the_broker_is_told_apart_from_a_timeout(fake: Any) -> None:
    # The transaction core counts EndTxn attempts the broker answered by closing the connection
    # (Tansu, for a stale epoch); the cause says which end closed it.
    client = client_for(fake(lambda key, request: CLOSE).port)
    client.send(None, metadata_request(), lambda answer: None)
    [closed] = run(client, 1)
    assert isinstance(closed.error, KafkaConnectionError)
    assert isinstance(closed.error.__cause__, EOFError)
    client.close()
    client = client_for(fake(lambda key, request: DROP).port, request_timeout_ms=200)
    client.send(None, metadata_request(), lambda answer: None)
    [timed_out] = run(client, 1)
    assert isinstance(timed_out.error, KafkaTimeoutError)
    assert not isinstance(timed_out.error.__cause__, EOFError)
    client.close()


def fetch_response(topics: Any) -> Any:
    cls = APIS[ApiKey.FETCH].response
    return cls(throttle_time_ms=0, error_code=0, session_id=0, responses=topics,
               node_endpoints=[])


def null_partitions() -> Any:
    topic = APIS[ApiKey.FETCH].response.fields["responses"].data_class
    return [topic(topic="t", topic_id=None, partitions=None)]


@pytest.mark.parametrize("malformed", [None, "partitions"], ids=["null-topics", "null-partitions"])
def test_a_malformed_response_is_a_protocol_error_and_a_reconnect(
        fake: Any, malformed: str | None, caplog: pytest.LogCaptureFixture) -> None:
    # A Fetch answer with a null topic or partition array raised TypeError in the consumer's
    # handler, on the I/O thread, which died: the consumer was left in FatalError for good.
    answers = iter([fetch_response(None if malformed is None else null_partitions()),
                    fetch_response([])])
    broker = fake(lambda key, request: next(answers))
    client = client_for(broker.port)
    seen: list[Answer] = []

    def handler(answer: Answer) -> None:  # what the consumer's Fetcher does first
        seen.append(answer)
        if answer.error is None:
            list(wire.fetched(answer.response))

    request = wire.fetch([(TopicPartition("t", 0), 0, 1024)], isolation=1, max_wait_ms=0,
                         min_bytes=1, max_bytes=1024)
    client.send(None, request, handler)
    with caplog.at_level("WARNING", logger="eosclient.net"):
        client.dispatch(run(client, 1))
    assert [a.error is None for a in seen] == [True, False]
    cut = seen[1].error
    assert isinstance(cut, KafkaConnectionError)  # retried like any cut connection
    assert isinstance(cut.__cause__, ProtocolError)
    assert isinstance(cut.__cause__.__cause__, TypeError)
    assert any("malformed" in r.getMessage() for r in caplog.records)
    client.send(None, wire.fetch([], isolation=1, max_wait_ms=0, min_bytes=1, max_bytes=1),
                handler)  # the next request goes out on a new connection and is answered
    client.dispatch(run(client, 1))
    assert seen[-1].error is None and broker.connections == 2
    client.close()


def test_a_handler_failing_on_a_failed_answer_is_a_bug_and_propagates(fake: Any) -> None:
    client = client_for(fake(lambda key, request: CLOSE).port)

    def handler(answer: Answer) -> None:
        raise RuntimeError("bug")

    client.send(None, metadata_request(), handler)
    with pytest.raises(RuntimeError, match="bug"):
        client.dispatch(run(client, 1))
    client.close()


def test_the_consumer_survives_a_malformed_fetch_answer(fake: Any) -> None:
    # The same through the consumer's I/O thread: it died of the TypeError, and every call of
    # the consumer raised FatalError("the consumer's I/O thread crashed") from then on.
    fetches: list[int] = []

    def script(key: ApiKey, request: Any) -> Any:
        if key == ApiKey.METADATA:
            return metadata_response(broker.port, {"t": 1})
        fetches.append(1)
        return fetch_response(null_partitions() if len(fetches) == 1 else [])

    broker = fake(script)
    consumer = ReadCommittedConsumer(f"127.0.0.1:{broker.port}",
                                     config={"fetch.max.wait.ms": 10})
    try:
        consumer.assign([TopicPartition("t", 0)])
        consumer.seek(TopicPartition("t", 0), 0)
        deadline = time.monotonic() + 10
        while len(fetches) < 3 and time.monotonic() < deadline:
            assert consumer.poll(0.05) == []
        assert len(fetches) >= 3 and broker.connections >= 2
    finally:
        consumer.close(1)


# -- answers over receive.message.max.bytes ---------------------------------------------------

LIMIT = 1_000  # receive.message.max.bytes at its minimum; a Metadata of 100 topics is far over


def big_metadata(port: int) -> Any:
    return metadata_response(port, {f"topic-{n:03}": 1 for n in range(100)})


def test_an_oversized_metadata_answer_fails_its_request_with_the_typed_error(fake: Any) -> None:
    # A Metadata answer over the limit closed the connection and was retried for ever, silently.
    broker = fake(lambda key, request: big_metadata(broker.port))
    client = client_for(broker.port, receive_message_max_bytes=LIMIT)
    requests = [metadata_request(), metadata_request()]  # pipelined: the second one is cut off
    for request in requests:
        client.send(None, request, lambda answer: None)
    answers = run(client, 2)
    assert [a.request for a in answers] == requests
    refused, cut = (a.error for a in answers)
    assert isinstance(refused, ResponseTooLargeError) and refused.api == ApiKey.METADATA
    assert refused.size > refused.limit == LIMIT and refused.node == -1
    assert client.fatal is refused
    assert isinstance(cut, KafkaConnectionError) and cut.__cause__ is refused  # outcome unknown
    client.close()


def test_an_oversized_fetch_answer_stays_the_fetchers_to_adapt_to(fake: Any) -> None:
    # The fetcher asks for less after a cut whose cause is the refusal; that must not change.
    topic = APIS[ApiKey.FETCH].response.fields["responses"].data_class
    big = fetch_response([topic(topic=f"topic-{n:03}", topic_id=None, partitions=[])
                          for n in range(100)])
    broker = fake(lambda key, request: big)
    client = client_for(broker.port, receive_message_max_bytes=LIMIT)
    client.send(None, wire.fetch([(TopicPartition("t", 0), 0, 100)], isolation=1, max_wait_ms=0,
                                 min_bytes=1, max_bytes=100), lambda answer: None)
    (answer,) = run(client, 1)
    assert isinstance(answer.error, KafkaConnectionError)
    assert isinstance(answer.error.__cause__, ResponseTooLargeError)
    assert client.fatal is None
    client.close()


def test_a_producer_waiting_on_an_oversized_metadata_answer_raises_it(fake: Any) -> None:
    # send() waited max.block.ms and raised a KafkaTimeoutError that did not say why.
    broker = fake(lambda key, request: big_metadata(broker.port))
    producer = TransactionalProducer(f"127.0.0.1:{broker.port}", max_block_ms=30_000,
                                     config={"receive.message.max.bytes": LIMIT})
    try:
        started = time.monotonic()
        with pytest.raises(ResponseTooLargeError, match=r"receive\.message\.max\.bytes"):
            producer.send("topic-000", b"x")
        assert time.monotonic() - started < 10
        with pytest.raises(ResponseTooLargeError):  # and every later call, until closed
            producer.flush(1)
    finally:
        producer.close(1)  # closing closes: it does not raise


def test_a_consumer_waiting_on_an_oversized_metadata_answer_raises_it(fake: Any) -> None:
    # position() waited its whole timeout, and poll() returned nothing, without saying why.
    broker = fake(lambda key, request: big_metadata(broker.port))
    consumer = ReadCommittedConsumer(f"127.0.0.1:{broker.port}", config={
        "receive.message.max.bytes": LIMIT, "fetch.max.bytes": LIMIT // 4})
    try:
        consumer.assign([TopicPartition("topic-000", 0)])
        started = time.monotonic()
        with pytest.raises(ResponseTooLargeError, match=r"Metadata"):
            consumer.position(TopicPartition("topic-000", 0), timeout=30)
        assert time.monotonic() - started < 10
        with pytest.raises(ResponseTooLargeError):
            consumer.poll(0.1)
    finally:
        consumer.close(1)


def test_topic_metadata_says_what_the_last_answer_said_without_asking(fake: Any) -> None:
    # The processor read the consumer's private _metadata (without its lock) to explain why
    # nothing was assigned by idle_timeout; this is the public way.
    def script(key: ApiKey, request: Any) -> Any:
        answer = metadata_response(broker.port, {"t": 2})
        answer.topics.append(type(answer.topics[0])(
            error_code=3, name="gone", is_internal=False, partitions=[]))
        return answer

    broker = fake(script)
    consumer = ReadCommittedConsumer(f"127.0.0.1:{broker.port}")
    try:
        assert consumer.topic_metadata([]) == {}
        assert consumer.topic_metadata(["t"]) == {"t": TopicMetadata(None, None)}  # not asked
        consumer.assign([TopicPartition("t", 0), TopicPartition("gone", 0)])
        deadline = time.monotonic() + 10
        while consumer.topic_metadata(["gone"])["gone"].error is None:
            assert time.monotonic() < deadline
            with contextlib.suppress(RetriableError):  # poll() says so too, for the assigned
                consumer.poll(0.05)
        found = consumer.topic_metadata(iter(["t", "gone", "never"]))
        assert found["t"] == TopicMetadata(2, None)
        gone = found["gone"]
        assert gone.partitions is None and gone.error is not None and gone.error.code == 3
        assert found["never"] == TopicMetadata(None, None)
        with pytest.raises(TypeError):
            consumer.topic_metadata("t")  # a bare str would be its letters
    finally:
        consumer.close(1)


# -- addresses: every one getaddrinfo gives, looked up off the I/O thread ----------------------

def lookups(monkeypatch: pytest.MonkeyPatch, names: dict[str, list[tuple[str, int]]],
            wait: threading.Event | None = None) -> None:
    """Make ``getaddrinfo`` answer ``names`` (host -> [(ip, port)], IPv6 or IPv4 in order);
    ``slow.test`` blocks until ``wait`` is set (a hung resolver)."""
    real = socket.getaddrinfo

    def fake_getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "slow.test" and wait is not None:
            wait.wait(30)
        if host not in names:
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM,
                 socket.IPPROTO_TCP, "", (ip, p, 0, 0) if ":" in ip else (ip, p))
                for ip, p in names[host]]

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)


def free_port() -> int:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        return int(holder.getsockname()[1])


def test_a_host_is_reached_on_its_second_address_when_the_first_refuses(
        fake: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # Only the first address getaddrinfo gave was tried: 'localhost' on ::1 then 127.0.0.1,
    # with the broker on 127.0.0.1 only, never connected.
    broker = fake(lambda key, request: metadata_response(0))
    lookups(monkeypatch, {"broker.test": [("::1", broker.port), ("127.0.0.1", broker.port)]})
    client = NetworkClient(ClientConfig(bootstrap_servers=(f"broker.test:{broker.port}",)))
    with caplog.at_level("INFO", logger="eosclient.net"):
        client.send(None, metadata_request(), lambda answer: None)
        [answer] = run(client, 1)
    assert answer.error is None and broker.connections == 1
    assert str(client._conns[-1].peer) == f"127.0.0.1:{broker.port}"
    assert f"[::1]:{broker.port} failed" in caplog.text and "WARNING" not in caplog.text
    assert client.connect_failure is None
    client.close()


def test_an_ipv6_address_is_tried_after_a_refusing_ipv4_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    server = socket.create_server(("::1", 0), family=socket.AF_INET6)
    port = server.getsockname()[1]
    accepted = threading.Thread(target=server.accept, daemon=True)
    accepted.start()
    lookups(monkeypatch, {"broker.test": [("127.0.0.1", port), ("::1", port)]})
    client = NetworkClient(ClientConfig(bootstrap_servers=(f"broker.test:{port}",)))
    client.connect(-1)
    for _ in range(200):
        client.poll(0.05)
        conn = client._conns[-1]
        if conn.peer is not None and conn.peer.family == socket.AF_INET6 and conn.sock:
            break
    accepted.join(10)
    assert not accepted.is_alive()  # the IPv6 listener was connected to
    client.close()
    server.close()


def test_a_connect_that_fails_on_every_address_names_each_and_is_chained(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # The WARNING named the host only, with the error of its first address.
    port = free_port()
    lookups(monkeypatch, {"broker.test": [("::1", port), ("127.0.0.1", port)]})
    client = NetworkClient(ClientConfig(bootstrap_servers=(f"broker.test:{port}",)))
    with caplog.at_level("WARNING", logger="eosclient.net"):
        client.send(None, metadata_request(), lambda answer: None)
        [answer] = run(client, 1)
    assert isinstance(answer.error, KafkaConnectionError)
    failure = client.connect_failure
    assert failure is not None and isinstance(failure.__cause__, ConnectionRefusedError)
    for address in (f"[::1]:{port}", f"127.0.0.1:{port}"):
        assert address in str(failure) and address in caplog.text
    assert caplog.text.count("Connection refused") == 2
    [warning] = caplog.records
    assert warning.getMessage().startswith(f"cannot connect to broker.test:{port}")
    client.close()


def test_a_host_name_that_does_not_resolve_is_a_failed_connect(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_such_host(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    client = NetworkClient(ClientConfig(bootstrap_servers=("nowhere.test:9092",)))
    client.send(None, metadata_request(), lambda answer: None)
    [answer] = run(client, 1)
    assert isinstance(answer.error, KafkaConnectionError)
    failure = client.connect_failure
    assert "resolve" in str(answer.error) and isinstance(failure, KafkaConnectionError)
    assert isinstance(failure.__cause__, socket.gaierror)
    client.close()


def test_a_hung_lookup_stalls_no_other_connection(
        fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # getaddrinfo ran on the I/O thread: a resolver hanging on one broker's name stalled the
    # requests (and heartbeats) of every other connection of the client.
    release = threading.Event()
    lookups(monkeypatch, {}, wait=release)
    broker = fake(lambda key, request: metadata_response(0))
    client = NetworkClient(ClientConfig(
        bootstrap_servers=("slow.test:9092", f"127.0.0.1:{broker.port}"),
        socket_connection_setup_timeout_ms=30_000))
    try:
        client.connect(-1)
        client.poll(0.0)  # the lookup of slow.test starts (on a resolver thread)
        start = time.monotonic()
        client.send(-2, metadata_request(), lambda answer: None)
        [answer] = run(client, 1)
        assert answer.error is None and answer.node_id == -2
        assert time.monotonic() - start < 5 and not release.is_set()
        assert client._conns[-1].phase.name == "RESOLVING"
    finally:
        release.set()
        client.close()


def test_the_lookup_wakes_the_selector(monkeypatch: pytest.MonkeyPatch, fake: Any) -> None:
    # A lookup that ends must not wait for the next timer to be noticed.
    broker = fake(lambda key, request: metadata_response(0))
    release = threading.Event()
    lookups(monkeypatch, {"slow.test": [("127.0.0.1", broker.port)]}, wait=release)
    client = NetworkClient(ClientConfig(bootstrap_servers=(f"slow.test:{broker.port}",),
                                        socket_connection_setup_timeout_ms=60_000))
    client.connect(-1)
    client.poll(0.0)
    threading.Timer(0.2, release.set).start()
    start = time.monotonic()
    client.poll(30)  # returns when the resolver's answer wakes it, not at the 60 s timer
    assert time.monotonic() - start < 10
    run(client, 0, rounds=20)
    assert client._conns[-1].peer is not None
    client.close()


def test_a_timeout_while_no_broker_can_be_reached_is_chained_from_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # send() and position() raised a bare deadline error: nothing said the broker refused.
    port = free_port()
    lookups(monkeypatch, {"broker.test": [("::1", port), ("127.0.0.1", port)]})
    # (Waits shorter than the 1 s after which the client says AllBrokersDownError itself.)
    producer = TransactionalProducer(f"broker.test:{port}", max_block_ms=500)
    try:
        with pytest.raises(KafkaTimeoutError) as raised:
            producer.send("t", b"x")
        assert isinstance(raised.value.__cause__, KafkaConnectionError)
        assert f"[::1]:{port}" in str(raised.value.__cause__)
    finally:
        producer.close(1)
    consumer = ReadCommittedConsumer(f"broker.test:{port}")
    try:
        consumer.assign([TopicPartition("t", 0)])
        with pytest.raises(KafkaTimeoutError) as raised:
            consumer.position(TopicPartition("t", 0), timeout=0.5)
        assert isinstance(raised.value.__cause__, KafkaConnectionError)
        assert isinstance(raised.value.__cause__.__cause__, ConnectionRefusedError)
    finally:
        consumer.close(1)


# -- KIP-219 throttling ----------------------------------------------------------------------


def throttled_metadata(millis: int) -> Any:
    response = metadata_response(0)
    response.throttle_time_ms = millis
    return response


def test_a_throttled_answer_holds_the_next_request_to_that_node(fake: Any) -> None:
    # throttle_time_ms was ignored: the next request went out at once, to a broker that (KIP-219)
    # mutes the connection after answering, so its timeout ran while the broker ignored it.
    arrived: list[float] = []

    def script(key: ApiKey, request: Any) -> Any:
        arrived.append(time.monotonic())
        return throttled_metadata(400 if len(arrived) == 1 else 0)

    client = client_for(fake(script).port)
    client.send(None, metadata_request(), lambda answer: None)
    [first] = run(client, 1)
    answered = time.monotonic()
    assert first.error is None and first.version >= 6
    client.send(-1, metadata_request(), lambda answer: None)
    client.send(-1, metadata_request(), lambda answer: None)  # behind it, in order
    assert client.in_flight(-1) == 2
    answers = run(client, 2)
    assert [a.error for a in answers] == [None, None]
    assert len(arrived) == 3 and arrived[1] - answered >= 0.35  # held until the throttle passed
    client.send(-1, metadata_request(), lambda answer: None)  # no throttle now: at once
    started = time.monotonic()
    [fourth] = run(client, 1)
    assert fourth.error is None and time.monotonic() - started < 0.3
    client.close()


def test_a_throttle_before_kip_219_versions_was_served_by_the_broker() -> None:
    # Before KIP-219 (Metadata below v6) the broker delayed the answer itself: no second wait.
    conn = NodeConnection(1, ("127.0.0.1", 9092), client_id="c", setup_timeout=1.0,
                          start_at=0.0)
    request = metadata_request()
    conn._note_throttle(Reply(1, 5, request, throttled_metadata(5_000)), 100.0)
    assert conn.throttled_until == float("-inf")
    conn._note_throttle(Reply(2, 6, request, throttled_metadata(5_000)), 100.0)
    assert conn.throttled_until == 105.0


def test_partitions_for_asks_through_the_producers_own_connections(fake: Any) -> None:
    # The processor asked on a plaintext side connection of its own, which a TLS or SASL
    # listener refused (a 10 s stall, then no output partitions known).
    broker = fake(lambda key, request: metadata_response(broker.port, {"out": 3}))
    with TransactionalProducer(f"127.0.0.1:{broker.port}", max_block_ms=10_000) as producer:
        assert producer.partitions_for("out") == [TopicPartition("out", p) for p in range(3)]
    assert broker.connections >= 1
