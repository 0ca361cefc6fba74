"""eosclient.Admin against both brokers: topics, offsets, group lag, and the KIP-664 calls where
the broker has them (noida-db: ListTransactions, DescribeTransactions, DescribeProducers; Tansu
none; neither WriteTxnMarkers)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from eosclient import (
    Admin,
    AllBrokersDownError,
    EosError,
    EpochBumpRequiredError,
    FencedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    ReadCommittedConsumer,
    TopicPartition,
    TransactionalProducer,
    UnsupportedVersionError,
)
from eosclient.testing.brokers import RunningBroker

pytestmark = pytest.mark.broker


@pytest.fixture
def admin(broker: RunningBroker) -> Iterator[Admin]:
    with Admin(broker.bootstrap_servers, config={"default.api.timeout.ms": 20_000}) as client:
        yield client


def hang(broker: RunningBroker, topic: str, txn_id: str) -> TransactionalProducer:
    """One committed record in each of partitions 0 and 1, then a transaction left open in 0."""
    producer = TransactionalProducer(broker.bootstrap_servers, transactional_id=txn_id)
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.send(topic, b"a", partition=0)
    producer.send(topic, b"b", partition=1)
    producer.commit_transaction(15)
    producer.begin_transaction()
    producer.send(topic, b"open", partition=0)
    producer.flush(15)
    return producer


def test_topics_create_describe_list_delete(admin: Admin, topic_name: str) -> None:
    assert admin.create_topic(topic_name, 3) is True
    (described,) = admin.describe_topics([topic_name])
    assert [p.partition for p in described.partitions] == [0, 1, 2]
    assert all(p.leader is not None for p in described.partitions)
    assert topic_name in admin.list_topics()
    with pytest.raises(EosError, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topic(topic_name, 3)
    # There was no if-not-exists: docs/cli.md's Admin block failed after the README's
    # quickstart had made "orders". The existing topic is left as it is.
    assert admin.create_topic(topic_name, 5, if_not_exists=True) is False
    assert len(admin.describe_topics([topic_name])[0].partitions) == 3
    admin.delete_topic(topic_name)
    assert topic_name not in admin.list_topics()
    started = time.monotonic()
    with pytest.raises(EosError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        admin.delete_topic(topic_name)
    assert time.monotonic() - started < 5  # not retried until the timeout


def test_describe_a_missing_topic_names_it(admin: Admin, unique_name: Callable[[str], str]) -> None:
    missing = unique_name("missing")
    with pytest.raises(EosError, match=f"UNKNOWN_TOPIC_OR_PARTITION.*{missing}"):
        admin.describe_topics([missing])


def test_list_offsets_end_is_the_lso(broker: RunningBroker, admin: Admin, topic_name: str,
                                     unique_name: Callable[[str], str]) -> None:
    admin.create_topic(topic_name, 2)
    producer = hang(broker, topic_name, unique_name("t"))
    try:
        tps = [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]
        assert admin.list_offsets(tps, "earliest") == dict.fromkeys(tps, 0)
        # The committed record and its COMMIT marker: the open transaction's record is past it.
        assert admin.list_offsets(tps) == dict.fromkeys(tps, 2)
        assert admin.list_offsets(tps, isolation_level="read_uncommitted")[tps[0]] == 3
        assert admin.list_offsets(tps, 0) == dict.fromkeys(tps, 0)
        # Past the newest record Kafka and noida-db answer -1 (None); Tansu answers 0.
        future = admin.list_offsets(tps, int(time.time() * 1000) + 3_600_000)
        assert future == dict.fromkeys(tps, 0 if broker.kind == "tansu" else None)
    finally:
        producer.abort_transaction(15)
        producer.close()


def test_group_lag_is_measured_against_the_lso(broker: RunningBroker, admin: Admin,
                                               topic_name: str,
                                               unique_name: Callable[[str], str]) -> None:
    admin.create_topic(topic_name, 2)
    producer = hang(broker, topic_name, unique_name("t"))
    group = unique_name("g")
    tps = [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]
    try:
        with ReadCommittedConsumer(broker.bootstrap_servers, group_id=group) as consumer:
            consumer.assign(tps)
            consumer.commit({tps[0]: 0, tps[1]: 1}, timeout=15)
        assert group in [g.group_id for g in admin.list_groups()]
        described = admin.describe_group(group)
        assert described.group_id == group
        # LSO 2 in both (the open transaction's record in partition 0 does not count).
        assert {tp: (lag.committed, lag.last_stable_offset, lag.lag)
                for tp, lag in described.offsets.items()} == {tps[0]: (0, 2, 2),
                                                              tps[1]: (1, 2, 1)}
        assert described.total_lag == 3
    finally:
        producer.abort_transaction(15)
        producer.close()


def test_force_terminate_aborts_and_fences(broker: RunningBroker, admin: Admin, topic_name: str,
                                           unique_name: Callable[[str], str]) -> None:
    admin.create_topic(topic_name, 2)
    txn_id = unique_name("t")
    producer = hang(broker, topic_name, txn_id)
    tp = TopicPartition(topic_name, 0)
    try:
        assert admin.list_offsets([tp]) == {tp: 2}
        admin.force_terminate_transaction(txn_id)
        # The open record and its ABORT marker are now below the LSO: nothing holds readers back.
        assert admin.list_offsets([tp]) == {tp: 4}
        # Tansu answers PRODUCER_FENCED; noida-db INVALID_PRODUCER_EPOCH (47) on Produce, which
        # is abortable there (KIP-588) and fenced on EndTxn (BROKERS.md).
        fenced = FencedError if broker.kind == "tansu" else EpochBumpRequiredError
        with pytest.raises(fenced):
            producer.send(topic_name, b"late", partition=0)
            producer.commit_transaction(15)
    finally:
        producer.close()
    with ReadCommittedConsumer(broker.bootstrap_servers, auto_offset_reset="earliest") as reader:
        reader.assign([tp])
        values = []
        deadline = time.monotonic() + 15
        while reader.position(tp) < 4 and time.monotonic() < deadline:
            values += [r.value for r in reader.poll(0.5)]
    assert values == [b"a"]


def test_kip664_on_noida(noida_broker: RunningBroker, topic_name: str,
                         unique_name: Callable[[str], str]) -> None:
    with Admin(noida_broker.bootstrap_servers) as admin:
        kip664(noida_broker, admin, topic_name, unique_name)


def kip664(broker: RunningBroker, admin: Admin, topic_name: str,
           unique_name: Callable[[str], str]) -> None:
    admin.create_topic(topic_name, 2)
    txn_id = unique_name("t")
    producer = hang(broker, topic_name, txn_id)
    # Another transaction left open, elsewhere: --topic must keep it out (it used to be in).
    other_topic, other_id = unique_name("other"), unique_name("t")
    admin.create_topic(other_topic, 2)
    other = hang(broker, other_topic, other_id)
    tp = TopicPartition(topic_name, 0)
    try:
        everywhere = admin.find_hanging_transactions(max_open_ms=0)
        assert {txn_id, other_id} <= {h.transactional_id for h in everywhere}
        listed = {t.transactional_id: t for t in admin.list_transactions()}
        assert listed[txn_id].state == "Ongoing"
        assert [t.transactional_id for t in admin.list_transactions(states=["Ongoing"])
                if t.transactional_id == txn_id] == [txn_id]
        (described,) = admin.describe_transactions([txn_id])
        assert (described.state, described.partitions) == ("Ongoing", (tp,))
        assert abs(described.start_time_ms - time.time() * 1000) < 60_000
        # noida-db answers DescribeProducers with no producers (BROKERS.md: not populated).
        assert admin.describe_producers([tp]) == {tp: []}
        hanging = admin.find_hanging_transactions(max_open_ms=0, topics=[topic_name])
        assert [(h.transactional_id, h.partition) for h in hanging] == [(txn_id, tp)]
        assert admin.find_hanging_transactions(max_open_ms=3_600_000, topics=[topic_name]) == []
        with pytest.raises(EosError, match="TRANSACTIONAL_ID_NOT_FOUND"):
            admin.describe_transactions([unique_name("unknown")])
        admin.force_terminate_transaction(txn_id)
        assert admin.find_hanging_transactions(max_open_ms=0, topics=[topic_name]) == []
        (after,) = admin.describe_transactions([txn_id])
        assert after.state != "Ongoing" and after.producer_epoch == described.producer_epoch + 1
    finally:
        producer.close()
        other.abort_transaction(15)
        other.close()


def test_unsupported_apis_fail_at_once_naming_the_api(broker: RunningBroker, admin: Admin,
                                                      topic_name: str) -> None:
    admin.create_topic(topic_name, 1)
    tp = TopicPartition(topic_name, 0)
    calls: list[tuple[str, Callable[[], object]]] = [
        ("WRITE_TXN_MARKERS", lambda: admin.abort_transaction(tp, 1000, 0, 0))]
    if broker.kind == "tansu":
        calls += [("LIST_TRANSACTIONS", admin.list_transactions),
                  ("DESCRIBE_TRANSACTIONS", lambda: admin.describe_transactions(["x"])),
                  ("DESCRIBE_PRODUCERS", lambda: admin.describe_producers([tp])),
                  ("LIST_TRANSACTIONS", admin.find_hanging_transactions)]
    for api, call in calls:
        started = time.monotonic()
        with pytest.raises(UnsupportedVersionError, match=api):
            call()
        assert time.monotonic() - started < 5, api


def test_an_unreachable_broker_fails_typed() -> None:
    # Connection refused is retried until the call's timeout, then raised as a timeout whose
    # cause says why; never a hang. A broker never reached is said at once (within ~1 s),
    # not at a long timeout.
    with Admin("127.0.0.1:1") as admin:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError) as raised:
            admin.list_topics(timeout=0.5)
        assert 0.4 < time.monotonic() - started < 5
        assert isinstance(raised.value.__cause__, KafkaConnectionError)
        started = time.monotonic()
        with pytest.raises(AllBrokersDownError, match=r"127\.0\.0\.1:1 ECONNREFUSED"):
            admin.list_topics(timeout=60)
        assert time.monotonic() - started < 5


def test_closed_admin_refuses_calls(broker: RunningBroker) -> None:
    admin = Admin(broker.bootstrap_servers)
    admin.close()
    admin.close()  # idempotent
    with pytest.raises(IllegalStateError):
        admin.list_topics(timeout=5)
