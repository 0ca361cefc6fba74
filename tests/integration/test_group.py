"""Consumer groups against real brokers: join, sync, heartbeat, rebalance, leave, commit.

On noida-db (a join takes well under a second) two consumers share a topic while records keep
coming: the second joins, then leaves, and every record is processed exactly once across both,
where "processed" means its offset commit succeeded (a batch whose commit fails is dropped and
read again by whoever owns the partition next). Tansu holds every join for about half the
session timeout (~23 s at the default 45 s; the Tansu tests here use 6 s), so one test only: one
member joins, commits and reads its commit back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable

import confluent_kafka as ck
import pytest

from eosclient import (
    CommitFailedError,
    ConsumerRecord,
    ReadCommittedConsumer,
    TopicPartition,
    TransactionalProducer,
)
from eosclient._consumer import protocol as wire
from eosclient._net.blocking import BlockingConnection
from eosclient._protocol.apis import APIS
from eosclient.errors import ApiKey
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = pytest.mark.broker

PARTITIONS = 4
RECORDS = 3000


def create_topic(broker: RunningBroker, name: str, partitions: int = PARTITIONS) -> str:
    return topics.create_topic(broker, name, partitions)


class Member:
    """One group member on a thread of its own: poll, then commit what it polled; a record
    counts once its commit succeeded."""

    def __init__(self, broker: RunningBroker, group: str, topic: str, name: str,
                 counted: Counter[tuple[int, int]], **config: object) -> None:
        self.name = name
        self.events: list[tuple[str, list[int], bool]] = []  # (kind, partitions, on my thread)
        self.generations: set[int] = set()
        self._counted = counted
        self._pending: list[ConsumerRecord] = []
        self._committing = False
        self._stop = threading.Event()
        self.consumer = ReadCommittedConsumer(broker.bootstrap_servers, group_id=group, config={
            "auto.offset.reset": "earliest", "client.id": name, "heartbeat.interval.ms": 200,
            **config})
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)
        self._thread = threading.Thread(target=self._run, name=name)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._pending += self.consumer.poll(0.2, max_records=50)
                self._commit()
        finally:
            self.consumer.close()

    def _commit(self) -> None:
        if not self._pending:
            return
        if self._committing:  # on_revoke inside our own commit(): that commit covers it
            return
        lost: set[int] = set()
        self._committing = True
        try:
            self.consumer.commit()
        except CommitFailedError as exc:  # those partitions' next owner reads them again
            lost = {tp.partition for tp in exc.partitions}
        finally:
            self._committing = False
        self._counted.update((r.partition, r.offset) for r in self._pending
                             if r.partition not in lost)
        self._pending.clear()

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        self.generations.add(self.consumer.group_metadata().generation_id)
        self._event("assign", partitions)

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        self._event("revoke", partitions)
        self._commit()  # Java's advice: commit what was processed before giving it up

    def _event(self, kind: str, partitions: list[TopicPartition]) -> None:
        mine = threading.current_thread() is self._thread
        self.events.append((kind, [tp.partition for tp in partitions], mine))


def produce_slowly(broker: RunningBroker, topic: str, stop: threading.Event) -> None:
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 1})
    for i in range(RECORDS):
        producer.produce(topic, b"%d" % i, partition=i % PARTITIONS)
        if i % 100 == 99:
            assert producer.flush(10) == 0
            if stop.wait(0.04):
                break
    assert producer.flush(10) == 0


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "sticky"])
def test_two_members_rebalance_without_losing_or_repeating_a_record(
        noida_broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str],
        assignor: str) -> None:
    # Used to break: a member's commit() during the rebalance raised ILLEGAL_GENERATION or
    # REBALANCE_IN_PROGRESS, which killed the README's poll/commit loop. Now commit() finishes
    # the rebalance and only CommitFailedError (naming the partitions given away) is left.
    create_topic(noida_broker, topic_name)
    group, counted = unique_name("group"), Counter[tuple[int, int]]()
    stop = threading.Event()
    producer = threading.Thread(target=produce_slowly, args=(noida_broker, topic_name, stop))
    producer.start()
    strategy = {"partition.assignment.strategy": assignor}
    a = Member(noida_broker, group, topic_name, "a", counted, **strategy)
    try:
        wait_for(lambda: len(counted) >= 300)
        b = Member(noida_broker, group, topic_name, "b", counted, **strategy)
        wait_for(lambda: any(kind == "assign" for kind, _, _ in b.events))
        wait_for(lambda: len(counted) >= 1500)
        b.stop()  # leaves: a takes every partition again
        wait_for(lambda: len(a.events) >= 5)
    finally:
        producer.join(60)
        wait_for(lambda: len(counted) >= RECORDS)
        a.stop()
    assert len(counted) == RECORDS and set(counted.values()) == {1}  # none lost, none repeated
    assert [kind for kind, _, _ in b.events] == ["assign", "revoke"]
    # range: the upper half; roundrobin: every other one; sticky: any two of the four a
    # claimed (it keeps the other two)
    given = sorted(b.events[0][1])
    assert len(given) == 2 if assignor == "sticky" else given == (
        [2, 3] if assignor == "range" else [1, 3])
    assert all(mine for _, _, mine in a.events + b.events)  # callbacks on the polling thread
    assert len(a.generations) >= 3 and min(a.generations) >= 0  # joined, b came, b went


def test_send_offsets_to_transaction_with_the_group_metadata(
        noida_broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # KIP-447: the transaction commits the consumer's positions under its generation. noida-db
    # (like Tansu) shows such offsets only once the transaction commits, rather than answering
    # UNSTABLE_OFFSET_COMMIT (test_consumer.py covers that answer through the proxy).
    create_topic(noida_broker, topic_name, 1)
    plain = ck.Producer({"bootstrap.servers": noida_broker.bootstrap_servers})
    plain.produce(topic_name, b"in", partition=0)
    assert plain.flush(10) == 0
    tp, group = TopicPartition(topic_name, 0), unique_name("group")
    with ReadCommittedConsumer(noida_broker.bootstrap_servers, group_id=group,
                               config={"auto.offset.reset": "earliest"}) as consumer, \
            TransactionalProducer(noida_broker.bootstrap_servers,
                                  transactional_id=unique_name("txn")) as producer:
        consumer.subscribe([topic_name])
        records: list[ConsumerRecord] = []
        wait_for(lambda: bool(records.extend(consumer.poll(0.2)) or records))
        metadata = consumer.group_metadata()
        assert metadata.generation_id >= 0 and metadata.member_id
        producer.init_transactions()
        producer.begin_transaction(group_id=group)
        producer.send(topic_name, b"out", partition=0)
        producer.send_offsets_to_transaction({tp: consumer.position(tp)}, metadata)
        producer.flush()
        time.sleep(0.3)  # let TxnOffsetCommit land
        assert consumer.committed([tp]) == {tp: None}
        producer.commit_transaction()
        assert consumer.committed([tp], timeout=10) == {tp: 1}


# A member that polls until it is killed (or fenced); it prints its partitions once it has some.
_STATIC_MEMBER = """
import sys
from eosclient import FencedError, ReadCommittedConsumer
boot, topic, group, instance, session_ms = sys.argv[1:6]
c = ReadCommittedConsumer(boot, group_id=group, group_instance_id=instance,
                          auto_offset_reset="earliest",
                          config={"session.timeout.ms": int(session_ms),
                                  "heartbeat.interval.ms": 1000})
