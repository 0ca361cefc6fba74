"""Round trips per transaction against real brokers, counted by the proxy in between.

A one-record transaction takes three rounds of requests without KIP-890 (register, produce,
end), with or without pre-registration, and with consumer offsets too; no request is retried
(neither broker answers CONCURRENT_TRANSACTIONS after EndTxn in this shape). A round is the
requests that are at the proxy at the same time: the spans from a request's arrival to its
answer's delivery, merged where they overlap. The proxy adds latency, so requests sent together
overlap and requests that wait for an answer cannot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from eosclient import TopicPartition, TransactionalProducer
from eosclient.errors import ApiKey
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.proxy import KafkaProxy, Timing

pytestmark = pytest.mark.broker

TIMEOUT = 15.0
LATENCY = 0.04  # each way: wide enough that requests sent together overlap, also under load
TRANSACTIONS = 5
GROUP = "copier"


@pytest.fixture
def slow_proxy(broker: RunningBroker) -> Iterator[KafkaProxy]:
    with KafkaProxy(broker.host, broker.port, latency=LATENCY) as proxy:
        yield proxy


@pytest.fixture
def producer(broker: RunningBroker, slow_proxy: KafkaProxy,
             unique_name: Callable[[str], str]) -> Iterator[TransactionalProducer]:
    made = TransactionalProducer(slow_proxy.bootstrap_servers,
                                 transactional_id=unique_name("txn"), config={"linger.ms": 0})
    made.init_transactions(TIMEOUT)
    yield made
    made.close(5)


def rounds(timings: list[Timing]) -> int:
    """How many rounds the requests took: their spans, merged where they overlap."""
    spans = sorted((t.arrived, t.delivered) for t in timings if t.delivered is not None)
    assert len(spans) == len(timings), "a request was not answered"
    merged = 0
    end = float("-inf")
    for start, stop in spans:
        if start > end:
            merged += 1
        end = max(end, stop)
    return merged


def timed(proxy: KafkaProxy, transaction: Callable[[int], None]) -> list[Timing]:
    """Run one untimed transaction (lookups, metadata), then TRANSACTIONS counted ones."""
    transaction(0)
    proxy.take_timings()
    for n in range(1, TRANSACTIONS + 1):
        transaction(n)
    return proxy.take_timings()


def apis(timings: list[Timing]) -> Counter[ApiKey]:
    return Counter(ApiKey(t.api_key) for t in timings)


def assert_waits(timings: list[Timing]) -> None:
    """Each transaction's Produce left after its registration's answer, and its EndTxn after
    every answer of the transaction (KAFKA-14053): what the round count cannot show when the
    application's calls come late enough for independent requests to miss each other."""
    since: list[Timing] = []
    for t in sorted(timings, key=lambda t: t.arrived):
        api = ApiKey(t.api_key)
        if api is ApiKey.END_TXN:
            assert all(o.delivered is not None and o.delivered <= t.arrived for o in since)
            since = []
            continue
        if api is ApiKey.PRODUCE:
            registered = [o for o in since if o.api_key == ApiKey.ADD_PARTITIONS_TO_TXN]
            assert all(o.delivered is not None and o.delivered <= t.arrived for o in registered)
        since.append(t)


@pytest.mark.parametrize("preregister", [False, True], ids=["lazy", "pre-registered"])
def test_a_one_record_transaction_takes_three_rounds(
        broker: RunningBroker, slow_proxy: KafkaProxy, producer: TransactionalProducer,
        unique_name: Callable[[str], str], preregister: bool) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 2)

    def transaction(n: int) -> None:
        tp = TopicPartition(topic, n % 2)
        producer.begin_transaction(partitions=[tp] if preregister else None)
        producer.send(topic, b"one", partition=tp.partition)
        producer.commit_transaction(TIMEOUT)

    timings = timed(slow_proxy, transaction)
    each = {ApiKey.ADD_PARTITIONS_TO_TXN: TRANSACTIONS, ApiKey.PRODUCE: TRANSACTIONS,
            ApiKey.END_TXN: TRANSACTIONS}
    assert apis(timings) == each  # nothing retried, nothing else asked
    assert rounds(timings) == 3 * TRANSACTIONS


def test_a_pre_registered_transaction_with_offsets_takes_three_rounds(
        broker: RunningBroker, slow_proxy: KafkaProxy, producer: TransactionalProducer,
        unique_name: Callable[[str], str]) -> None:
    topic = topics.create_topic(broker, unique_name("t"), 2)
    group = unique_name(GROUP)

    def transaction(n: int) -> None:
        tp = TopicPartition(topic, n % 2)
        producer.begin_transaction(partitions=[tp], group_id=group)
        producer.send(topic, b"one", partition=tp.partition)
        producer.send_offsets_to_transaction({TopicPartition("in", 0): n + 1}, group)
        producer.commit_transaction(TIMEOUT)

    timings = timed(slow_proxy, transaction)
    each = {ApiKey.ADD_PARTITIONS_TO_TXN: TRANSACTIONS, ApiKey.ADD_OFFSETS_TO_TXN: TRANSACTIONS,
            ApiKey.PRODUCE: TRANSACTIONS, ApiKey.TXN_OFFSET_COMMIT: TRANSACTIONS,
            ApiKey.END_TXN: TRANSACTIONS}
    assert apis(timings) == each
    # Three rounds; fewer when send_offsets_to_transaction() comes late enough (a loaded
    # machine) that AddOffsetsToTxn's answer is still on its way as the Produce leaves.
    assert rounds(timings) <= 3 * TRANSACTIONS
    assert_waits(timings)


def test_the_first_transaction_looks_the_group_coordinator_up_beside_its_registration(
        broker: RunningBroker, slow_proxy: KafkaProxy, producer: TransactionalProducer,
        unique_name: Callable[[str], str]) -> None:
    # The lookup used to follow AddOffsetsToTxn's answer: a fourth round in the first
    # transaction that commits offsets.
    topic = topics.create_topic(broker, unique_name("t"), 1)
    group = unique_name(GROUP)
    tp = TopicPartition(topic, 0)
    producer.begin_transaction(partitions=[tp])  # the topic's metadata, the registration
    producer.send(topic, b"warm", partition=0)
    producer.commit_transaction(TIMEOUT)
    slow_proxy.take_timings()
    producer.begin_transaction(partitions=[tp], group_id=group)
    producer.send(topic, b"one", partition=0)
    producer.send_offsets_to_transaction({TopicPartition("in", 0): 1}, group)
    producer.commit_transaction(TIMEOUT)
    timings = slow_proxy.take_timings()
    assert apis(timings)[ApiKey.FIND_COORDINATOR] == 1
    assert rounds(timings) <= 3  # (fewer: as in the test before)
    assert_waits(timings)
