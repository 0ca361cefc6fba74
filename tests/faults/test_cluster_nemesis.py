"""The cluster nemesis: a transactional producer on librdkafka's three-broker mock while a seeded
schedule moves leaders and the transaction coordinator, bounces brokers and pushes retriable
errors, judged from the log's control markers.

The schedule, the marker reader's decisions and the verdict are tested without a broker. The
fast suite plays one short schedule for eosclient's producer, sync and asyncio (seed 2 over
8 s: the coordinator's broker goes down with the coordinator on it, leaders and the coordinator
move, errors on AddPartitionsToTxn and EndTxn); the long run (``--long``) plays 6 seeds x 60 s
for both, as ``python -m eosclient.testing.cluster_nemesis --seeds 1-6 --duration 60 --clients
eosclient,eosclient-asyncio`` does.
"""

from __future__ import annotations

import pytest

from eosclient.testing.cluster_nemesis import (
    BROKERS,
    DOWN_FOR,
    ERRORS,
    FAULT_KINDS,
    GAP,
    PARTITIONS,
    ClusterNemesisResult,
    Txn,
    format_table,
    judge,
    main,
    make_schedule,
    run_cluster_nemesis,
    value_of,
)
from eosclient.testing.marker_log import LogBatch, PartitionLog

QUICK = (2, 8.0)  # seed, seconds
LONG_SEEDS = range(1, 7)
EOSCLIENT = pytest.mark.parametrize("client", ["eosclient", "eosclient-asyncio"],
                                    ids=["sync", "asyncio"])


# -- the schedule, without a broker ----------------------------------------------------------------

def test_the_same_seed_draws_the_same_schedule() -> None:
    for seed in range(1, 30):
        assert make_schedule(seed) == make_schedule(seed)
        assert str(make_schedule(seed)) == str(make_schedule(seed))


def test_different_seeds_draw_different_schedules() -> None:
    assert len({make_schedule(seed).faults for seed in range(1, 30)}) == 29


def test_a_shorter_window_plays_the_same_faults_first() -> None:
    # So the fast suite's 8 s are the first 8 s of the 30 s table's seed.
    short, full = make_schedule(2, duration=8), make_schedule(2, duration=30)
    assert [f.at for f in short.faults] == [f.at for f in full.faults[:len(short.faults)]]


def test_a_schedule_keeps_its_rules() -> None:
    kinds: set[str] = set()
    for seed in range(1, 200):
        schedule = make_schedule(seed, duration=30)
        leaders = [p % BROKERS + 1 for p in range(PARTITIONS)]
        coordinator, down_until, down = 1, 0.0, 0
        previous = 0.0
        for fault in schedule.faults:
            kinds.add(fault.kind)
            assert GAP[0] - 0.01 <= fault.at - previous <= GAP[1] + 0.01
            previous = fault.at
            is_down = down_until > fault.at
            if fault.kind == "down":
                assert not is_down, "one broker down at a time"
                assert fault.hold <= DOWN_FOR[1]
                assert fault.hold >= DOWN_FOR[0] or fault.at + fault.hold == pytest.approx(30)
                down_until, down = fault.at + fault.hold, fault.broker
            elif fault.kind == "leader":
                assert fault.broker != leaders[fault.partition]
                assert not (is_down and fault.broker == down), "moved to a broker that is down"
                leaders[fault.partition] = fault.broker
            elif fault.kind == "coordinator":
                assert fault.broker != coordinator
                assert not (is_down and fault.broker == down)
                coordinator = fault.broker
            else:
                assert (fault.api, fault.code) in [(int(a), c) for a, c in ERRORS]
        assert down_until <= 30.0 + 1e-9, "every broker is up again by the end"
    assert kinds == set(FAULT_KINDS)


def test_a_fault_reads_as_what_it_does() -> None:
    lines = str(make_schedule(2, duration=8)).splitlines()
    assert lines[0].startswith("cluster nemesis schedule, seed 2: 11 faults in 8 s")
    assert "broker 3 down for 2.4 s" in lines[5]
    assert "EndTxn answers CONCURRENT_TRANSACTIONS (51) once" in lines[-1]


