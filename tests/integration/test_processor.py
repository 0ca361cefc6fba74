"""ExactlyOnceProcessor and AsyncExactlyOnceProcessor against real brokers, judged by the
checker (every count must be zero). Every scenario runs on both fronts (the ``front`` fixture):
they drive the same steps, so they must pass the same tests.

Group tests run on noida-db (its group join takes ~0.4 s); one simple copy runs on Tansu, which
holds each join for about half the session timeout (~23 s at the default 45 s; 6 s here).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from eosclient import (
    ConsumerRecord,
    ExactlyOnceProcessor,
    OutputRecord,
    ProcessorStats,
    ReadCommittedConsumer,
    TopicPartition,
    TransactionalProducer,
)
from eosclient.aio import AsyncExactlyOnceProcessor
from eosclient.errors import AbortableError, ApiKey
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import check
from eosclient.testing.proxy import ErrorResponse, KafkaProxy, RewriteError, Rule

pytestmark = pytest.mark.broker

PARTITIONS = 3
Names = Callable[[str], str]
AnyProcessor = ExactlyOnceProcessor | AsyncExactlyOnceProcessor


class Front:
    """Which processor runs a scenario: the sync one, or its asyncio twin (on a new loop)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cls: type[AnyProcessor] = (ExactlyOnceProcessor if name == "sync"
                                        else AsyncExactlyOnceProcessor)

    def run(self, copier: AnyProcessor, **limits: float | None) -> ProcessorStats:
        if isinstance(copier, ExactlyOnceProcessor):
            return copier.run(**limits)  # type: ignore[arg-type]
        return asyncio.run(copier.run(**limits))  # type: ignore[arg-type]


@pytest.fixture(params=["sync", "aio"])
def front(request: pytest.FixtureRequest) -> Front:
    return Front(request.param)


def create_topic(broker: RunningBroker, name: str, partitions: int = PARTITIONS) -> str:
    return topics.create_topic(broker, name, partitions)


def fill(broker: RunningBroker, unique_name: Names, count: int) -> tuple[str, str]:
    """A new input topic holding ``count`` records, and a new empty output topic."""
    source, sink = create_topic(broker, unique_name("in")), create_topic(broker, unique_name("out"))
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=unique_name("fill"),
                               linger_ms=5) as producer:
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.send_batch(source, [str(i).encode() for i in range(count)])
        producer.commit_transaction(15)
    return source, sink


def processor(front: Front, bootstrap: str, source: str, sink: str, unique_name: Names,
              **extra: object) -> AnyProcessor:
    options: dict = {"max_records_per_transaction": 50, "commit_interval_ms": 50,
                     "consumer_config": {"fetch.max.wait.ms": 100}, **extra}
    return front.cls(bootstrap_servers=bootstrap, input_topics=[source], output_topic=sink,
                     group_id=unique_name("g"), transactional_id=unique_name("t"), **options)


def test_copy_exactly_once(front: Front, noida_broker: RunningBroker, unique_name: Names) -> None:
    source, sink = fill(noida_broker, unique_name, 300)
    copier = processor(front, noida_broker.bootstrap_servers, source, sink, unique_name,
                       fn=lambda r: [(r.key, (r.value or b"") + b"!")])
    stats = front.run(copier, max_records=300, timeout=30)
    assert (stats.records_in, stats.records_out) == (300, 300)
    assert stats.transactions_committed >= 300 // 50 and stats.transactions_aborted == 0
    report = check(noida_broker.bootstrap_servers, source, sink)
    assert report.ok, str(report)


def test_batch_fn_and_stop_from_another_thread(front: Front, noida_broker: RunningBroker,
                                               unique_name: Names) -> None:
    source, sink = fill(noida_broker, unique_name, 100)

    def twice(records: list[ConsumerRecord]) -> list[OutputRecord]:
        return [OutputRecord(r.value, source=r) for r in records for _ in range(2)]

    copier = processor(front, noida_broker.bootstrap_servers, source, sink, unique_name,
                       batch_fn=twice)
    timer = threading.Timer(8, copier.stop)
    timer.start()
    try:
        stats = front.run(copier, idle_timeout=3)
    finally:
        timer.cancel()
    assert (stats.records_in, stats.records_out) == (100, 200)
    report = check(noida_broker.bootstrap_servers, source, sink)
    assert report.totals.duplicated == 100 and report.totals.lost == 0  # the fn doubled them


