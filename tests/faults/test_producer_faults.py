"""TransactionalProducer under injected faults: librdkafka's mock, and the proxy in front of
noida-db and Tansu.

Each injection is checked to have fired, so a test fails if its fault never happened. What ended
up in the log is read with a raw read_uncommitted Fetch and decided by the control markers
(COMMIT / ABORT batches), which works on all three brokers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.record.memory_records import MemoryRecords

from eosclient import (
    EpochBumpRequiredError,
    IllegalStateError,
    KafkaTimeoutError,
    TopicPartition,
    TransactionalProducer,
)
from eosclient._net.blocking import BlockingConnection
from eosclient.errors import ApiKey
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.mock import MockCluster
from eosclient.testing.proxy import Delay, DropResponse, ErrorResponse, KafkaProxy, Rule

TIMEOUT = 15.0
TOPIC = "out"
# Kafka error codes injected below.
MESSAGE_TOO_LARGE = 10
COORDINATOR_LOAD_IN_PROGRESS = 14
NOT_COORDINATOR = 16
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
CONCURRENT_TRANSACTIONS = 51
UNKNOWN_PRODUCER_ID = 59


class Batch(NamedTuple):
    producer_id: int
    epoch: int
    control: str | None  # "commit" / "abort" for a control batch
    values: list[bytes]


def read_log(address: tuple[str, int], topic: str, partition: int) -> list[Batch]:
    """Every batch of one partition (read_uncommitted), control batches included."""
    topic_cls = FetchRequest.FetchTopic
    batches: list[Batch] = []
    offset = 0
    with BlockingConnection(*address) as conn:
        while True:
            found = None
            for wait in (False, True):  # Tansu answers nothing unless asked to wait for data
                request = FetchRequest(
                    replica_id=-1, max_wait_ms=200 if wait else 0, min_bytes=int(wait),
                    max_bytes=50 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                    forgotten_topics_data=[], rack_id="",
                    topics=[topic_cls(topic=topic, partitions=[topic_cls.FetchPartition(
                        partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                        last_fetched_epoch=-1, log_start_offset=-1,
                        partition_max_bytes=10 << 20)])])
                found = found or conn.request(request).responses
            if not found:
                return batches
            part = found[0].partitions[0]
            records, before = MemoryRecords(bytes(part.records or b"")), len(batches)
            while (batch := records.next_batch()) is not None:
                items = list(batch)
                control = ("commit" if items[0].commit else "abort") if \
                    batch.is_control_batch else None
                values = [] if control else [bytes(r.value) for r in items]
                batches.append(Batch(batch.producer_id, batch.producer_epoch, control, values))
                offset = batch.next_offset
            if len(batches) == before or offset >= part.high_watermark:
                return batches


def decided(batches: list[Batch]) -> tuple[list[bytes], list[bytes]]:
    """(committed, aborted) values, by the markers; values of open transactions in neither."""
    pending: dict[int, list[bytes]] = {}
    committed: list[bytes] = []
    aborted: list[bytes] = []
    for batch in batches:
        if batch.control is None:
            pending.setdefault(batch.producer_id, []).extend(batch.values)
        else:
            values = pending.pop(batch.producer_id, [])
            (committed if batch.control == "commit" else aborted).extend(values)
    return committed, aborted


def create_topic(broker: RunningBroker, name: str, partitions: int = 2) -> str:
    return topics.create_topic(broker, name, partitions)


@pytest.fixture
def make_producer() -> Iterator[Callable[..., TransactionalProducer]]:
    made: list[TransactionalProducer] = []

    def make(servers: str, txn_id: str | None, **config: Any) -> TransactionalProducer:
        made.append(TransactionalProducer(servers, transactional_id=txn_id, config=config))
        return made[-1]

    yield make
    for producer in made:
        producer.close(5)


# -- KIP-360 on the mock ----------------------------------------------------------------------


@pytest.mark.mock
@pytest.mark.parametrize("code", [OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID,
                                  MESSAGE_TOO_LARGE])
def test_sequence_break_aborts_bumps_and_leaks_nothing_into_the_next_transaction(
        code: int, make_producer: Callable[..., TransactionalProducer]) -> None:
    # kafka-python 3.0.12 bumped at once and committed the failed transaction's queued
    # records in the next one, under the new epoch.
    with MockCluster(1, topics={TOPIC: 2}) as cluster:
        host, port = cluster.bootstrap_servers.split(",")[0].split(":")
        # One record per batch, one batch in flight per partition: when the first lost batch is
        # answered, the other four are still queued, unsent, in the failed transaction.
        producer = make_producer(cluster.bootstrap_servers, "txn", **{
            "batch.size": 1, "max.in.flight.requests.per.connection": 1, "linger.ms": 0})
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.send(TOPIC, b"failed-0", partition=0).result(TIMEOUT)
        producer.send(TOPIC, b"failed-1", partition=1).result(TIMEOUT)
        cluster.push_partition_errors(TOPIC, 0, ApiKey.PRODUCE, code)
        lost = [producer.send(TOPIC, b"lost-%d" % i, partition=0) for i in range(5)]
        producer.flush(TIMEOUT)  # returns once the transaction failed
        assert isinstance(lost[0].exception(TIMEOUT), EpochBumpRequiredError)
        with pytest.raises(EpochBumpRequiredError):
            producer.commit_transaction(TIMEOUT)
        with pytest.raises(EpochBumpRequiredError):
            producer.send(TOPIC, b"refused", partition=0)
        producer.abort_transaction(TIMEOUT)
        assert all(isinstance(f.exception(TIMEOUT), EpochBumpRequiredError) for f in lost)
        with producer.transaction():
            producer.send(TOPIC, b"next", partition=0)
            producer.send(TOPIC, b"next", partition=1)
        logs = [read_log((host, int(port)), TOPIC, p) for p in (0, 1)]
    batches = [b for log in logs for b in log]
    epochs = sorted({b.epoch for b in batches})
    assert len(epochs) == 2 and epochs[1] == epochs[0] + 1  # bumped once (KIP-360)
    assert [v for b in batches if b.epoch == epochs[1] for v in b.values] == [b"next", b"next"]
    committed, aborted = zip(*(decided(log) for log in logs), strict=True)
    assert sorted(v for part in committed for v in part) == [b"next", b"next"]
    assert sorted(v for part in aborted for v in part) == [b"failed-0", b"failed-1"]


# -- the proxy in front of noida-db and Tansu --------------------------------------------------


@pytest.mark.proxy
@pytest.mark.parametrize("code", [CONCURRENT_TRANSACTIONS, NOT_COORDINATOR,
                                  COORDINATOR_LOAD_IN_PROGRESS])
def test_coordinator_errors_are_retried_transparently(
        code: int, broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    topic, group = unique_name("t"), unique_name("group")
    create_topic(broker, topic)
    apis = (ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
            ApiKey.TXN_OFFSET_COMMIT, ApiKey.END_TXN)
    with KafkaProxy(broker.host, broker.port) as proxy:
        rules = [proxy.add_rule(Rule(api_key=api, action=ErrorResponse(code))) for api in apis]
        producer = make_producer(proxy.bootstrap_servers, unique_name("txn"),
                                 **{"retry.backoff.ms": 10, "retry.backoff.max.ms": 50})
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.send(topic, b"kept", partition=0)
        producer.send_offsets_to_transaction({TopicPartition("in", 0): 7}, group)
        producer.commit_transaction(TIMEOUT)
    assert [rule.fired for rule in rules] == [1] * len(apis)
    assert decided(read_log((broker.host, broker.port), topic, 0)) == ([b"kept"], [])


@pytest.mark.proxy
def test_lost_produce_response_is_retried_without_duplicates(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    topic = unique_name("t")
    create_topic(broker, topic)
    with KafkaProxy(broker.host, broker.port) as proxy:
        rule = proxy.add_rule(Rule(api_key=ApiKey.PRODUCE, nth=2, action=DropResponse()))
        producer = make_producer(proxy.bootstrap_servers, unique_name("txn"), **{
            "request.timeout.ms": 1_000, "batch.size": 200, "linger.ms": 0})
        producer.init_transactions(TIMEOUT)
        sent = [b"record-%02d" % i for i in range(30)]
        with producer.transaction():
            futures = [producer.send(topic, v, partition=0) for v in sent]
        assert all(f.exception(TIMEOUT) is None for f in futures)
        assert rule.fired == 1
        produces = sum(1 for seen in proxy.seen if seen.api_key == ApiKey.PRODUCE)
    batches = read_log((broker.host, broker.port), topic, 0)
    assert produces > sum(1 for b in batches if b.control is None)  # something was resent
    assert decided(batches) == (sent, [])  # ... and each record is in the log once, in order


@pytest.mark.proxy
def test_lost_end_txn_answer_is_resumed_and_commits_exactly_once(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    topic = unique_name("t")
    create_topic(broker, topic)
    with KafkaProxy(broker.host, broker.port) as proxy:
        producer = make_producer(proxy.bootstrap_servers, unique_name("txn"),
                                 **{"request.timeout.ms": 1_000})
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.send(topic, b"once", partition=0)
        producer.flush(TIMEOUT)
        rule = proxy.add_rule(Rule(api_key=ApiKey.END_TXN, action=DropResponse()))
        with pytest.raises(KafkaTimeoutError, match="commit_transaction"):
            producer.commit_transaction(0.3)  # the broker committed; the answer is lost
        assert rule.fired == 1
        with pytest.raises(IllegalStateError):  # outcome unknown: no new transaction yet
            producer.begin_transaction()
        producer.commit_transaction(TIMEOUT)  # resumes the same EndTxn(commit)
        with producer.transaction():
            producer.send(topic, b"after", partition=0)
    batches = read_log((broker.host, broker.port), topic, 0)
    assert decided(batches) == ([b"once", b"after"], [])
    assert [b.control for b in batches if b.control] == ["commit", "commit"]


@pytest.mark.proxy
def test_abort_waits_for_a_batch_due_for_resend_and_sends_it_first(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    # The core allowed no drain while aborting; a batch waiting for its resend then never went
    # out, and EndTxn(abort), which must follow every batch (KAFKA-14053), never did either.
    # Now the core's may_resend() lets exactly such resends out.
    topic = unique_name("t")
    create_topic(broker, topic)
    with KafkaProxy(broker.host, broker.port) as proxy:
        producer = make_producer(proxy.bootstrap_servers, unique_name("txn"), **{
            "retry.backoff.ms": 500, "retry.backoff.max.ms": 500})
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        rule = proxy.add_rule(Rule(api_key=ApiKey.PRODUCE, action=ErrorResponse(6)))
        future = producer.send(topic, b"resent-then-aborted", partition=0)
        resends = producer._sender.acc.sequences.partitions_with_resends  # read-only probe
        for _ in range(1_000):
            with producer._sender.lock:
                if resends():
                    break
            time.sleep(0.005)
        assert rule.fired == 1 and not future.done()  # NOT_LEADER: waiting to be resent
        producer.abort_transaction(TIMEOUT)
        assert future.exception(TIMEOUT) is None  # written by the resend, then aborted
    assert decided(read_log((broker.host, broker.port), topic, 0)) == (
        [], [b"resent-then-aborted"])


@pytest.mark.proxy
def test_batch_past_its_delivery_timeout_in_flight_makes_the_abort_bump_the_epoch(
        broker: RunningBroker, unique_name: Callable[[str], str],
        make_producer: Callable[..., TransactionalProducer]) -> None:
    # The unknown-outcome path of KIP-360, with the bump's fallback on Tansu (which answers the
    # InitProducerId(id, epoch) form with UNKNOWN_SERVER_ERROR).
    topic = unique_name("t")
    create_topic(broker, topic)
    with KafkaProxy(broker.host, broker.port) as proxy:
        producer = make_producer(proxy.bootstrap_servers, unique_name("txn"), **{
            "request.timeout.ms": 400, "delivery.timeout.ms": 500, "linger.ms": 0})
        producer.init_transactions(TIMEOUT)
        epoch = producer._sender.core.identity.epoch  # read-only probe
        producer.begin_transaction()
        rule = proxy.add_rule(Rule(api_key=ApiKey.PRODUCE, times=None,
                                   action=Delay(2.0, direction="response")))
        future = producer.send(topic, b"unsure", partition=0)
        assert isinstance(future.exception(TIMEOUT), EpochBumpRequiredError)
        proxy.clear_rules()
        with pytest.raises(EpochBumpRequiredError):
            producer.commit_transaction(TIMEOUT)
        producer.abort_transaction(TIMEOUT)
        assert producer._sender.core.identity.epoch > epoch
        assert rule.fired >= 1
        with producer.transaction():
            producer.send(topic, b"next", partition=0)
    # The first attempt was written (only its answer was held back), once, then aborted.
    assert decided(read_log((broker.host, broker.port), topic, 0)) == ([b"next"], [b"unsure"])