# -- the verdict, without a broker -----------------------------------------------------------------

def data(offset: int, pid: int, *values: bytes) -> LogBatch:
    return LogBatch(offset, pid, 0, records=tuple((offset + i, v) for i, v in enumerate(values)))


def marker(offset: int, pid: int, kind: str) -> LogBatch:
    return LogBatch(offset, pid, 0, control="commit" if kind == "commit" else "abort")


def txn(n: int, outcome: str, sent: int = 20) -> Txn:
    t = Txn(n, float(n), sent=sent, commit_seconds=0.01)
    t.outcome = outcome  # type: ignore[assignment]
    return t


def written(txns: dict[int, str], *, skip: tuple[tuple[int, int], ...] = (),
            twice: tuple[tuple[int, int], ...] = (),
            start: int = 0) -> dict[int, PartitionLog]:
    """Each transaction's records in its partitions, then its marker (``txns``: n -> "commit",
    "abort" or "open"), as the log would hold them."""
    logs = {p: PartitionLog(p, start_offset=start) for p in range(PARTITIONS)}
    offsets = dict.fromkeys(logs, start)
    for n, end in txns.items():
        for p, log in logs.items():
            values = [value_of(n, i) for i in range(p, 20, PARTITIONS) if (n, i) not in skip]
            values += [value_of(n, i) for n2, i in twice if n2 == n and i % PARTITIONS == p]
            log.batches.append(data(offsets[p], 1, *values))
            offsets[p] += len(values)
            if end != "open":
                log.batches.append(marker(offsets[p], 1, end))
                offsets[p] += 1
            log.end_offset = log.read_to = offsets[p]
    return logs


def test_a_clean_run_has_no_problem() -> None:
    counts = judge([txn(0, "committed"), txn(1, "aborted"), txn(2, "committed")],
                   written({0: "commit", 1: "abort", 2: "commit"}))
    assert counts.bad() == {}
    assert counts.committed_records == 40


def test_a_committed_transaction_missing_a_record_is_lost() -> None:
    counts = judge([txn(0, "committed")], written({0: "commit"}, skip=((0, 7),)))
    assert counts.bad() == {"lost": 1}
    assert "records [7] not committed" in counts.examples[0]


def test_a_committed_transaction_aborted_in_the_log_is_lost() -> None:
    assert judge([txn(0, "committed")], written({0: "abort"})).bad() == {"lost": 20}


def test_a_committed_transaction_without_its_marker_is_lost_and_open() -> None:
    counts = judge([txn(0, "committed")], written({0: "open"}))
    assert counts.bad() == {"lost": 20}
    assert counts.open_records == 20


def test_an_aborted_or_failed_transaction_committed_is_an_aborted_read() -> None:
    counts = judge([txn(0, "aborted"), txn(1, "failed", sent=5)],
                   written({0: "commit", 1: "commit"}, skip=tuple((1, i) for i in range(5, 20))))
    assert counts.bad() == {"aborted_read": 25}


def test_a_value_committed_twice_is_duplicated() -> None:
    counts = judge([txn(0, "committed")], written({0: "commit"}, twice=((0, 3),)))
    assert counts.bad() == {"duplicated": 1}


def test_a_later_transaction_before_an_earlier_one_is_out_of_order() -> None:
    logs = written({1: "commit", 0: "commit"})
    assert judge([txn(0, "committed"), txn(1, "committed")], logs).bad() == {"out_of_order": 20}


def test_an_unknown_outcome_may_go_either_way_but_not_half() -> None:
    told = [txn(0, "unknown"), txn(1, "unknown")]
    assert judge(told, written({0: "commit", 1: "abort"})).bad() == {}
    counts = judge([txn(0, "unknown")], written({0: "commit"}, skip=((0, 4),)))
    assert counts.bad() == {"partial": 1}