def test_a_failing_transform_aborts_and_propagates(front: Front, noida_broker: RunningBroker,
                                                   unique_name: Names) -> None:
    source, sink = fill(noida_broker, unique_name, 60)
    group, txn = unique_name("g"), unique_name("t")

    def explode(record: ConsumerRecord) -> list[tuple[bytes | None, bytes | None]]:
        if record.value == b"30":
            raise RuntimeError("boom")
        return [(record.key, record.value)]

    def make(fn: Callable[..., object] | None) -> AnyProcessor:
        return front.cls(
            bootstrap_servers=noida_broker.bootstrap_servers, input_topics=[source],
            output_topic=sink, group_id=group, transactional_id=txn, fn=fn,  # type: ignore[arg-type]
            max_records_per_transaction=10, consumer_config={"fetch.max.wait.ms": 100})

    with pytest.raises(RuntimeError, match="boom"):
        front.run(make(explode), timeout=20)
    front.run(make(None), idle_timeout=3, timeout=20)  # resumes from the committed offsets
    report = check(noida_broker.bootstrap_servers, source, sink)
    assert report.ok, str(report)


def test_an_abortable_commit_is_redone(front: Front, noida_broker: RunningBroker,
                                       unique_name: Names,
                                       caplog: pytest.LogCaptureFixture) -> None:
    source, sink = fill(noida_broker, unique_name, 200)
    with KafkaProxy(noida_broker.host, noida_broker.port) as proxy:
        # The broker stores the offsets; the client is told the transaction failed (abortable).
        proxy.add_rule(Rule(api_key=ApiKey.TXN_OFFSET_COMMIT, nth=2,
                            action=RewriteError(22)))  # ILLEGAL_GENERATION (KIP-447)
        copier = processor(front, proxy.bootstrap_servers, source, sink, unique_name)
        with caplog.at_level(logging.WARNING, "eosclient.processor"):
            stats = front.run(copier, max_records=200, timeout=30)
    assert stats.transactions_aborted == 1, caplog.text
    assert stats.records_in == 200
    report = check(noida_broker.bootstrap_servers, source, sink)
    assert report.ok, str(report)


def test_a_transaction_that_always_fails_gives_up_after_max_consecutive_aborts(
        front: Front, noida_broker: RunningBroker, unique_name: Names) -> None:
    source, sink = fill(noida_broker, unique_name, 20)
    with KafkaProxy(noida_broker.host, noida_broker.port) as proxy:
        # A record the broker always refuses: retrying cannot help.
        proxy.add_rule(Rule(api_key=ApiKey.PRODUCE, action=ErrorResponse(10),  # too large
                            times=None))
        copier = processor(front, proxy.bootstrap_servers, source, sink, unique_name,
                           max_consecutive_aborts=3)
        with pytest.raises(AbortableError, match="MESSAGE_SIZE_TOO_LARGE") as failed:
            front.run(copier, timeout=30)
    assert "3 transactions in a row were aborted" in "".join(failed.value.__notes__)
    stats = copier.stats
    assert (stats.transactions_aborted, stats.transactions_committed) == (3, 0)
    with ReadCommittedConsumer(noida_broker.bootstrap_servers, group_id=copier.group_id) as r:
        assert set(r.committed([TopicPartition(source, p) for p in range(PARTITIONS)],
                               15).values()) == {None}
    assert check(noida_broker.bootstrap_servers, source, sink).totals.lost == 20


@pytest.mark.parametrize("preregister", [False, True])
def test_transactions_after_an_abort_that_leave_its_partition_empty_commit(
        front: Front, noida_broker: RunningBroker, unique_name: Names, preregister: bool) -> None:
    """One input record per transaction, each output to partition (input offset % 3): after
    the 2nd transaction is aborted (its records written), later ones leave its partition
    empty. With every output partition registered at begin, noida-db used to turn that into
    FATAL (a half commit); the producer now registers that partition only with a record."""
    source, sink = fill(noida_broker, unique_name, 30)
    with KafkaProxy(noida_broker.host, noida_broker.port) as proxy:
        proxy.add_rule(Rule(api_key=ApiKey.TXN_OFFSET_COMMIT, nth=2,
                            action=RewriteError(22)))  # ILLEGAL_GENERATION, after the broker acted
        copier = processor(front, proxy.bootstrap_servers, source, sink, unique_name,
                           max_records_per_transaction=1, preregister_partitions=preregister,
                           fn=lambda r: [OutputRecord(r.value, partition=r.offset % PARTITIONS)])
        stats = front.run(copier, max_records=30, timeout=30)
    assert (stats.records_in, stats.transactions_aborted) == (30, 1)
    report = check(noida_broker.bootstrap_servers, source, sink)
    assert report.ok, str(report)


