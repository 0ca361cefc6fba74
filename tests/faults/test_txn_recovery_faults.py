"""Recovery of the transactional producer against real brokers, with faults injected.

The broker-level twins of ``tests/unit/test_txn_recovery.py``, each modelled on one script of the
producer review (r1, r2c, r2d, r3, r3c, r3d, r4, r6) and run on noida-db and Tansu. A lost answer
whose request lands *late* is played by :class:`HoldRelay`: it holds one request for a while and
then delivers it although the client has hung up, as a broker does with a request it had already
read. What ended up in a partition is decided by its COMMIT / ABORT markers.
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
from kafka.protocol.consumer import OffsetFetchRequest

from eosclient import (
    EosError,
    FencedError,
    KafkaTimeoutError,
    TopicPartition,
    TransactionalProducer,
)
from eosclient._core.decode import ControlType
from eosclient._net.blocking import BlockingConnection
from eosclient.errors import ApiKey
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.proxy import Delay, ErrorResponse, KafkaProxy, RewriteError, Rule
from eosclient.testing.reader import read_raw_batches
from eosclient.testing.topics import create_topic

pytestmark = pytest.mark.proxy

TIMEOUT = 15.0
HOLD = 1.0  # how long HoldRelay keeps the first request back: past the client's request timeout
REQUEST_TIMEOUT_MS = 400
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
UNKNOWN_TOPIC_OR_PARTITION = 3


class HoldRelay:
    """A TCP relay to ``upstream`` that holds the first request of ``api_key`` for ``hold``
    seconds, then delivers it even if the client hung up meanwhile; its answer goes nowhere.

    Later requests on the held connection wait behind it; everything else passes straight
    through. :attr:`delivered_late` is set once the held request reached the broker.
    """

    def __init__(self, upstream: tuple[str, int], api_key: ApiKey, hold: float) -> None:
        self._upstream, self._api_key, self._hold = upstream, int(api_key), hold
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self.delivered_late = threading.Event()
        self._held = False
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def close(self) -> None:
        self._stop.set()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(self._hold + 5)
        self._listener.close()

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            broker = socket.create_connection(self._upstream)
            self._sockets += [client, broker]
            self._spawn(self._requests, client, broker)
            self._spawn(self._answers, broker, client)

    def _requests(self, client: socket.socket, broker: socket.socket) -> None:
        while (frame := _read_frame(client)) is not None:
            (api_key,) = struct.unpack_from(">h", frame, 4)
            held = api_key == self._api_key and not self._held
            if held:
                self._held = True
                time.sleep(self._hold)  # the client times out and hangs up meanwhile
            try:
                broker.sendall(frame)
            except OSError:
                return
            if held:
                self.delivered_late.set()
        time.sleep(0.5)  # the client is gone: give the broker time to act on what it read
        with contextlib.suppress(OSError):
            broker.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _answers(broker: socket.socket, client: socket.socket) -> None:
        while True:
            try:
                data = broker.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            with contextlib.suppress(OSError):  # the client is gone: the answer is lost
                client.sendall(data)
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RDWR)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    body = _read_exactly(sock, struct.unpack(">i", head)[0])
    return None if body is None else head + body


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


@contextlib.contextmanager
def held_once(broker: RunningBroker, api_key: ApiKey) -> Iterator[tuple[KafkaProxy, HoldRelay]]:
    """producer -> KafkaProxy (address rewriting) -> HoldRelay -> broker."""
    relay = HoldRelay((broker.host, broker.port), api_key, HOLD)
    try:
        with KafkaProxy("127.0.0.1", relay.port) as proxy:
            yield proxy, relay
    finally:
        relay.close()




def decided(broker: RunningBroker, topic: str) -> tuple[list[bytes], list[bytes]]:
    """(committed, aborted) values of partition 0, by its markers."""
    pending: dict[int, list[bytes]] = {}
    committed: list[bytes] = []
    aborted: list[bytes] = []
    for batch in read_raw_batches((broker.host, broker.port), topic, 0):
        if batch.is_control:
            values = pending.pop(batch.producer_id, [])
            (committed if batch.control_type is ControlType.COMMIT else aborted).extend(values)
        else:
            values = [r.value or b"" for r in batch.records()]
            pending.setdefault(batch.producer_id, []).extend(values)
    return committed, aborted


def committed_offset(broker: RunningBroker, group: str, tp: TopicPartition) -> int:
    topic = OffsetFetchRequest.OffsetFetchRequestTopic(name=tp.topic,
                                                       partition_indexes=[tp.partition])
    request = OffsetFetchRequest(group_id=group, require_stable=True, topics=[topic])
    with BlockingConnection(broker.host, broker.port) as conn:
        response = conn.request(request, version=7)
    offset: int = response.topics[0].partitions[0].committed_offset
    return offset


@pytest.fixture
def make_producer() -> Iterator[Callable[..., TransactionalProducer]]:
    made: list[TransactionalProducer] = []

    def make(servers: str, txn_id: str | None, **config: Any) -> TransactionalProducer:
        made.append(TransactionalProducer(servers, transactional_id=txn_id, config=config))
        return made[-1]

    yield make
    for producer in made:
        producer.close(5)


def epoch_of(producer: TransactionalProducer) -> int:
    return producer._sender.core.identity.epoch  # read-only probe


# -- finding 1: a late copy of a lost request ----------------------------------------------------


@pytest.mark.parametrize("committed", [True, False], ids=["commit", "abort"])
def test_a_late_end_txn_cannot_end_the_next_transaction(
        committed: bool, broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    # r3/r3d: N+1 kept N's epoch, so N's lost EndTxn, landing late, ended N+1 the wrong way
    topic = unique_name("t")
    create_topic(broker, topic)
    with held_once(broker, ApiKey.END_TXN) as (proxy, relay):
        producer = make_producer(proxy.bootstrap_servers, unique_name("txn"),
                                 **{"request.timeout.ms": REQUEST_TIMEOUT_MS})
        producer.init_transactions(TIMEOUT)
        epoch = epoch_of(producer)
        producer.begin_transaction()
        producer.send(topic, b"txn-N", partition=0)
        producer.flush(TIMEOUT)
        (producer.commit_transaction if committed else producer.abort_transaction)(TIMEOUT)
        bumped = epoch_of(producer)
        producer.begin_transaction()
        producer.send(topic, b"txn-N+1", partition=0)
        producer.flush(TIMEOUT)
        assert relay.delivered_late.wait(TIMEOUT)
        time.sleep(0.3)  # the broker has acted on it by now
        (producer.abort_transaction if committed else producer.commit_transaction)(TIMEOUT)
    first, second = [b"txn-N"], [b"txn-N+1"]
    assert decided(broker, topic) == ((first, second) if committed else (second, first))
    assert bumped == epoch + 1  # the first EndTxn's answer was lost: N+1 got a new epoch


def test_a_late_txn_offset_commit_cannot_rewind_the_next_transaction(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    # r3c: N's lost TxnOffsetCommit landed late in N+1 (same epoch) and rewound 20 to 10
    source, group = TopicPartition(unique_name("in"), 0), unique_name("group")
    create_topic(broker, source.topic)
    with held_once(broker, ApiKey.TXN_OFFSET_COMMIT) as (proxy, relay):
        producer = make_producer(proxy.bootstrap_servers, unique_name("txn"),
                                 **{"request.timeout.ms": REQUEST_TIMEOUT_MS})
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction(group_id=group)
        producer.send_offsets_to_transaction({source: 10}, group)
        producer.commit_transaction(TIMEOUT)
        assert committed_offset(broker, group, source) == 10
        producer.begin_transaction(group_id=group)
        producer.send_offsets_to_transaction({source: 20}, group)
        assert relay.delivered_late.wait(TIMEOUT)
        time.sleep(0.3)
        producer.commit_transaction(TIMEOUT)
    assert committed_offset(broker, group, source) == 20


# -- finding 2: fenced during the KIP-360 recovery -----------------------------------------------


def test_an_instance_fenced_during_its_bump_stays_fenced(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    # r1: fenced while its bump was on the way, the zombie took epoch + 2 and committed again
    topic, txn = unique_name("t"), unique_name("txn")
    create_topic(broker, topic)
    with KafkaProxy(broker.host, broker.port) as proxy:
        zombie = make_producer(proxy.bootstrap_servers, txn, **{"request.timeout.ms": 10_000})
        zombie.init_transactions(TIMEOUT)
        proxy.add_rule(Rule(api_key=ApiKey.PRODUCE,
                            action=RewriteError(OUT_OF_ORDER_SEQUENCE_NUMBER)))
        bump = proxy.add_rule(Rule(api_key=ApiKey.INIT_PRODUCER_ID, action=Delay(1.0)))
        zombie.begin_transaction()
        zombie.send(topic, b"failed", partition=0)
        with pytest.raises(EosError):
            zombie.commit_transaction(TIMEOUT)  # OUT_OF_ORDER: the abort must bump
        owner = make_producer(broker.bootstrap_servers, txn)
        thread = threading.Thread(target=lambda: (proxy.wait_fired(bump, TIMEOUT),
                                                  owner.init_transactions(TIMEOUT)))
        thread.start()
        with pytest.raises(FencedError, match="another instance"):
            zombie.abort_transaction(TIMEOUT)
        thread.join(TIMEOUT)
        with pytest.raises(FencedError):
            zombie.begin_transaction()
    assert bump.fired == 1
    assert decided(broker, topic)[0] == []  # nothing of the zombie's was committed


# -- finding 4: a zombie whose EndTxn the broker answers by closing the connection ---------------


def test_a_zombie_commit_ends_in_fenced_error(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    # r4 on Tansu: the zombie's commit retried for ever; its re-init took the id back (plain form)
    topic, txn = unique_name("t"), unique_name("txn")
    create_topic(broker, topic)
    zombie = make_producer(broker.bootstrap_servers, txn)
    zombie.init_transactions(TIMEOUT)
    zombie.begin_transaction()
    zombie.send(topic, b"zombie", partition=0)
    zombie.flush(TIMEOUT)
    owner = make_producer(broker.bootstrap_servers, txn)
    owner.init_transactions(TIMEOUT)
    started = time.monotonic()
    with pytest.raises(FencedError):
        zombie.commit_transaction(TIMEOUT)
    assert time.monotonic() - started < TIMEOUT / 2
    with pytest.raises(FencedError):
        zombie.init_transactions(TIMEOUT)
    with owner.transaction():
        owner.send(topic, b"owner", partition=0)
    committed, _ = decided(broker, topic)
    assert committed == [b"owner"]


# -- finding 5: aborts that waited for ever on a failing registration ----------------------------


@pytest.mark.parametrize("first", ["abort", "commit"])
def test_an_abort_finishes_though_a_registration_keeps_failing(
        first: str, broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    # r2c/r2d: a registration failing with a retriable code for ever wedged abort and commit
    topic = unique_name("t")
    create_topic(broker, topic)
    with KafkaProxy(broker.host, broker.port, latency=0.05) as proxy:
        producer = make_producer(proxy.bootstrap_servers, unique_name("txn"),
                                 **{"retry.backoff.ms": 20, "retry.backoff.max.ms": 100})
        producer.init_transactions(TIMEOUT)
        failing = proxy.add_rule(Rule(api_key=ApiKey.ADD_PARTITIONS_TO_TXN, times=None,
                                      action=ErrorResponse(UNKNOWN_TOPIC_OR_PARTITION)))
        producer.begin_transaction(partitions=[TopicPartition(topic, 7)])
        assert proxy.wait_fired(failing, TIMEOUT)  # in flight: its answer comes while aborting
        if first == "commit":
            with pytest.raises(KafkaTimeoutError):
                producer.commit_transaction(0.5)
        producer.abort_transaction(TIMEOUT)
        proxy.clear_rules()
        with producer.transaction():
            producer.send(topic, b"next", partition=0)
    assert decided(broker, topic) == ([b"next"], [])


# -- finding 7: host names are resolved outside the producer's lock ------------------------------


def test_a_slow_resolver_does_not_block_send(
        broker: RunningBroker, monkeypatch: pytest.MonkeyPatch,
        make_producer: Callable[..., TransactionalProducer]) -> None:
    # r6: the name was resolved under the producer's lock: send() took 2.8 s, max.block.ms 0.5
    real = socket.getaddrinfo
    resolving = threading.Event()

    def slow(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "slow.invalid":
            resolving.set()
            time.sleep(1.0)
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    producer = make_producer(f"slow.invalid:{broker.port}", None, **{"max.block.ms": 500})
    assert resolving.wait(TIMEOUT)  # the I/O thread is inside getaddrinfo now
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match=r"max\.block\.ms"):  # no metadata yet: it waits
        producer.send("out", b"v", partition=0)
    assert time.monotonic() - started < 1.0  # max.block.ms, not the resolver's whole second