def test_a_value_never_sent_there_is_unexpected() -> None:
    logs = written({0: "commit"})
    # Transaction 9 never ran; record 5 of transaction 0 was sent to partition 5, not 0.
    logs[0].batches[1:1] = [data(4, 2, value_of(9, 0), value_of(0, 5)), marker(6, 2, "commit")]
    assert judge([txn(0, "committed")], logs).bad() == {"unexpected": 2}


def test_a_partition_not_read_to_its_end_is_a_problem() -> None:
    logs = written({0: "commit"})
    logs[3].end_offset += 5
    assert judge([txn(0, "committed")], logs).bad() == {"unread": 5}


def test_transactions_before_a_dropped_head_are_pruned_not_lost() -> None:
    # The mock drops a partition's oldest batches past 5 MiB: transaction 0's records in
    # partition 2 are gone, and only its other partitions are judged.
    logs = written({0: "commit", 1: "commit"})
    del logs[2].batches[:2]
    logs[2].start_offset = logs[2].batches[0].base_offset
    counts = judge([txn(0, "committed"), txn(1, "committed")], logs)
    assert counts.bad() == {}
    assert counts.pruned == 1


def test_the_table_has_a_row_per_run() -> None:
    result = ClusterNemesisResult("eosclient", make_schedule(1, duration=2))
    result.txns, result.loop_seconds = [txn(0, "committed"), txn(1, "aborted")], 2.0
    result.counts = judge(result.txns, written({0: "commit", 1: "abort"}))
    table = format_table([result]).splitlines()
    assert table[2].startswith("| eosclient | 1 |")
    assert table[2].endswith("| 0 | 0 | yes |")
    assert result.rate == 0.5


def test_a_slow_commit_is_a_problem_shown_with_its_log() -> None:
    result = ClusterNemesisResult("eosclient", make_schedule(1, duration=2))
    slow = txn(0, "committed")
    slow.commit_seconds = 16.0
    result.txns, result.counts = [slow], judge([slow], written({0: "commit"}))
    result.log_lines = ["t=0.500s io eosclient.net INFO node 3: disconnected", "t=30.0s late"]
    assert result.problems() == ["slowest commit 16.0 s > 15 s (transaction 0, began t=0.0s)"]
    assert "eosclient.net INFO node 3: disconnected" in result.summary()
    assert "late" not in result.summary()


# -- on the mock -----------------------------------------------------------------------------------

@pytest.mark.mock
@EOSCLIENT
def test_eosclient_under_a_short_schedule(client: str) -> None:
    seed, duration = QUICK
    result = run_cluster_nemesis(client, seed=seed, duration=duration)
    print(format_table([result]))
    assert not result.problems(), result.summary()
    played = [e for e in result.events if not e.endswith((" up", "(the run ended)"))]
    assert len(played) == len(result.schedule.faults), "every fault was played"
    assert result.committed > 100
    assert result.requests_by_api["EndTxn"] >= result.committed  # the mock's request tracking


@pytest.mark.mock
def test_the_command_line_prints_a_row_per_client(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["--seeds", "5", "--duration", "2", "--clients", "confluent-kafka"])
    out = capsys.readouterr().out
    assert "cluster nemesis schedule, seed 5" in out
    assert "| confluent-kafka | 5 |" in out
    assert "median confluent-kafka:" in out
    assert status in (0, 1)


@pytest.mark.mock
def test_asyncio_is_the_asyncio_producer_for_the_producer_target(
        capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["--seeds", "5", "--duration", "1", "--asyncio"])
    out = capsys.readouterr().out
    assert "| eosclient-asyncio | 5 |" in out
    assert "median eosclient-asyncio:" in out
    assert status in (0, 1)


def test_asyncio_and_clients_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--asyncio", "--clients", "eosclient"])
    assert exited.value.code == 2
    assert "name it in --clients instead" in capsys.readouterr().err


@pytest.mark.long
@pytest.mark.mock
@pytest.mark.parametrize("seed", LONG_SEEDS)
@EOSCLIENT
def test_long_run(client: str, seed: int) -> None:
    result = run_cluster_nemesis(client, seed=seed, duration=60)
    print(format_table([result]))
    assert not result.problems(), result.summary()
