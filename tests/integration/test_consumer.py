"""ReadCommittedConsumer against real brokers (noida-db and Tansu, each test on both unless named).

confluent-kafka transactional producers write interleaved committed, aborted and open
transactions; the consumer (``assign()``: Tansu's group join takes ~23 s, see test_group.py)
must deliver exactly the committed records, in offset order per partition, on noida-db (which
sends the aborted-transactions index) and on Tansu (which does not, so confluent-kafka's own
consumer delivers aborted records there).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import confluent_kafka as ck
import pytest
from interop import ABORTED, COMMITTED, confluent_read, txn_producer, write_abort_then_commit

from eosclient import (
    ConsumerRecord,
    CorruptRecordError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    ReadCommittedConsumer,
    ResponseTooLargeError,
    RetriableError,
    TopicPartition,
)
from eosclient._protocol.framing import FrameDecoder, frame
from eosclient.errors import ApiKey
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.proxy import Cut, KafkaProxy, RewriteError, Rule

pytestmark = pytest.mark.broker

PARTITIONS = 3
TIMEOUT = 20.0


def create_topic(broker: RunningBroker, name: str, partitions: int = PARTITIONS) -> str:
    return topics.create_topic(broker, name, partitions)


@contextmanager
def consumer(bootstrap: str, *partitions: TopicPartition, **config: object,
             ) -> Iterator[ReadCommittedConsumer]:
    # fetch.max.wait.ms 100: Tansu holds an empty Fetch for all of it, and the tests wait often.
    c = ReadCommittedConsumer(bootstrap, config={"auto.offset.reset": "earliest",
                                                 "fetch.max.wait.ms": 100, **config})
    c.assign(list(partitions))
    try:
        yield c
    finally:
        c.close()


def read(c: ReadCommittedConsumer, count: int, timeout: float = TIMEOUT) -> list[ConsumerRecord]:
    """Poll until ``count`` records came (then a little longer: nothing more may come)."""
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += c.poll(0.2)
    got += c.poll(0.3)
    return got


def values(records: list[ConsumerRecord], partition: int | None = None) -> list[bytes | None]:
    return [r.value for r in records if partition is None or r.partition == partition]


class Writer:
    """Sends records one at a time (each flushed, so offsets follow the call order) and keeps
    what a read_committed reader must deliver per partition once each transaction ends."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.pending: dict[int, list[tuple[int, bytes]]] = {}
        self.committed: dict[int, set[bytes]] = {p: set() for p in range(PARTITIONS)}
        self.aborted: set[bytes] = set()
        self.order: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}

    def send(self, producer: ck.Producer, partition: int, value: bytes) -> None:
        producer.produce(self.topic, value, partition=partition)
        assert producer.flush(10) == 0
        self.pending.setdefault(id(producer), []).append((partition, value))
        self.order[partition].append(value)

    def end(self, producer: ck.Producer, *, commit: bool) -> None:
        for partition, value in self.pending.pop(id(producer), []):
            if commit:
                self.committed[partition].add(value)
            else:
                self.aborted.add(value)

    def expected(self, partition: int) -> list[bytes]:
        return [v for v in self.order[partition] if v in self.committed[partition]]


def tps(topic: str, count: int = PARTITIONS) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(count)]