def test_killed_mid_run_then_restarted(front: Front, noida_broker: RunningBroker,
                                       unique_name: Names) -> None:
    # SIGKILL an `eosclient copy` mid-run, start a processor with the same transactional.id: it
    # fences the zombie, the coordinator aborts what it left open, and (static membership: the
    # group.instance.id defaults to the transactional.id) it takes the dead member's place and
    # partitions at once. noida-db never drops a killed member, so a dynamic one would wait
    # forever. The session (30 s) is far longer than the run may take: no waiting for it.
    source, sink = fill(noida_broker, unique_name, 3000)
    group, txn = unique_name("g"), unique_name("t")
    session = {"session.timeout.ms": 30000, "heartbeat.interval.ms": 1000}
    command = [sys.executable, "-m", "eosclient.cli", "copy", "--input", source, "--output", sink,
               "--group", group, "--transactional-id", txn, "--bootstrap-servers",
               noida_broker.bootstrap_servers, "--max-records-per-transaction", "20",
               "--progress-interval", "0.2", *itertools.chain.from_iterable(
                   ("--consumer-property", f"{k}={v}") for k, v in session.items())]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert child.stdout is not None
        progress = ""
        for line in child.stdout:
            if line.startswith("records in") and not line.startswith("records in 0,"):
                progress = line
                break
        child.send_signal(signal.SIGKILL)
        assert progress, "the copy never reported progress"
    finally:
        child.kill()
        child.wait(10)
    again = front.cls(bootstrap_servers=noida_broker.bootstrap_servers, input_topics=[source],
                      output_topic=sink, group_id=group, transactional_id=txn,
                      consumer_config={"fetch.max.wait.ms": 100, **session})
    started = time.monotonic()
    # idle_timeout counts from the start: 2 s ended a loaded run before its first record
    # (records_in 0); 5 s is still far below the 30 s session.
    stats = front.run(again, idle_timeout=5, timeout=40)
    assert time.monotonic() - started < 20, "the restarted processor waited for the session"
    assert 0 < stats.records_in < 3000
    report = check(noida_broker.bootstrap_servers, source, sink)
    assert report.ok, str(report)


@pytest.mark.slow
def test_copy_on_tansu_never_goes_back_past_its_own_commits(
        front: Front, tansu_broker: RunningBroker, unique_name: Names) -> None:
    """Tansu applies the processor's offsets only once an earlier open transaction on its
    output partitions ends (test_tansu_quirks.py). Meanwhile a rewind after an abort must not
    go back to the offsets the group shows (it would copy committed records again), and the
    group must show what was committed before the processor hands its partitions over (the
    plain commit after each transaction; the hand-over waits for it)."""
    servers = tansu_broker.bootstrap_servers
    source, sink = fill(tansu_broker, unique_name, 150)
    inputs = [TopicPartition(source, p) for p in range(PARTITIONS)]
    with TransactionalProducer(servers, transactional_id=unique_name("other")) as other, \
            KafkaProxy(tansu_broker.host, tansu_broker.port) as proxy:
        other.init_transactions(15)
        other.begin_transaction()
        for partition in range(PARTITIONS):
            other.send(sink, b"other", partition=partition)
        other.flush(15)
        # The second transaction fails after the first committed: abort, rewind.
        rule = proxy.add_rule(Rule(api_key=ApiKey.TXN_OFFSET_COMMIT, nth=2,
                                   action=RewriteError(22)))  # ILLEGAL_GENERATION (KIP-447)
        # The other transaction also holds the new partitions back (the processor waits for
        # the output to settle when partitions are assigned), for transaction.timeout.ms.
        copier = processor(front, proxy.bootstrap_servers, source, sink, unique_name,
                           producer_config={"transaction.timeout.ms": 3000},
                           consumer_config={"fetch.max.wait.ms": 100,
                                            "session.timeout.ms": 6000})
        stats = front.run(copier, max_records=150, timeout=90)
        with ReadCommittedConsumer(servers, group_id=copier.group_id) as reader:
            shown = reader.committed(inputs, 15)  # the other transaction is still open
        other.abort_transaction(15)
    assert rule.fired == 1 and stats.transactions_aborted == 1
    assert stats.records_in == 150
    assert sum(offset or 0 for offset in shown.values()) == 150
    report = check(servers, source, sink)
    assert report.ok, str(report)


