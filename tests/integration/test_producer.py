"""TransactionalProducer against real brokers: noida-db and Tansu, each test on both.

What is read back, and how: on noida-db, confluent-kafka's read_committed consumer (assign(), never
subscribe()). On Tansu that consumer delivers aborted records (no aborted-transactions index), so
the log itself is read with a raw read_uncommitted Fetch and decoded with kafka-python: every
transactional data batch must be followed by its producer's COMMIT or ABORT control batch. The
raw log check runs on both brokers; it is the stricter one (it also sees duplicates).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, NamedTuple

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentTP
from kafka.protocol.consumer import FetchRequest, OffsetFetchRequest
from kafka.record.memory_records import MemoryRecords

from eosclient import (
    AbortableError,
    ConfigError,
    ConsumerGroupMetadata,
    FencedError,
    IllegalStateError,
    InvalidGroupIdError,
    KafkaTimeoutError,
    RecordMetadata,
    RecordTooLargeError,
    RecordTypeError,
    TopicPartition,
    TransactionalProducer,
    UnknownPartitionError,
)
from eosclient._net.blocking import BlockingConnection
from eosclient.errors import ApiKey
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.proxy import Delay, DropResponse, KafkaProxy, Rule

pytestmark = pytest.mark.broker

TIMEOUT = 15.0
PARTITIONS = 4


# -- helpers ----------------------------------------------------------------------------------


class Batch(NamedTuple):
    """One record batch of the log, as a read_uncommitted Fetch returns it."""

    base_offset: int
    producer_id: int
    epoch: int
    transactional: bool
    control: str | None  # "commit" or "abort" for a control batch
    values: list[bytes]


def create_topic(broker: RunningBroker, name: str, partitions: int = PARTITIONS) -> str:
    return topics.create_topic(broker, name, partitions)


def read_log(host: str, port: int, topic: str, partition: int) -> list[Batch]:
    """Every batch of one partition, read_uncommitted, control batches included."""
    batches: list[Batch] = []
    offset = 0
    with BlockingConnection(host, port) as conn:
        while True:
            response = conn.request(_fetch(topic, partition, offset, wait=False))
            if not response.responses:  # Tansu answers nothing unless asked to wait for data
                response = conn.request(_fetch(topic, partition, offset, wait=True))
            if not response.responses:
                return batches
            part = response.responses[0].partitions[0]
            assert part.error_code == 0, part
            records = MemoryRecords(bytes(part.records or b""))
            before = len(batches)
            while (batch := records.next_batch()) is not None:
                batches.append(_batch(batch))
                offset = batch.next_offset
            if len(batches) == before or offset >= part.high_watermark:
                return batches


def _fetch(topic: str, partition: int, offset: int, *, wait: bool) -> Any:
    topic_cls = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1, max_wait_ms=200 if wait else 0, min_bytes=1 if wait else 0,
        max_bytes=50 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        forgotten_topics_data=[], rack_id="",
        topics=[topic_cls(topic=topic, partitions=[topic_cls.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=10 << 20)])])


def _batch(batch: Any) -> Batch:
    records = list(batch)
    control = None
    if batch.is_control_batch:
        control = "commit" if records[0].commit else "abort"
    values = [] if control else [bytes(r.value) for r in records]
    return Batch(batch.base_offset, batch.producer_id, batch.producer_epoch,
                 batch.is_transactional, control, values)


def outcome(batches: list[Batch]) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """(committed, aborted, still open) values, decided by the control markers alone."""
    pending: dict[int, list[bytes]] = {}
    committed: list[bytes] = []
    aborted: list[bytes] = []
    for batch in batches:
        if batch.control is not None:
            values = pending.pop(batch.producer_id, [])
            (committed if batch.control == "commit" else aborted).extend(values)
        elif batch.transactional:
            pending.setdefault(batch.producer_id, []).extend(batch.values)
        else:
            committed.extend(batch.values)
    return committed, aborted, [v for vs in pending.values() for v in vs]


def log_outcome(broker: RunningBroker, topic: str,
                partitions: int = PARTITIONS) -> tuple[list[bytes], list[bytes], list[bytes]]:
    parts = [outcome(read_log(broker.host, broker.port, topic, p)) for p in range(partitions)]
    return tuple(sorted(v for part in parts for v in part[i]) for i in range(3))  # type: ignore[return-value]


def read_committed(broker: RunningBroker, topic: str, partitions: int = PARTITIONS) -> list[bytes]:
    """confluent-kafka's read_committed view of the topic, read up to the end of the log."""
    ends = {p: (read_log(broker.host, broker.port, topic, p) or [None])[-1] for p in
            range(partitions)}
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": False})
    tps = [ConfluentTP(topic, p, 0) for p in range(partitions)]
    consumer.assign(tps)
    wanted = {p: (b.base_offset + 1 if b else 0) for p, b in ends.items()}  # past the last batch
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                values.append(message.value())
            positions = consumer.position([ConfluentTP(topic, p) for p in range(partitions)])
            if all(tp.offset >= wanted[tp.partition] for tp in positions):
                break
    finally:
        consumer.close()
    return sorted(values)


