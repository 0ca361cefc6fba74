"""The read_committed reader against real brokers: confluent-kafka transactional producers write
interleaved committed, aborted and open transactions; ``read_partition`` returns exactly the
committed records, in offset order, on noida-db (which sends the aborted-transactions index) and
on Tansu (which does not)."""

from __future__ import annotations

from collections.abc import Callable

import confluent_kafka as ck
import pytest
from interop import ABORTED, COMMITTED, confluent_read, txn_producer, write_abort_then_commit

from eosclient._core.decode import ControlType
from eosclient.errors import EosError
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.reader import read_partition, read_raw_batches

pytestmark = pytest.mark.broker

PARTITIONS = 3


def create_topic(broker: RunningBroker, name: str, partitions: int = PARTITIONS) -> str:
    return topics.create_topic(broker, name, partitions)


class Writer:
    """Sends records one at a time (each flushed, so offsets follow the call order) and keeps
    what a read_committed reader must return per partition once each transaction ends."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.pending: dict[int, list[tuple[int, bytes]]] = {}  # id(producer) -> sent
        self.committed: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.aborted: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.order: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}

    def send(self, producer: ck.Producer, partition: int, value: bytes) -> None:
        producer.produce(self.topic, value, partition=partition)
        assert producer.flush(10) == 0
        self.pending.setdefault(id(producer), []).append((partition, value))
        self.order[partition].append(value)

    def plain(self, producer: ck.Producer, partition: int, value: bytes) -> None:
        self.send(producer, partition, value)
        self.end(producer, commit=True)

    def end(self, producer: ck.Producer, *, commit: bool) -> None:
        for partition, value in self.pending.pop(id(producer), []):
            (self.committed if commit else self.aborted)[partition].append(value)

    def expected(self, partition: int) -> list[bytes]:
        committed = set(self.committed[partition])
        return [v for v in self.order[partition] if v in committed]


def values(bootstrap: str, topic: str, partition: int, **kwargs: object) -> list[bytes | None]:
    return [r.value for r in read_partition(bootstrap, topic, partition, **kwargs)]  # type: ignore[arg-type]


def test_interleaved_transactions_of_several_producers(
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
                w.plain(plain, i % PARTITIONS, f"plain{round_}.{i}".encode())
            # a commits every round, b aborts every round, c alternates.
            for p, commit in ((b, False), (a, True), (c, round_ % 2 == 0)):
                (p.commit_transaction if commit else p.abort_transaction)(15)
                w.end(p, commit=commit)
    for partition in range(PARTITIONS):
        got = values(broker.bootstrap_servers, topic_name, partition)
        assert got == w.expected(partition), partition
        assert not set(got) & set(w.aborted[partition])
        everything = values(broker.bootstrap_servers, topic_name, partition,
                            isolation="read_uncommitted")
        assert everything == w.order[partition]


def test_an_open_transaction_holds_back_everything_after_it(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    create_topic(broker, topic_name, 1)
    w = Writer(topic_name)
    with txn_producer(broker, unique_name("a")) as a, txn_producer(broker, unique_name("b")) as b:
        a.begin_transaction()
        w.send(a, 0, b"a-committed")
        a.commit_transaction(15)
        w.end(a, commit=True)
        b.begin_transaction()
        w.send(b, 0, b"b-open")
        a.begin_transaction()
        w.send(a, 0, b"a-after-open")  # committed, but past the LSO while b is open
        a.commit_transaction(15)
        w.end(a, commit=True)
        assert values(broker.bootstrap_servers, topic_name, 0) == [b"a-committed"]
        b.commit_transaction(15)
        w.end(b, commit=True)
    assert values(broker.bootstrap_servers, topic_name, 0) == [
        b"a-committed", b"b-open", b"a-after-open"]
    assert values(broker.bootstrap_servers, topic_name, 0, start=3) == [b"a-after-open"]


def test_raw_batches_show_the_markers(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    create_topic(broker, topic_name, 1)
    with txn_producer(broker, unique_name("a")) as a:
        for commit in (False, True):
            a.begin_transaction()
            a.produce(topic_name, b"x", partition=0)
            assert a.flush(10) == 0  # else the abort purges it unsent, and writes no marker
            (a.commit_transaction if commit else a.abort_transaction)(15)
    batches = read_raw_batches(broker.bootstrap_servers, topic_name, 0)
    markers = [b.control_type for b in batches if b.is_control]
    assert markers == [ControlType.ABORT, ControlType.COMMIT]
    assert len({b.producer_id for b in batches}) == 1
    assert [b.is_transactional for b in batches] == [True] * 4


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_transactions(broker: RunningBroker, topic_name: str,
                                 unique_name: Callable[[str], str], codec: str) -> None:
    create_topic(broker, topic_name, 1)
    sent = [b"%d:" % i + b"v" * 100 for i in range(200)]
    with txn_producer(broker, unique_name("z"), **{"compression.type": codec,
                                                   "linger.ms": "50"}) as p:
        for commit in (False, True):
            p.begin_transaction()
            for value in sent:
                p.produce(topic_name, value, partition=0)
            assert p.flush(10) == 0
            (p.commit_transaction if commit else p.abort_transaction)(15)
    assert any(b.compression for b in read_raw_batches(broker.bootstrap_servers, topic_name, 0))
    assert values(broker.bootstrap_servers, topic_name, 0) == sent


def test_a_dead_bootstrap_server_is_skipped(broker: RunningBroker, topic_name: str) -> None:
    create_topic(broker, topic_name, 1)
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap_servers})
    plain.produce(topic_name, b"v", partition=0)
    assert plain.flush(10) == 0
    assert values(f"127.0.0.1:1, {broker.bootstrap_servers}", topic_name, 0) == [b"v"]


def test_unknown_topic_is_an_error(broker: RunningBroker, topic_name: str) -> None:
    with pytest.raises(EosError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        read_partition(broker.bootstrap_servers, topic_name, 0, timeout=5)


# --- against confluent-kafka's consumer -------------------------------------------------------




def test_confluent_delivers_aborted_records_on_tansu_and_we_do_not(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # BROKERS.md: Tansu sends no aborted-transactions index, and index-only clients (librdkafka,
    # kafka-python, Java) deliver aborted records there. This test keeps that fact visible.
    write_abort_then_commit(broker, topic_name, unique_name("txn"))
    assert values(broker.bootstrap_servers, topic_name, 0) == COMMITTED
    theirs = confluent_read(broker, topic_name, 0)
    if broker.kind == "tansu":
        assert theirs == ABORTED + COMMITTED  # confluent-kafka is wrong on Tansu
    else:
        assert theirs == COMMITTED


def test_confluent_started_past_an_abort_loses_committed_records_on_noida(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # Found here, not in BROKERS.md: noida-db lists every aborted transaction of the partition in
    # every Fetch, even ones that ended before the fetch offset. An index-only reader starting at
    # offset 4 (a consumer resuming from a committed offset) takes the producer's next
    # transaction for the aborted one and drops it. eosclient waits for that producer's marker.
    write_abort_then_commit(broker, topic_name, unique_name("txn"))
    assert values(broker.bootstrap_servers, topic_name, 0, start=4) == COMMITTED
    theirs = confluent_read(broker, topic_name, 4)
    if broker.kind == "noida":
        assert theirs == []  # confluent-kafka loses the committed records on noida-db
    else:
        assert theirs == COMMITTED