@pytest.mark.slow
def test_offsets_tansu_deferred_survive_the_next_transactions_abort(
        front: Front, tansu_broker: RunningBroker, unique_name: Names) -> None:
    """Tansu defers a committed transaction's offsets while another transaction that wrote
    earlier to its output partition is open, keeps them in the producer epoch's state, and
    drops them when the same producer's next transaction is aborted (test_tansu_quirks.py).
    Used to break: the group showed nothing committed and the next instance copied the first
    transactions' records again. Now the processor commits each committed transaction's
    offsets once more, plainly, before the next one begins."""
    servers = tansu_broker.bootstrap_servers
    source = topics.create_topic(tansu_broker, unique_name("in"), 1)
    sink = topics.create_topic(tansu_broker, unique_name("out"), 1)
    group, txn = unique_name("g"), unique_name("t")

    def make(fn: Callable[..., object] | None) -> AnyProcessor:
        return front.cls(
            bootstrap_servers=servers, input_topics=[source], output_topic=sink,
            group_id=group, transactional_id=txn, fn=fn,  # type: ignore[arg-type]
            max_records_per_transaction=10, commit_interval_ms=30000,
            consumer_config={"fetch.max.wait.ms": 100, "session.timeout.ms": 6000})

    def write(producer: TransactionalProducer, first: int, last: int) -> None:
        producer.begin_transaction()
        producer.send_batch(source, [str(i).encode() for i in range(first, last + 1)])
        producer.commit_transaction(15)

    with TransactionalProducer(servers, transactional_id=unique_name("fill")) as filler, \
            TransactionalProducer(servers, transactional_id=unique_name("other")) as other:
        filler.init_transactions(15)
        other.init_transactions(15)
        write(filler, 0, 14)

        def copy_then_fail(record: ConsumerRecord) -> list[tuple[bytes | None, bytes | None]]:
            if record.value == b"2":  # open before the first commit: its offsets are deferred
                other.begin_transaction()
                other.send(sink, b"other", partition=0)
                other.flush(15)
            if record.value == b"14":  # the second transaction's first part goes out, then
                write(filler, 15, 29)  # the next poll brings the record that fails it
            if record.value == b"15":
                raise RuntimeError("boom")  # the second transaction is aborted
            return [(record.key, record.value)]

        with pytest.raises(RuntimeError, match="boom"):
            front.run(make(copy_then_fail), timeout=60)
        other.abort_transaction(15)  # ends it: Tansu settles the processor's transactions now
    with ReadCommittedConsumer(servers, group_id=group) as reader:
        assert reader.committed([TopicPartition(source, 0)], 15) == {
            TopicPartition(source, 0): 10}  # before the fix: None
    stats = front.run(make(None), max_records=20, timeout=60)  # from the committed offsets
    assert stats.records_in == 20
    report = check(servers, source, sink)
    assert report.ok, str(report)


