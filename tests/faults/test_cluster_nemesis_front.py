"""The cluster nemesis's front targets: a read_committed consumer, and ExactlyOnceProcessor
workers, through a ClusterFront over noida-db and Tansu while the seeded schedule moves leaders
and coordinators (the transactional ids' and the group's) and bounces nodes.

The front schedules and the consumer's verdict are tested without a broker. The fast suite plays
seed 9 over 8 s (the group's coordinator moves, node 1 goes down with the transactional ids'
coordinator on it, then node 3, then node 2 with the group's coordinator on it for 2.4 s; the
transactional ids' coordinator moves twice, five leaders move) per target per broker with the
sync clients, and with the asyncio ones on noida-db (about 65 s in all); ``--long`` plays seeds
1-3 x 60 s on both brokers and both fronts, as
``python -m eosclient.testing.cluster_nemesis --target consumer --broker tansu --seeds 1-3
--duration 60 --asyncio`` does.
"""

from __future__ import annotations

import pytest

from eosclient.testing.brokers import RunningBroker
from eosclient.testing.cluster_nemesis import (
    BROKERS,
    FRONT_FAULT_KINDS,
    FRONT_TARGETS,
    PARTITIONS,
    FrontTarget,
    format_front_table,
    judge_reads,
    make_schedule,
    run_cluster_nemesis,
    run_front_nemesis,
)
from eosclient.testing.marker_log import LogBatch, PartitionLog

QUICK = (9, 8.0)  # seed, seconds
LONG_SEEDS = range(1, 4)
LONG_SECONDS = 60.0


# -- the schedule, without a broker ----------------------------------------------------------------

def test_both_front_targets_play_the_same_schedule_for_a_seed() -> None:
    for seed in range(1, 20):
        consumer = make_schedule(seed, duration=30, target="consumer")
        assert consumer.faults == make_schedule(seed, duration=30, target="processor").faults
        assert consumer == make_schedule(seed, duration=30, target="consumer")


def test_a_front_schedule_keeps_its_rules() -> None:
    kinds: set[str] = set()
    keys: set[str] = set()
    for seed in range(1, 200):
        schedule = make_schedule(seed, duration=30, target="consumer")
        leaders = [p % BROKERS + 1 for p in range(PARTITIONS)]
        coordinators = {"transaction": 1, "group": 1}
        down_until, down = 0.0, 0
        for fault in schedule.faults:
            kinds.add(fault.kind)
            is_down = down_until > fault.at
            assert fault.kind in FRONT_FAULT_KINDS, "no errors pushed through the front"
            if fault.kind == "down":
                assert not is_down, "one node down at a time"
                down_until, down = fault.at + fault.hold, fault.broker
            elif fault.kind == "leader":
                assert fault.broker != leaders[fault.partition]
                assert not (is_down and fault.broker == down)
                leaders[fault.partition] = fault.broker
            else:
                keys.add(fault.coordinator)
                assert fault.broker != coordinators[fault.coordinator]
                assert not (is_down and fault.broker == down)
                coordinators[fault.coordinator] = fault.broker
    assert kinds == set(FRONT_FAULT_KINDS)
    assert keys == {"transaction", "group"}


def test_the_producer_target_refuses_a_front_schedule() -> None:
    with pytest.raises(ValueError, match="draw one for 'producer'"):
        run_cluster_nemesis("eosclient", schedule=make_schedule(1, duration=1, target="consumer"))


def test_a_front_schedule_reads_as_what_it_does() -> None:
    lines = str(make_schedule(*QUICK[:1], duration=QUICK[1], target="processor")).splitlines()
    assert lines[0] == ("cluster nemesis schedule (processor target), seed 9: 11 faults in 8 s "
                        "(5 leader, 3 coordinator, 3 down)")
    assert lines[1].endswith("coordinator group coordinator moves to broker 2")
    assert lines[2].endswith("down        broker 1 down for 1.2 s")
    assert lines[8].endswith("coordinator transaction coordinator moves to broker 3")


# -- the consumer's verdict, without a broker ------------------------------------------------------