c.subscribe([topic])
while True:
    try:
        c.poll(0.2)
    except FencedError as exc:
        print("FENCED", exc.code, flush=True)
        sys.exit(3)
    if c.assignment():
        print("ASSIGNED", len(c.assignment()), flush=True)
"""


def start_static_member(broker: RunningBroker, topic: str, group: str, instance: str,
                        session_ms: int) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", _STATIC_MEMBER, broker.bootstrap_servers, topic, group, instance,
         str(session_ms)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert child.stdout is not None
    return child


def test_a_static_member_killed_and_restarted_gets_its_partitions_at_once(
        noida_broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # KIP-345: noida-db never drops a SIGKILLed member (and elects it leader of the next
    # generation), so a dynamic member restarted in its place never gets a partition. With the
    # same group.instance.id the new member replaces the dead one at once: no session timeout
    # (30 s here) to wait for.
    create_topic(noida_broker, topic_name, 2)
    group, instance = unique_name("group"), unique_name("instance")
    child = start_static_member(noida_broker, topic_name, group, instance, 30000)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("ASSIGNED 2")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    started = time.monotonic()
    with ReadCommittedConsumer(noida_broker.bootstrap_servers, group_id=group,
                               group_instance_id=instance,
                               config={"auto.offset.reset": "earliest",
                                       "session.timeout.ms": 30000}) as consumer:
        consumer.subscribe([topic_name])
        while not consumer.assignment():
            assert time.monotonic() - started < 10, "the restarted member got no partitions"
            consumer.poll(0.2)
        assert sorted(consumer.assignment()) == [TopicPartition(topic_name, 0),
                                                 TopicPartition(topic_name, 1)]
        metadata = consumer.group_metadata()
        assert metadata.group_instance_id == instance and metadata.member_id


def test_a_static_member_resumed_after_a_pause_is_fenced_not_its_replacement(
        noida_broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # Used to break: the paused process, resumed past its session timeout, cleared its member id
    # and joined with only its instance id, which under KIP-345 replaces (fences, 82) the live
    # member that had taken its place; then both processes were dead. Now the old process keeps
    # its member id and is the one fenced; the replacement keeps its partitions.
    create_topic(noida_broker, topic_name, 2)
    group, instance = unique_name("group"), unique_name("instance")
    zombie = start_static_member(noida_broker, topic_name, group, instance, 6000)
    try:
        assert zombie.stdout is not None
        assert zombie.stdout.readline().startswith("ASSIGNED 2")
        zombie.send_signal(signal.SIGSTOP)  # a GC or VM pause
        with ReadCommittedConsumer(noida_broker.bootstrap_servers, group_id=group,
                                   group_instance_id=instance,
                                   config={"auto.offset.reset": "earliest",
                                           "session.timeout.ms": 6000,
                                           "heartbeat.interval.ms": 500}) as replacement:
            replacement.subscribe([topic_name])
            deadline = time.monotonic() + 15
            while not replacement.assignment():
                assert time.monotonic() < deadline, "the replacement got no partitions"
                replacement.poll(0.2)
            time.sleep(7)  # past the paused process's session timeout
            zombie.send_signal(signal.SIGCONT)
            assert zombie.wait(30) == 3, "the resumed process was not fenced"
            assert "FENCED 82" in zombie.stdout.read()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # raises FencedError if it was replaced
                replacement.poll(0.2)
            assert len(replacement.assignment()) == 2
    finally:
        zombie.kill()
        zombie.wait(10)


def test_one_member_joins_commits_and_reads_its_commit_back(
        tansu_broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # Tansu holds JoinGroup for about half the session timeout: one join, no rebalance.
    create_topic(tansu_broker, topic_name, 2)
    plain = ck.Producer({"bootstrap.servers": tansu_broker.bootstrap_servers, "linger.ms": 0})
    for i in range(10):
        plain.produce(topic_name, b"%d" % i, partition=i % 2)
    assert plain.flush(10) == 0
    assigned: list[list[TopicPartition]] = []
    a, b = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    with ReadCommittedConsumer(tansu_broker.bootstrap_servers, group_id=unique_name("group"),
                               config={"auto.offset.reset": "earliest",
                                       "session.timeout.ms": 6000}) as consumer:
        consumer.subscribe([topic_name], on_assign=assigned.append)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + 60
        while len(records) < 10 and time.monotonic() < deadline:
            records += consumer.poll(1.0)
        assert len(records) == 10 and assigned == [[a, b]]
        metadata = consumer.group_metadata()
        assert metadata.generation_id >= 0 and metadata.member_id
        consumer.commit()
        assert consumer.committed([a, b]) == {a: 5, b: 5}


def test_the_processors_plain_commit_begins_now_and_is_awaited_later(
        noida_broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # ExactlyOnceProcessor's safeguard commit (_secure): begun without waiting, answered by the
    # I/O thread meanwhile, and never sent by a member without a generation.
    create_topic(noida_broker, topic_name, 2)
    a = TopicPartition(topic_name, 0)
    with ReadCommittedConsumer(noida_broker.bootstrap_servers, group_id=unique_name("group"),
                               config={"auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe([topic_name])
        assert consumer.start_commit({a: 3}) is None  # not joined yet: nothing sent
        wait_for(lambda: bool(consumer.poll(0.1) is not None and consumer.assignment()))
        job = consumer.start_commit({a: 3})
        assert job is not None
        wait_for(lambda: job.done)  # no call of the application's drives it
        consumer.finish_commit(job, 10)
        assert consumer.committed([a]) == {a: 3}


def test_a_member_that_lost_its_generation_gets_on_lost_not_on_revoke(
        noida_broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # KIP-429's onPartitionsLost: past max.poll.interval.ms the member has left the group, so
    # its partitions may be another's already; on_revoke (commit there) used to run regardless,
    # and the processor committed its open transaction into a generation that was gone.
    create_topic(noida_broker, topic_name, 2)
    calls: list[tuple[str, int]] = []
    with ReadCommittedConsumer(noida_broker.bootstrap_servers, group_id=unique_name("group"),
                               config={"auto.offset.reset": "earliest",
                                       "max.poll.interval.ms": 1500,
                                       "heartbeat.interval.ms": 200}) as consumer:
        consumer.subscribe([topic_name], on_revoke=lambda ps: calls.append(("revoke", len(ps))),
                           on_lost=lambda ps: calls.append(("lost", len(ps))))
        wait_for(lambda: bool(consumer.poll(0.1) is not None and consumer.assignment()))
        assert consumer.in_generation()
        time.sleep(2.0)  # the application stalls past the poll interval
        assert not consumer.in_generation()  # by the clock, whatever the I/O thread did yet
        wait_for(lambda: bool(consumer.poll(0.1) is not None and consumer.assignment()
                              and consumer.in_generation()))
    assert calls[0] == ("lost", 2)  # then ("revoke", 2) at close


def _join_and_go_silent(broker: RunningBroker, group: str, topic: str,
                        session_ms: int = 20_000) -> str:
    """A member that joins (and syncs) once, then is never heard from: every later rebalance
    waits for it (for its session, or, on noida-db, for its rebalance timeout). Its id.

    Its session (20 s by default) outlasts the test by far, yet Tansu holds this first join for
    only about half of it (60 s held it for 30 s)."""
    settings = {"session_timeout_ms": session_ms, "rebalance_timeout_ms": 60_000,
                "protocols": [("range", wire.subscription_bytes([topic]))]}
    with BlockingConnection(broker.host, broker.port, client_id="silent") as conn:
        joined = conn.request(wire.join_group(group, "", **settings), timeout=60)
        if joined.error_code == 79:  # KIP-394: join again with the member id given
            joined = conn.request(wire.join_group(group, joined.member_id, **settings),
                                  timeout=60)
        assert joined.error_code == 0
        synced = conn.request(wire.sync_group(
            group, joined.generation_id, joined.member_id, joined.protocol_name,
            {joined.member_id: wire.assignment_bytes([])}), timeout=30)
        assert synced.error_code == 0
        return str(joined.member_id)


def _members(broker: RunningBroker, group: str) -> list[str]:
    with BlockingConnection(broker.host, broker.port) as conn:
        described = conn.request(APIS[ApiKey.DESCRIBE_GROUPS].request(
            groups=[group], include_authorized_operations=False))
    return sorted(member.member_id for member in described.groups[0].members)


def test_a_member_closed_while_its_join_is_held_leaves_at_once(
        noida_broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # The LeaveGroup of a member closed while joining used to queue behind its own JoinGroup on
    # the coordinator connection, where the coordinator held the join for the rebalance: it was
    # never read, close() waited 5 s for nothing, and the group kept waiting for a member that
    # was gone (on noida-db for the departed member's whole max.poll.interval.ms: the nemesis
    # saw a group stalled for minutes). JoinGroup now has a connection of its own. (Tansu: the
    # test below; it takes a held join in after the LeaveGroup, whatever the client does.)
    broker = noida_broker
    create_topic(broker, topic_name, 2)
    group = unique_name("group")
    silent = _join_and_go_silent(broker, group, topic_name)
    consumer = ReadCommittedConsumer(broker.bootstrap_servers, group_id=group)
    try:
        consumer.subscribe([topic_name])
        # its JoinGroup starts a rebalance that waits for the silent member: held
        wait_for(lambda: consumer.poll(0.05) is not None and len(_members(broker, group)) == 2)
    finally:
        started = time.monotonic()
        consumer.close()
    assert _members(broker, group) == [silent]  # the LeaveGroup was read
    assert time.monotonic() - started < 4.0  # answered, not waited out (5 s)


@pytest.mark.parametrize("leave_group", [False, True])
def test_a_static_member_leaves_on_close_only_when_told(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str],
        leave_group: bool) -> None:
    # KIP-345: a static member keeps its place when it closes, for a restart to take it over;
    # close(leave_group=True) leaves (a fenced processor: Tansu kept a replaced member's
    # partitions assigned to it for good, nemesis Tansu seed 2).
    create_topic(broker, topic_name, 2)
    group = unique_name("group")
    consumer = ReadCommittedConsumer(broker.bootstrap_servers, group_id=group,
                                     config={"group.instance.id": "i", "session.timeout.ms": 30000})
    try:
        consumer.subscribe([topic_name])
        wait_for(lambda: consumer.poll(0.05) is not None and len(consumer.assignment()) == 2, 60)
    finally:
        consumer.close(leave_group=leave_group)
    assert len(_members(broker, group)) == (0 if leave_group else 1)


def test_a_group_whose_leader_closes_while_a_member_joins_forms_again(
        broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # A rolling restart: a new member joins, and the old one, the group's leader, closes before
    # it has rejoined. Tansu kept naming the departed member leader of the forming generation,
    # and no generation formed, for good; the new member now stands in for it.
    create_topic(broker, topic_name, 2)
    group = unique_name("group")
    config = {"session.timeout.ms": 6000}
    old = ReadCommittedConsumer(broker.bootstrap_servers, group_id=group, config=config)
    new = ReadCommittedConsumer(broker.bootstrap_servers, group_id=group, config=config)
    try:
        old.subscribe([topic_name])
        wait_for(lambda: old.poll(0.05) is not None and len(old.assignment()) == 2, 60)
        new.subscribe([topic_name])
        wait_for(lambda: new.poll(0.05) is not None and len(_members(broker, group)) == 2)
        old.close()
        wait_for(lambda: new.poll(0.05) is not None and len(new.assignment()) == 2, 60)
    finally:
        old.close()
        new.close()


def _sole_static_member(broker: RunningBroker, group: str, topic: str) -> Member:
    """A static member (6 s session) of a new topic's group, once it holds every partition."""
    create_topic(broker, topic)
    live = Member(broker, group, topic, "live", Counter(),
                  **{"group.instance.id": "live", "session.timeout.ms": 6000})
    try:
        wait_for(lambda: len(live.consumer.assignment()) == PARTITIONS, 90)
    except BaseException:
        live.stop()
        raise
    return live