def committed_offset(broker: RunningBroker, group: str, tp: TopicPartition) -> int:
    """The group's committed offset for ``tp`` (OffsetFetch v7, require_stable); -1 if none."""
    request = OffsetFetchRequest(group_id=group, require_stable=True, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=tp.topic,
                                                   partition_indexes=[tp.partition])])
    with BlockingConnection(broker.host, broker.port) as conn:
        response = conn.request(request, version=7)
    [part] = response.topics[0].partitions
    assert part.error_code == 0, part
    offset: int = part.committed_offset
    return offset


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


@pytest.fixture
def make_producer() -> Iterator[Callable[..., TransactionalProducer]]:
    made: list[TransactionalProducer] = []

    def make(servers: str, txn_id: str | None = None, **config: Any) -> TransactionalProducer:
        made.append(TransactionalProducer(servers, transactional_id=txn_id, config=config))
        return made[-1]

    yield make
    for producer in made:
        producer.close(5)


# -- transactions -----------------------------------------------------------------------------


def test_commit_abort_commit_reads_back_exactly_the_committed_records(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    topic = create_topic(broker, unique_name("t"))
    producer = make_producer(broker.bootstrap_servers, unique_name("txn"))
    producer.init_transactions(TIMEOUT)
    written: dict[str, list[bytes]] = {}
    for name, commit in (("first", True), ("second", False), ("third", True)):
        written[name] = values(name, 40)
        producer.begin_transaction()
        futures = [producer.send(topic, v, key=v) for v in written[name]]
        producer.flush(TIMEOUT)  # on the broker's log before the decision
        assert all(f.result(TIMEOUT).offset >= 0 for f in futures)
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT)
    committed, aborted, still_open = log_outcome(broker, topic)
    assert committed == sorted(written["first"] + written["third"])
    assert aborted == sorted(written["second"])
    assert still_open == []
    if broker.kind == "noida":  # confluent's read_committed is right only where the index is
        assert read_committed(broker, topic) == committed


def test_offsets_move_with_the_transaction_that_commits_them(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    topic, group = create_topic(broker, unique_name("t")), unique_name("group")
    source = TopicPartition(create_topic(broker, unique_name("in"), 1), 0)
    producer = make_producer(broker.bootstrap_servers, unique_name("txn"))
    producer.init_transactions(TIMEOUT)
    member = ConsumerGroupMetadata(group)  # no generation: the coordinator checks nothing more
    for offset, commit in ((10, True), (20, False), (30, True), (40, False)):
        producer.begin_transaction(group_id=group if offset > 20 else None)
        producer.send(topic, b"%d" % offset, partition=0)
        producer.send_offsets_to_transaction({source: offset}, member if commit else group)
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT)
        assert committed_offset(broker, group, source) == (offset if commit else offset - 10)
    assert log_outcome(broker, topic)[0] == [b"10", b"30"]