def data(offset: int, pid: int, *values: bytes) -> LogBatch:
    return LogBatch(offset, pid, 0, records=tuple((offset + i, v) for i, v in enumerate(values)))


def marker(offset: int, pid: int, kind: str) -> LogBatch:
    return LogBatch(offset, pid, 0, control="commit" if kind == "commit" else "abort")


def one_partition() -> dict[int, PartitionLog]:
    """Offsets 0-1 committed, 3-4 aborted (two producers interleaved), 6 committed."""
    batches = [data(0, 1, b"a", b"b"), marker(2, 1, "commit"), data(3, 2, b"x", b"y"),
               marker(5, 2, "abort"), data(6, 1, b"c"), marker(7, 1, "commit")]
    return {0: PartitionLog(0, end_offset=8, read_to=8, batches=batches)}


def test_reading_exactly_the_committed_records_is_clean() -> None:
    counts = judge_reads({0: [(0, b"a"), (1, b"b"), (6, b"c")]}, one_partition())
    assert counts.bad() == {}
    assert (counts.committed, counts.read) == (3, 3)


def test_each_way_of_reading_wrong_is_counted() -> None:
    # 1 and 3 come after 6; 0 comes twice; 3 was aborted; nothing was committed at 7.
    reads = {0: [(0, b"a"), (6, b"c"), (1, b"b"), (0, b"a"), (3, b"x"), (7, b"?")]}
    counts = judge_reads(reads, one_partition())
    assert counts.bad() == {"duplicated": 1, "aborted_read": 1, "out_of_order": 2,
                            "unexpected": 1}
    counts = judge_reads({0: [(1, b"b")], 2: [(0, b"z")]}, one_partition())
    assert counts.bad() == {"lost": 2, "unexpected": 1}
    assert "lost: input-0 offsets 0, 6 committed, not read" in counts.examples


def test_a_value_other_than_the_log_s_is_unexpected() -> None:
    assert judge_reads({0: [(0, b"b"), (1, b"b"), (6, b"c")]},
                       one_partition()).bad() == {"unexpected": 1, "lost": 1}


# -- through the front, on the brokers -------------------------------------------------------------

def played(target: FrontTarget, broker: RunningBroker, *, seed: int, duration: float,
           asyncio: bool = False) -> None:
    result = run_front_nemesis(target, broker, seed=seed, duration=duration, asyncio=asyncio)
    print(format_front_table([result]))
    assert not result.problems(), result.summary()
    assert result.feed.committed > 5 and result.records_read > 0
    played = [e for e in result.feed.events if not e.endswith((" up", "(the run ended)"))]
    assert len(played) == len(result.schedule.faults), "every fault was played"
    # Not vacuous: the clients met moved leaders and coordinators and were sent on.
    assert set(result.refusals) == {"NOT_LEADER_OR_FOLLOWER", "NOT_COORDINATOR"}, result.refusals


# The fast suite plays four short schedules (CI's time budget): the consumer on both brokers,
# the processor on noida-db with each front (the asyncio processor drives the asyncio
# consumer too). The processor on Tansu (16-37 s a run, its group rejoins) and every other
# combination play in the long run.


@pytest.mark.proxy
def test_a_short_schedule_of_the_consumer(broker: RunningBroker) -> None:
    played("consumer", broker, seed=QUICK[0], duration=QUICK[1])


@pytest.mark.proxy
@pytest.mark.parametrize("asyncio", [False, True], ids=["sync", "asyncio"])
def test_a_short_schedule_of_the_processor(asyncio: bool, noida_broker: RunningBroker) -> None:
    played("processor", noida_broker, seed=QUICK[0], duration=QUICK[1], asyncio=asyncio)


@pytest.mark.long
@pytest.mark.proxy
@pytest.mark.timeout(900)
@pytest.mark.parametrize("asyncio", [False, True], ids=["sync", "asyncio"])
@pytest.mark.parametrize("seed", LONG_SEEDS)
@pytest.mark.parametrize("target", FRONT_TARGETS)
def test_long_run(target: FrontTarget, seed: int, asyncio: bool, broker: RunningBroker) -> None:
    played(target, broker, seed=seed, duration=LONG_SECONDS, asyncio=asyncio)