def _settled(member: Member, broker: RunningBroker, group: str) -> bool:
    return len(member.consumer.assignment()) == PARTITIONS and len(_members(broker, group)) == 1


def test_a_member_closed_while_its_join_is_held_does_not_keep_partitions(
        tansu_broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # Tansu holds a follower's JoinGroup 3 s before it takes it in. A LeaveGroup sent meanwhile
    # (on the coordinator connection, not queued behind the join) is read first, and the join
    # then admits the member again: gone, never heartbeating, and given partitions. The closing
    # member leaves again if the join is answered before close() returns; if not, its session
    # runs out and the live (static) member's generation must not keep the stale assignment
    # (below). Either way every partition is the live member's again, and stays so.
    broker = tansu_broker
    group = unique_name("group")
    live = _sole_static_member(broker, group, topic_name)
    try:
        leaving = ReadCommittedConsumer(broker.bootstrap_servers, group_id=group,
                                        config={"session.timeout.ms": 6000})
        try:
            leaving.subscribe([topic_name])
            wait_for(lambda: leaving.poll(0.05) is not None and len(_members(broker, group)) == 2)
        finally:
            leaving.close()
        time.sleep(4)  # past the 3 s Tansu holds the join
        wait_for(lambda: _settled(live, broker, group), 60)
        for _ in range(40):  # longer than the session: a re-admitted member would show
            assert _settled(live, broker, group)
            time.sleep(0.2)
    finally:
        live.stop()


def test_the_partitions_of_a_member_gone_silent_are_assigned_again(
        tansu_broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str]) -> None:
    # When a member's session runs out, Tansu asks one static member to rejoin, then answers
    # that rejoin with the same generation and hands out that generation's assignment again:
    # the silent member's partitions stayed assigned to it, read by nobody, for good (the
    # nemesis's stalls). The member that sees the same generation leaves and joins anew, which
    # starts a new generation. (noida-db expires no session in a stable group: docs/testing.md)
    broker = tansu_broker
    group = unique_name("group")
    live = _sole_static_member(broker, group, topic_name)
    try:
        _join_and_go_silent(broker, group, topic_name, session_ms=6000)
        wait_for(lambda: len(live.consumer.assignment()) < PARTITIONS, 60)  # shared now
        wait_for(lambda: len(live.consumer.assignment()) == PARTITIONS, 60)  # all back
    finally:
        live.stop()