def test_a_transaction_that_outlived_the_group_generation_is_aborted_not_committed(
        front: Front, noida_broker: RunningBroker, unique_name: Names) -> None:
    # Used to break: a processor stalled past max.poll.interval.ms (or paused past its session)
    # committed its open transaction afterwards, though the group may have handed its partitions
    # to another member meanwhile (a duplicate on a broker that does not check a TxnOffsetCommit's
    # generation). Now the commit is refused by the clock and the transaction redone.
    source, sink = fill(noida_broker, unique_name, 120)
    stalled: list[int] = []

    def slow_once(record: ConsumerRecord) -> list[tuple[bytes | None, bytes | None]]:
        if not stalled and record.offset == 10:
            stalled.append(record.offset)
            time.sleep(2.0)  # longer than max.poll.interval.ms below
        return [(record.key, record.value)]

    copier = processor(front, noida_broker.bootstrap_servers, source, sink, unique_name,
                       fn=slow_once,
                       consumer_config={"fetch.max.wait.ms": 100, "max.poll.interval.ms": 1500,
                                        "heartbeat.interval.ms": 200})
    stats = front.run(copier, max_records=120, timeout=60)
    assert stalled and stats.transactions_aborted >= 1
    report = check(noida_broker.bootstrap_servers, source, sink)
    assert report.ok, str(report)


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.long_on_tansu
def test_a_worker_joining_a_cooperative_group_interrupts_only_the_partitions_that_move(
        front: Front, broker: RunningBroker, unique_name: Names,
        caplog: pytest.LogCaptureFixture) -> None:
    # Eager, a worker joining revoked every partition of every worker: each finished its
    # transaction, gave all 6 up, and started its 4 again from the committed offsets. With
    # cooperative-sticky the two workers give up only the 2 each that move to the newcomer, and
    # are told of nothing new afterwards (their kept partitions go on from where they are).
    # On Tansu, which answers a static member's second rejoin with its old generation, one of
    # them leaves and joins again (else the newcomer's partitions stayed with nobody), and its
    # transactions abort while it is out of the group; exactly once all the same.
    servers = broker.bootstrap_servers
    source, sink = create_topic(broker, unique_name("in"), 12), unique_name("out")
    create_topic(broker, sink)
    group = unique_name("g")
    stop = threading.Event()
    produced = [0]

    def produce() -> None:
        with TransactionalProducer(servers, transactional_id=unique_name("fill"),
                                   linger_ms=5) as producer:
            producer.init_transactions(15)
            while not stop.wait(0.02):
                producer.begin_transaction()
                for p in range(12):  # to every partition, each worker's kept ones included
                    producer.send_batch(source, [b"%d" % (produced[0] + i) for i in range(2)],
                                        partition=p)
                    produced[0] += 2
                producer.commit_transaction(15)

    copiers = {name: front.cls(
        bootstrap_servers=servers, input_topics=[source], output_topic=sink, group_id=group,
        transactional_id=f"{group}-{name}", max_records_per_transaction=50,
        commit_interval_ms=50, consumer_config={
            "partition.assignment.strategy": "cooperative-sticky", "fetch.max.wait.ms": 100,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 200})
        for name in ("w0", "w1", "w2")}
    stats: dict[str, ProcessorStats] = {}

    def work(name: str) -> None:
        stats[name] = front.run(copiers[name])

    def told(name: str, what: str) -> list[set[int]]:
        """The partitions each ``on_assign`` / ``on_revoke`` of worker ``name`` was given."""
        return [{int(p) for p in record.getMessage().split("[", 1)[1].rstrip("]").split(", ")}
                for record in list(caplog.records) if record.threadName == name
                and record.getMessage().startswith(f"{what} {source}[")]

    caplog.set_level(logging.INFO, "eosclient.processor")
    producer = threading.Thread(target=produce)
    workers = {name: threading.Thread(target=work, args=(name,), name=name) for name in copiers}
    producer.start()
    try:
        workers["w0"].start()
        workers["w1"].start()
        wait_for(lambda: sorted(len(told(w, "assigned")) for w in ("w0", "w1")) == [1, 1]
                 and sum(len(told(w, "assigned")[0]) for w in ("w0", "w1")) == 12, 60)
        workers["w2"].start()
        wait_for(lambda: sum(map(len, told("w2", "assigned"))) == 4, 60)
        time.sleep(1.0)  # records keep coming to the kept partitions after the hand-over
        stop.set()
        producer.join(30)
        seen = {w: (told(w, "assigned"), told(w, "revoked")) for w in workers}
        wait_for(lambda: sum(c.stats.records_in for c in copiers.values()) >= produced[0], 60)
    finally:
        stop.set()
        producer.join(30)
        for copier in copiers.values():
            copier.stop()
        for worker in workers.values():
            worker.join(60)
    for name in ("w0", "w1"):
        [first], revoked = seen[name]
        # only the 2 that moved, once; no on_assign after the first one (none for nothing new)
        assert len(revoked) == 1 and len(revoked[0]) == 2 and revoked[0] < first, seen
    assert seen["w0"][1][0] | seen["w1"][1][0] == set().union(*seen["w2"][0]), seen
    # every worker copied (its kept partitions through the rebalance), and nobody aborted
    assert all(s.records_in for s in stats.values()), stats
    if broker.kind == "noida":
        assert not any(s.transactions_aborted for s in stats.values()), stats
    report = check(servers, source, sink)
    assert report.ok, str(report)