def test_exactly_the_committed_records_in_order(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    create_topic(broker, topic_name)
    w = Writer(topic_name)
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    with txn_producer(broker, unique_name("a")) as a, txn_producer(broker, unique_name("b")) as b, \
            txn_producer(broker, unique_name("c")) as c:
        for round_ in range(3):
            for p in (a, b, c):
                p.begin_transaction()
            for i in range(4):
                for name, p in (("a", a), ("b", b), ("c", c)):
                    w.send(p, (i + round_) % PARTITIONS, f"{name}{round_}.{i}".encode())
                plain.produce(topic_name, f"plain{round_}.{i}".encode(), partition=i % 3)
                assert plain.flush(10) == 0
                w.order[i % 3].append(f"plain{round_}.{i}".encode())
                w.committed[i % 3].add(f"plain{round_}.{i}".encode())
            # a commits every round, b aborts every round, c alternates.
            for p, commit in ((b, False), (a, True), (c, round_ % 2 == 0)):
                (p.commit_transaction if commit else p.abort_transaction)(15)
                w.end(p, commit=commit)
    expected = sum(len(w.expected(p)) for p in range(PARTITIONS))
    with consumer(broker.bootstrap_servers, *tps(topic_name)) as eos:
        got = read(eos, expected)
        for p in range(PARTITIONS):
            assert values(got, p) == w.expected(p), p
            offsets = [r.offset for r in got if r.partition == p]
            assert offsets == sorted(offsets)
            assert eos.position(TopicPartition(topic_name, p)) == eos.last_stable_offset(
                TopicPartition(topic_name, p))  # markers at the end are consumed too
        assert not set(values(got)) & w.aborted
    with consumer(broker.bootstrap_servers, *tps(topic_name),
                  **{"isolation.level": "read_uncommitted"}) as dirty:
        everything = read(dirty, sum(len(o) for o in w.order.values()))
        assert all(values(everything, p) == w.order[p] for p in range(PARTITIONS))


def test_an_open_transaction_is_never_delivered_and_the_ends_show_it(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    create_topic(broker, topic_name, 1)
    tp = TopicPartition(topic_name, 0)
    with txn_producer(broker, unique_name("a")) as a, txn_producer(broker, unique_name("b")) as b:
        a.begin_transaction()
        a.produce(topic_name, b"a-committed", partition=0)
        a.commit_transaction(15)  # offset 0, its marker 1
        b.begin_transaction()
        b.produce(topic_name, b"b-open", partition=0)  # offset 2: holds the LSO at 2
        assert b.flush(10) == 0
        a.begin_transaction()
        a.produce(topic_name, b"a-after-open", partition=0)
        a.commit_transaction(15)  # offset 3, committed but past the LSO; its marker 4
        with consumer(broker.bootstrap_servers, tp) as eos:
            assert eos.last_stable_offset(tp) == 2 and eos.high_watermark(tp) == 5
            assert eos.lag(tp) == 2
            assert values(read(eos, 1)) == [b"a-committed"]
            assert values(eos.poll(1.0)) == []  # b-open and what follows stay back
            assert (eos.position(tp), eos.lag(tp)) == (2, 0)
            eos.seek(tp, 0)
            eos.seek_to_end([tp])
            assert eos.position(tp) == 2  # the end is the LSO, not the high watermark
            b.commit_transaction(15)  # marker 5: the LSO moves to 6
            assert values(read(eos, 2)) == [b"b-open", b"a-after-open"]
            assert eos.position(tp) == eos.last_stable_offset(tp) == 6


def test_the_watermarks_of_many_partitions_come_from_one_call(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    create_topic(broker, topic_name, 3)
    tps = [TopicPartition(topic_name, p) for p in range(3)]
    with txn_producer(broker, unique_name("a")) as a, txn_producer(broker, unique_name("b")) as b:
        a.begin_transaction()
        for p in range(3):
            for _ in range(p + 1):
                a.produce(topic_name, b"x", partition=p)
        a.commit_transaction(15)  # p records and a marker each
        b.begin_transaction()
        b.produce(topic_name, b"open", partition=1)  # holds partition 1's LSO
        assert b.flush(10) == 0
        with consumer(broker.bootstrap_servers) as eos:  # nothing assigned: not needed
            ends = eos.watermarks([*tps, tps[0]], TIMEOUT)
            assert list(ends) == tps  # each once, in the order asked
            assert [(e.high_watermark, e.last_stable_offset) for e in ends.values()] == [
                (2, 2), (4, 3), (4, 4)]
            assert eos.watermarks([], TIMEOUT) == {}
            b.abort_transaction(15)
            assert eos.watermarks([tps[1]], TIMEOUT)[tps[1]].last_stable_offset == 5


def test_seek_position_commit_and_committed(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    create_topic(broker, topic_name, 2)
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for i in range(6):
        plain.produce(topic_name, b"%d" % i, partition=i % 2)
    assert plain.flush(10) == 0
    a, b = tps(topic_name, 2)
    group = unique_name("group")
    with consumer(broker.bootstrap_servers, a, b, **{"group.id": group}) as eos:
        assert eos.committed([a, b]) == {a: None, b: None}
        assert len(read(eos, 6)) == 6 and eos.position(a) == 3
        eos.commit()  # the positions
        assert eos.committed([a, b]) == {a: 3, b: 3}
        eos.commit({a: 1})
        assert eos.committed([a]) == {a: 1}
        eos.seek(b, 2)
        assert [(r.partition, r.offset) for r in read(eos, 1)] == [(1, 2)]
        eos.seek_to_beginning([a])
        assert eos.position(a) == 0 and len(read(eos, 3)) == 3
    with consumer(broker.bootstrap_servers, a, b, **{"group.id": group}) as again:
        assert [(r.partition, r.offset) for r in read(again, 2)] == [(0, 1), (0, 2)]


@pytest.mark.proxy
def test_committed_asks_again_while_the_offsets_are_unstable(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # KIP-447 require_stable: UNSTABLE_OFFSET_COMMIT (88) means a transaction committing these
    # offsets is still open. Neither broker answers it (both hide such offsets), so the proxy does.
    create_topic(broker, topic_name, 1)
    tp = TopicPartition(topic_name, 0)
    with KafkaProxy(broker.host, broker.port) as proxy, \
            consumer(proxy.bootstrap_servers, tp, **{"group.id": unique_name("g")}) as eos:
        eos.commit({tp: 3})
        rule = proxy.add_rule(Rule(api_key=ApiKey.OFFSET_FETCH, action=RewriteError(88), times=2))
        assert eos.committed([tp]) == {tp: 3} and rule.fired == 2
        proxy.add_rule(Rule(api_key=ApiKey.OFFSET_FETCH, action=RewriteError(88), times=None))
        with pytest.raises(KafkaTimeoutError) as raised:
            eos.committed([tp], timeout=0.5)
        assert isinstance(raised.value.__cause__, RetriableError)
        assert raised.value.__cause__.code == 88


@pytest.mark.proxy
def test_not_leader_answers_and_cut_connections_lose_and_repeat_nothing(
        broker: RunningBroker, topic_name: str) -> None:
    create_topic(broker, topic_name, 1)
    tp = TopicPartition(topic_name, 0)
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for i in range(30):
        plain.produce(topic_name, b"%d" % i, partition=0)
        if i % 10 == 9:
            assert plain.flush(10) == 0  # three batches
    with KafkaProxy(broker.host, broker.port) as proxy:
        not_leader = proxy.add_rule(Rule(api_key=ApiKey.FETCH, action=RewriteError(6), nth=1))
        cut = proxy.add_rule(Rule(api_key=ApiKey.FETCH, action=Cut("after"), nth=3))
        with consumer(proxy.bootstrap_servers, tp, **{"max.partition.fetch.bytes": 300}) as eos:
            got = read(eos, 30)
        assert not_leader.fired == 1 and cut.fired == 1
    assert values(got) == [b"%d" % i for i in range(30)]


def test_out_of_range_resets_per_auto_offset_reset(
        noida_broker: RunningBroker, topic_name: str) -> None:
    # noida-db answers a Fetch past the end with OFFSET_OUT_OF_RANGE (Tansu answers it empty).
    create_topic(noida_broker, topic_name, 1)
    tp = TopicPartition(topic_name, 0)
    plain = ck.Producer({"bootstrap.servers": noida_broker.bootstrap_servers, "linger.ms": 0})
    plain.produce(topic_name, b"only", partition=0)
    assert plain.flush(10) == 0
    with consumer(noida_broker.bootstrap_servers, tp) as eos:
        eos.seek(tp, 1000)
        assert values(read(eos, 1)) == [b"only"]  # earliest: from the log start again
    with consumer(noida_broker.bootstrap_servers, tp, **{"auto.offset.reset": "none"}) as eos:
        eos.seek(tp, 1000)
        with pytest.raises(OffsetOutOfRangeError, match=f"{topic_name}-0 at offset 1000"):
            read(eos, 1)


def test_read_uncommitted_delivers_open_and_aborted_records(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    create_topic(broker, topic_name, 1)
    tp = TopicPartition(topic_name, 0)
    with txn_producer(broker, unique_name("t")) as p:
        p.begin_transaction()
        p.produce(topic_name, b"aborted", partition=0)
        assert p.flush(10) == 0
        p.abort_transaction(15)
        p.begin_transaction()
        p.produce(topic_name, b"open", partition=0)
        assert p.flush(10) == 0
        with consumer(broker.bootstrap_servers, tp,
                      **{"isolation.level": "read_uncommitted"}) as dirty:
            assert values(read(dirty, 2)) == [b"aborted", b"open"]  # never a marker
            assert dirty.lag(tp) == 0 and dirty.high_watermark(tp) == 3
        p.abort_transaction(15)


def test_an_unknown_topic_or_partition_is_an_error(broker: RunningBroker, topic_name: str) -> None:
    with consumer(broker.bootstrap_servers, TopicPartition(topic_name, 0)) as eos, \
            pytest.raises(RetriableError, match="UNKNOWN_TOPIC_OR_PARTITION") as raised:
        for _ in range(50):
            eos.poll(0.1)
    assert repr(topic_name) in str(raised.value)
    create_topic(broker, topic_name, 1)
    with consumer(broker.bootstrap_servers, TopicPartition(topic_name, 4)) as eos, \
            pytest.raises(RetriableError, match="there is no partition 4"):
        for _ in range(50):
            eos.poll(0.1)


# --- against confluent-kafka's consumer -------------------------------------------------------




def test_confluent_delivers_aborted_records_on_tansu_and_we_do_not(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # BROKERS.md: Tansu sends no aborted-transactions index; index-only consumers (librdkafka,
    # kafka-python, Java) deliver aborted records there. eosclient reads the markers.
    write_abort_then_commit(broker, topic_name, unique_name("txn"))
    tp = TopicPartition(topic_name, 0)
    with consumer(broker.bootstrap_servers, tp) as eos:
        assert values(read(eos, 3)) == COMMITTED and eos.position(tp) == 8
        [trust] = eos._session.fetcher._trust.values()  # which mode the broker earned (read only)
        assert trust.proven is (broker.kind == "noida") and trust.violations == 0
    theirs = confluent_read(broker, topic_name, 0)
    assert theirs == (ABORTED + COMMITTED if broker.kind == "tansu" else COMMITTED)


def test_confluent_resuming_past_an_abort_loses_committed_records_on_noida(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # noida-db lists every aborted transaction of the partition in every Fetch, even ones that
    # ended before the fetch offset: an index-only consumer resuming at offset 4 (a committed
    # offset) takes the producer's next, committed transaction for the aborted one.
    write_abort_then_commit(broker, topic_name, unique_name("txn"))
    tp = TopicPartition(topic_name, 0)
    with consumer(broker.bootstrap_servers, tp) as eos:
        eos.seek(tp, 4)
        assert values(read(eos, 3)) == COMMITTED
    theirs = confluent_read(broker, topic_name, 4)
    assert theirs == ([] if broker.kind == "noida" else COMMITTED)


# --- a corrupt Fetch answer ------------------------------------------------------------------


class ByteFlipper:
    """A TCP relay in front of the broker that flips one byte of ``pattern`` in every answer
    frame that carries it (a record value: its batch then fails its CRC-32C)."""

    def __init__(self, host: str, port: int, pattern: bytes) -> None:
        self._upstream = (host, port)
        self._pattern, self._flipped = pattern, pattern[:-1] + bytes([pattern[-1] ^ 1])
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._socks: list[socket.socket] = [self._server]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        for sock in self._socks:
            _shut(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._upstream)
            self._socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, answers: bool) -> None:
        decoder = FrameDecoder()
        try:
            while data := source.recv(65536):
                if not answers:
                    sink.sendall(data)
                    continue
                for body in decoder.feed(data):
                    sink.sendall(frame(body.replace(self._pattern, self._flipped)))
        except OSError:
            pass
        finally:
            _shut(sink)  # shutdown, not just close: it wakes the other pump's recv()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@pytest.mark.proxy
def test_a_flipped_byte_raises_naming_topic_partition_and_offset(
        broker: RunningBroker, topic_name: str) -> None:
    create_topic(broker, topic_name, 1)
    tp = TopicPartition(topic_name, 0)
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for batch in ([b"ok-0", b"ok-1"], [b"CORRUPT-ME"], [b"after"]):
        for value in batch:
            plain.produce(topic_name, value, partition=0)
        assert plain.flush(10) == 0  # one batch each: offsets 0-1, 2, 3
    flipper = ByteFlipper(broker.host, broker.port, b"CORRUPT-ME")
    try:
        with KafkaProxy("127.0.0.1", flipper.port) as proxy, \
                consumer(proxy.bootstrap_servers, tp) as eos:
            got: list[ConsumerRecord] = []
            with pytest.raises(CorruptRecordError) as raised:
                for _ in range(100):
                    got += eos.poll(0.2)
            assert (raised.value.topic, raised.value.partition, raised.value.offset) == (
                topic_name, 0, 2)
            assert values(got) == [b"ok-0", b"ok-1"] and eos.position(tp) == 2
            with pytest.raises(CorruptRecordError):
                eos.poll(0.2)  # never skipped: again, until the application seeks
            eos.seek(tp, 3)
            assert values(read(eos, 1)) == [b"after"]
    finally:
        flipper.close()


def _fill(broker: RunningBroker, topic: str, partitions: int, per_partition: int) -> None:
    """``per_partition`` records of 100 kB in each partition, in large batches."""
    p = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 50,
                     "batch.size": 1_000_000, "message.max.bytes": 2_000_000})
    for partition in range(partitions):
        for i in range(per_partition):
            p.produce(topic, b"%d-%d" % (partition, i) + b"x" * 100_000, partition=partition)
        assert p.flush(30) == 0


def test_noida_ignores_fetch_byte_limits_and_the_consumer_fetches_less_and_says_so(
        noida_broker: RunningBroker, topic_name: str, caplog: pytest.LogCaptureFixture) -> None:
    # Quirk: noida-db sends everything past the position of every partition asked for, whatever
    # the limits. Four partitions of 3 MB each came as one 12 MB answer over a 5 MB limit, and
    # the consumer retried it unchanged for ever, silently.
    create_topic(noida_broker, topic_name, 4)
    _fill(noida_broker, topic_name, 4, 30)
    tps = [TopicPartition(topic_name, p) for p in range(4)]
    with caplog.at_level(logging.WARNING, logger="eosclient"), \
            consumer(noida_broker.bootstrap_servers, *tps,
                     **{"receive.message.max.bytes": 5_000_000,
                        "fetch.max.bytes": 1_000_000}) as eos:
        got = read(eos, 120, timeout=60)
    assert len(got) == 120 and len({(r.partition, r.offset) for r in got}) == 120
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and "over receive.message.max.bytes (5000000)" in warnings[0]
    assert "node " in warnings[0]


def test_a_partition_too_large_to_read_at_all_is_a_typed_error_not_a_stall(
        noida_broker: RunningBroker, topic_name: str, caplog: pytest.LogCaptureFixture) -> None:
    # One partition's backlog alone over the limit: noida-db sends it whole however little is
    # asked for; the consumer used to poll empty for ever without a word.
    create_topic(noida_broker, topic_name, 1)
    _fill(noida_broker, topic_name, 1, 30)
    tp = TopicPartition(topic_name, 0)
    with caplog.at_level(logging.WARNING, logger="eosclient"), \
            consumer(noida_broker.bootstrap_servers, tp,
                     **{"receive.message.max.bytes": 1_000_000,
                        "fetch.max.bytes": 500_000}) as eos, \
            pytest.raises(ResponseTooLargeError) as raised:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            assert eos.poll(0.2) == []
    assert raised.value.limit == 1_000_000 and raised.value.size > 3_000_000
    assert str(raised.value.size) in str(raised.value)
    assert any(r.levelno == logging.WARNING for r in caplog.records)


def test_large_batches_within_the_limits_are_read_on_both_brokers(
        broker: RunningBroker, topic_name: str) -> None:
    # Control for the two above: the same topic shape read with limits that fit.
    create_topic(broker, topic_name, 2)
    _fill(broker, topic_name, 2, 20)
    tps = [TopicPartition(topic_name, p) for p in range(2)]
    with consumer(broker.bootstrap_servers, *tps) as eos:
        got = read(eos, 40, timeout=60)
    assert len(got) == 40