class _HandLeader:
    """A member driven by hand on one connection, joined first so that it leads: it assigns
    what the test says, and nothing to a member it is told to leave out."""

    def __init__(self, broker: RunningBroker, group: str, topic: str) -> None:
        self._group, self._topic = group, topic
        self._conn = BlockingConnection(broker.host, broker.port, client_id="hand-leader")
        self._settings = {"session_timeout_ms": 6000, "rebalance_timeout_ms": 30_000,
                          "protocols": [("range", wire.subscription_bytes([topic]))]}
        self.member_id, self.generation = "", -1

    def close(self) -> None:
        if self.member_id:
            self._conn.request(wire.leave_group(self._group, self.member_id))
        self._conn.close()

    def join(self, assign: Callable[[list[str]], dict[str, list[int]]],
             members: int = 1) -> None:
        """JoinGroup (held until the others joined), then SyncGroup with ``assign(members)``
        (partitions by member id; a member it leaves out gets no assignment at all); again
        until a generation of ``members`` members forms."""
        deadline = time.monotonic() + 60
        while True:
            joined = self._conn.request(wire.join_group(self._group, self.member_id,
                                                        **self._settings), timeout=60)
            if joined.error_code == 79:  # KIP-394: join again with the member id given
                self.member_id = joined.member_id
                continue
            assert joined.error_code == 0, joined
            assert joined.leader == joined.member_id, "the hand-driven member must lead"
            self.member_id, self.generation = joined.member_id, joined.generation_id
            ids = sorted(m.member_id for m in joined.members)
            synced = self._conn.request(wire.sync_group(
                self._group, self.generation, self.member_id, joined.protocol_name,
                {m: wire.assignment_bytes([TopicPartition(self._topic, p) for p in ps])
                 for m, ps in assign(ids).items()}), timeout=30)
            if synced.error_code == 0 and len(ids) == members:
                return
            assert synced.error_code in (0, 27), synced
            assert time.monotonic() < deadline, f"no generation of {members} members formed"

    def rebalancing(self) -> bool:
        """One heartbeat: whether the coordinator asks this member to join again."""
        beat = self._conn.request(wire.heartbeat(self._group, self.generation, self.member_id))
        assert beat.error_code in (0, 27), beat
        return bool(beat.error_code == 27)