def test_second_instance_fences_the_first_which_never_commits(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    topic, txn_id = create_topic(broker, unique_name("t")), unique_name("txn")
    zombie = make_producer(broker.bootstrap_servers, txn_id)
    zombie.init_transactions(TIMEOUT)
    zombie.begin_transaction()
    zombie.send(topic, b"zombie-1", partition=0)
    zombie.flush(TIMEOUT)
    owner = make_producer(broker.bootstrap_servers, txn_id)
    owner.init_transactions(TIMEOUT)  # bumps the epoch: the zombie is fenced
    zombie.send(topic, b"zombie-2", partition=0)
    if broker.kind == "tansu":  # Tansu answers the stale epoch's Produce with PRODUCER_FENCED
        with pytest.raises(FencedError):
            zombie.commit_transaction(TIMEOUT)
    else:  # noida-db answers 47 everywhere: on Produce that is abortable (KIP-588) ...
        with pytest.raises(AbortableError):
            zombie.commit_transaction(TIMEOUT)
        with pytest.raises(FencedError):  # ... and on EndTxn it is fenced
            zombie.abort_transaction(TIMEOUT)
    for call in (zombie.commit_transaction, zombie.abort_transaction, zombie.begin_transaction,
                 lambda: zombie.send(topic, b"zombie-3", partition=0)):
        with pytest.raises(FencedError):
            call()
    with owner.transaction():
        owner.send(topic, b"owner", partition=0)
    committed, _, still_open = log_outcome(broker, topic)
    assert committed == [b"owner"]
    assert b"zombie-2" not in committed + still_open


def test_preregistration_guards_fail_locally_without_broker_traffic(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    topic = create_topic(broker, unique_name("t"))
    with KafkaProxy(broker.host, broker.port) as proxy:
        producer = make_producer(proxy.bootstrap_servers, unique_name("txn"))
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction(partitions=[TopicPartition(topic, 0)], group_id="copier")
        producer.send(topic, b"declared", partition=0).result(TIMEOUT)  # registration done
        seen = len(proxy.seen)
        with pytest.raises(UnknownPartitionError):
            producer.send(topic, b"undeclared", partition=1)
        with pytest.raises(UnknownPartitionError):
            producer.send_batch(topic, [b"undeclared"], partition=2)
        with pytest.raises(InvalidGroupIdError):
            producer.send_offsets_to_transaction({TopicPartition("in", 0): 1}, "other-group")
        assert proxy.seen[seen:] == []
        producer.send_offsets_to_transaction({TopicPartition("in", 0): 1}, "copier")
        producer.commit_transaction(TIMEOUT)
        apis = [ApiKey(s.api_key) for s in proxy.seen]
    assert apis.count(ApiKey.ADD_PARTITIONS_TO_TXN) == 1  # the one pre-registration
    assert apis.count(ApiKey.ADD_OFFSETS_TO_TXN) == 1
    assert log_outcome(broker, topic)[0] == [b"declared"]


def test_transaction_block_commits_on_success_and_aborts_on_exception(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    topic = create_topic(broker, unique_name("t"))
    producer = make_producer(broker.bootstrap_servers, unique_name("txn"))
    producer.init_transactions(TIMEOUT)
    with producer.transaction(partitions=[TopicPartition(topic, 1)]):
        producer.send(topic, b"kept", partition=1)
    with pytest.raises(ZeroDivisionError), producer.transaction():
        producer.send(topic, b"dropped", partition=1)
        producer.flush(TIMEOUT)
        _ = 1 / 0
    with producer.transaction():  # the producer is usable again
        producer.send(topic, b"kept-too", partition=1)
    committed, aborted, still_open = log_outcome(broker, topic)
    assert (committed, aborted, still_open) == ([b"kept", b"kept-too"], [b"dropped"], [])


def test_bad_input_is_rejected_before_anything_is_queued(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    topic = create_topic(broker, unique_name("t"))
    with pytest.raises(ConfigError, match=r"did you mean 'linger\.ms'"):
        make_producer(broker.bootstrap_servers, "x", **{"linger.mss": 5})
    producer = make_producer(broker.bootstrap_servers, unique_name("txn"),
                             **{"max.request.size": 10_000})
    with pytest.raises(IllegalStateError):  # not initialised
        producer.send(topic, b"v")
    producer.init_transactions(TIMEOUT)
    with pytest.raises(IllegalStateError):  # no transaction open
        producer.send(topic, b"v")
    producer.begin_transaction()
    for bad in (lambda: producer.send(topic, "text"), lambda: producer.send(topic, b"v", key=1),
                lambda: producer.send_batch(topic, [b"v", 2])):
        with pytest.raises(RecordTypeError):
            bad()
    with pytest.raises(RecordTooLargeError):
        producer.send(topic, b"x" * 20_000)
    producer.send(topic, b"good")  # keyless: waits for the topic's metadata
    with pytest.raises(UnknownPartitionError):
        producer.send(topic, b"v", partition=PARTITIONS)  # known now: 4 partitions
    producer.commit_transaction(TIMEOUT)
    producer.close(TIMEOUT)
    with pytest.raises(IllegalStateError):
        producer.send(topic, b"v")
    assert log_outcome(broker, topic)[0] == [b"good"]


def test_a_partition_beyond_the_topic_fails_the_first_send_and_loses_nothing(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    """The first record of a topic with an explicit partition waits for the topic's metadata,
    so a partition that does not exist is refused at send(), not queued to expire, and the
    transaction goes on."""
    topic = create_topic(broker, unique_name("t"))
    producer = make_producer(broker.bootstrap_servers, unique_name("txn"))
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    with pytest.raises(UnknownPartitionError, match=f"has {PARTITIONS} partitions"):
        producer.send(topic, b"nowhere", partition=PARTITIONS)
    producer.send(topic, b"kept", partition=0)
    producer.commit_transaction(TIMEOUT)
    assert log_outcome(broker, topic)[0] == [b"kept"]


def test_send_waits_while_buffer_memory_is_held_and_times_out_queueing_nothing(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    """buffer.memory = one batch: the second send() waits for the first batch's answer; with
    that answer held past max.block.ms it raises, and its record is not queued."""
    topic = create_topic(broker, unique_name("t"))
    with KafkaProxy(broker.host, broker.port) as proxy:
        producer = make_producer(proxy.bootstrap_servers, unique_name("txn"),
                                 **{"batch.size": 1000, "buffer.memory": 1000, "linger.ms": 0,
                                    "max.block.ms": 1000})
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        proxy.add_rule(Rule(action=Delay(2.5, "response"), api_key=ApiKey.PRODUCE))
        first = producer.send(topic, b"first", partition=0)
        with pytest.raises(KafkaTimeoutError, match=r"buffer\.memory"):
            producer.send(topic, b"refused", partition=0)
        first.result(TIMEOUT)
        proxy.add_rule(Rule(action=Delay(0.3, "response"), api_key=ApiKey.PRODUCE))
        producer.send(topic, b"second", partition=0)
        producer.send(topic, b"third", partition=0).result(TIMEOUT)  # waited for "second"
        producer.commit_transaction(TIMEOUT)
    assert log_outcome(broker, topic)[0] == [b"first", b"second", b"third"]


def test_idempotent_producer_has_no_transactions(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    topic = create_topic(broker, unique_name("t"))
    producer = make_producer(broker.bootstrap_servers)
    futures = [producer.send(topic, v, key=v) for v in values("idem", 200)]
    futures.append(producer.send_batch(topic, values("bulk", 300)))  # type: ignore[arg-type]
    producer.flush(TIMEOUT)
    assert all(f.exception(TIMEOUT) is None for f in futures)
    with pytest.raises(IllegalStateError, match="transactional_id"):
        producer.begin_transaction()
    batches = [b for p in range(PARTITIONS) for b in read_log(broker.host, broker.port, topic, p)]
    assert not any(b.transactional for b in batches)
    assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
    assert log_outcome(broker, topic)[0] == sorted(values("idem", 200) + values("bulk", 300))


def test_threads_share_one_transaction_and_callbacks_may_call_the_producer(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    topic = create_topic(broker, unique_name("t"))
    producer = make_producer(broker.bootstrap_servers, unique_name("txn"))
    producer.init_transactions(TIMEOUT)
    chained: list[Future[RecordMetadata]] = []
    sent = threading.Event()

    def follow_up(future: Future[RecordMetadata]) -> None:  # runs in the I/O thread, unlocked
        chained.append(producer.send(topic, b"chained-" + future.result().topic.encode()[:1]))
        sent.set()

    def worker(name: str) -> None:
        for value in values(name, 300):
            producer.send(topic, value, key=value)

    producer.begin_transaction()
    producer.send(topic, b"first").add_done_callback(follow_up)
    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert sent.wait(TIMEOUT)  # a deadlock (callback under the lock) would fail here
    producer.commit_transaction(TIMEOUT)
    assert chained and chained[0].result(TIMEOUT).offset >= 0
    workers = [v for i in range(4) for v in values(f"w{i}", 300)]
    expected = sorted([b"first", b"chained-t", *workers])
    assert log_outcome(broker, topic)[0] == expected


_HALF_TRANSACTION = textwrap.dedent("""
    import sys, time
    from eosclient import TransactionalProducer
    servers, txn_id, topic = sys.argv[1:4]
    producer = TransactionalProducer(servers, transactional_id=txn_id)
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(50):
        producer.send(topic, b"half-%d" % i, partition=i % 4)
    producer.flush(15)
    print("flushed", flush=True)
    time.sleep(60)
""")


def test_sigkilled_producer_half_transaction_is_aborted_by_the_next_init(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    topic, txn_id = create_topic(broker, unique_name("t")), unique_name("txn")
    child = subprocess.Popen(
        [sys.executable, "-c", _HALF_TRANSACTION, broker.bootstrap_servers, txn_id, topic],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "flushed"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(TIMEOUT)
    assert len(log_outcome(broker, topic)[2]) == 50  # open: the child never ended it
    heir = make_producer(broker.bootstrap_servers, txn_id)
    heir.init_transactions(TIMEOUT)
    with heir.transaction():
        heir.send(topic, b"heir", partition=0)
    committed, aborted, still_open = log_outcome(broker, topic)
    assert committed == [b"heir"]
    assert len(aborted) == 50 and still_open == []
    if broker.kind == "noida":
        assert read_committed(broker, topic) == [b"heir"]


def test_init_times_out_then_resumes(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    with KafkaProxy(broker.host, broker.port) as proxy:
        rule = proxy.add_rule(Rule(api_key=ApiKey.INIT_PRODUCER_ID, action=DropResponse()))
        producer = make_producer(proxy.bootstrap_servers, unique_name("txn"),
                                 **{"request.timeout.ms": 1_000,
                                    "delivery.timeout.ms": 5_000})
        with pytest.raises(KafkaTimeoutError, match="init_transactions"):
            producer.init_transactions(0.5)
        assert rule.fired == 1
        producer.init_transactions(TIMEOUT)  # the lost answer's request is sent again
        topic = create_topic(broker, unique_name("t"))
        with producer.transaction():
            producer.send(topic, b"after", partition=0)
    assert log_outcome(broker, topic)[0] == [b"after"]


def test_blocking_calls_from_a_delivery_callback_fail_fast(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    # A flush() or commit from a callback made the I/O thread wait for itself until the call's
    # timeout, stalling every other record; now it is refused at once.
    topic = create_topic(broker, unique_name("t"))
    producer = make_producer(broker.bootstrap_servers, unique_name("txn"))
    producer.init_transactions(TIMEOUT)
    caught: list[BaseException] = []
    done = threading.Event()

    def blocking_calls(_: Future[RecordMetadata]) -> None:
        for call in (producer.flush, producer.commit_transaction):
            try:
                call(TIMEOUT)
            except BaseException as exc:
                caught.append(exc)
        done.set()

    producer.begin_transaction()
    producer.send(topic, b"v").add_done_callback(blocking_calls)
    assert done.wait(TIMEOUT)
    assert [type(exc) for exc in caught] == [IllegalStateError, IllegalStateError], caught
    assert "commit_transaction() cannot wait" in str(caught[1])
    producer.commit_transaction(TIMEOUT)
    assert log_outcome(broker, topic)[0] == [b"v"]