@pytest.mark.parametrize("instance", [None, "left-out"])
def test_a_member_the_leader_leaves_out_joins_again_until_it_is_named(
        noida_broker: RunningBroker, topic_name: str, unique_name: Callable[[str], str],
        instance: str | None, caplog: pytest.LogCaptureFixture) -> None:
    # noida-db gave a leader a member list naming a static member under a member id it held
    # before; that member's SyncGroup answer carried no assignment at all, its partitions
    # went to the stale id, and the group stayed so, every member heartbeating (nemesis
    # noida-db seed 15). A member whose SyncGroup answer has no assignment at all leaves and
    # joins again, which starts a generation whose leader names it. (Tansu cannot get there:
    # it answers a SyncGroup that leaves a member out REBALANCE_IN_PROGRESS, after 5 s.)
    broker = noida_broker
    create_topic(broker, topic_name, 2)
    group = unique_name("group")
    leader = _HandLeader(broker, group, topic_name)
    config: dict[str, object] = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 200}
    if instance is not None:
        config["group.instance.id"] = instance
    consumer = ReadCommittedConsumer(broker.bootstrap_servers, group_id=group, config=config)
    stop = threading.Event()
    poller = threading.Thread(target=lambda: [consumer.poll(0.1) for _ in iter(stop.is_set,
                                                                               True)])
    try:
        leader.join(lambda members: {members[0]: []})  # generation 1: the leader alone
        consumer.subscribe([topic_name])
        poller.start()
        wait_for(leader.rebalancing, 60)
        leader.join(lambda members: {leader.member_id: []}, 2)  # the consumer left out
        wait_for(leader.rebalancing, 60)  # it left, so that a new generation forms
        assert "the leader's member list did not name it" in caplog.text
        leader.join(lambda members: {m: [] if m == leader.member_id else [0, 1]
                                     for m in members}, 2)
        wait_for(lambda: len(consumer.assignment()) == 2, 60)
    finally:
        stop.set()
        if poller.is_alive():
            poller.join(30)
        consumer.close()
        leader.close()
