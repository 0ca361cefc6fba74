"""The nemesis: ``eosclient copy`` workers in one group under a seeded schedule of composed
faults (kills, pauses past the session timeout, zombies, members joining and leaving, cut
connections, lost answers), then the checker and a liveness check.

The schedule generator and the report writer are tested without a broker. The fast suite
plays one short schedule per broker and front (the workers run ``ExactlyOnceProcessor``, or
eosclient.aio's processor: ``copy --asyncio``); the long run (``--long``) plays 20 seeds x 60 s
per broker and front, as ``python -m eosclient.testing.nemesis --seeds 1-20 --duration 60
[--asyncio]`` does.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import CheckReport, Counts
from eosclient.testing.nemesis import (
    FAULT_KINDS,
    Event,
    Fault,
    Instance,
    NemesisResult,
    Sample,
    Schedule,
    Write,
    format_table,
    main,
    make_schedule,
    run_nemesis,
    write_report,
)

# The fast suite's schedule (seed 1 over 20 s): two zombies (issue 11's resumed zombie fenced its
# replacement), a kill and restart, two lost EndTxn answers.
QUICK = {"noida": (1, 20.0, 3_000), "tansu": (1, 20.0, 2_000)}  # seed, seconds, records
LONG_SEEDS = range(1, 21)


# -- the schedule, without a broker ----------------------------------------------------------------

def test_the_same_seed_draws_the_same_schedule() -> None:
    for seed in range(1, 30):
        assert make_schedule(seed) == make_schedule(seed)
        assert str(make_schedule(seed)) == str(make_schedule(seed))


def test_different_seeds_draw_different_schedules() -> None:
    schedules = {str(make_schedule(seed).faults) for seed in range(1, 30)}
    assert len(schedules) == 29


def test_a_schedule_keeps_its_rules() -> None:
    kinds: set[str] = set()
    for seed in range(1, 200):
        schedule = make_schedule(seed, duration=60, workers=3)
        kinds |= {f.kind for f in schedule.faults}
        times = [f.at for f in schedule.faults]
        assert times == sorted(times) and all(0 < t <= 58 for t in times)
        busy: dict[str, float] = {}
        for fault in schedule.faults:
            if fault.kind in ("kill", "pause", "zombie"):
                # one fault at a time on a worker: the last one on it has ended
                assert busy.get(fault.target, 0.0) <= fault.at, (seed, fault)
                busy[fault.target] = fault.at + (fault.hold if fault.hold is not None
                                                 else float("inf"))
            if fault.kind == "pause":
                assert fault.hold is not None and fault.hold > schedule.session_timeout
        assert all(f.hold is not None for f in schedule.faults if f.kind == "kill")
        extras = [f.target for f in schedule.faults if f.kind == "join"]
        assert len(extras) == len(set(extras))
    assert kinds == set(FAULT_KINDS)


def test_a_schedule_prints_every_fault() -> None:
    schedule = Schedule(7, 30.0, 3, 6.0, (
        Fault(1.5, "zombie", "w1", 8.1), Fault(5.4, "kill", "w2", 3.0),
        Fault(9.0, "drop", "EndTxn"), Fault(12.0, "join", "x0", 10.0)))
    assert str(schedule).splitlines() == [
        "nemesis schedule, seed 7: 4 faults in 30 s, 3 workers, session timeout 6 s",
        "  t=  1.5s zombie SIGSTOP w1, start its replacement, SIGCONT the old one 8.1 s later",
        "  t=  5.4s kill   SIGKILL w2, restart after 3.0 s",
        "  t=  9.0s drop   lose the answer to the next EndTxn",
        "  t= 12.0s join   extra member x0 joins, leaves after 10.0 s",
    ]


def test_make_schedule_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        make_schedule(1, workers=0)
    with pytest.raises(ValueError):
        make_schedule(1, duration=0)


# -- the result and the report, without a broker ---------------------------------------------------

def _made_up_result() -> NemesisResult:
    schedule = Schedule(4, 20.0, 2, 6.0, (Fault(1.0, "zombie", "w0", 5.0),
                                          Fault(3.0, "cut"), Fault(4.0, "join", "x0", 8.0)))
    result = NemesisResult("noida", 4, schedule, 1_000, 2, input_topic="in", output_topic="out",
                           fault_start=2.0, fault_end=18.0, seconds=30.0, faults_injected=3)
    result.instances = [
        Instance("w0", "worker", 0.0, ended=9.0, expect="fenced", returncode=1,
                 last_lines="FencedError('EndTxn: INVALID_PRODUCER_EPOCH (47)')"),
        Instance("w1", "worker", 0.0, ended=30.0, returncode=0),
        Instance("w0", "replacement", 3.5, ended=10.0, returncode=1,
                 last_lines="FencedError('Heartbeat: FENCED_INSTANCE_ID (82)') <&>"),
        Instance("x0", "extra", 6.0, ended=14.0, expect="left", returncode=0),
    ]
    result.events = [Event(2.0, "faults start", ""), Event(3.0, "sigstop", "w0", "zombie"),
                     Event(3.5, "replace", "w0", "zombie"), Event(5.0, "cut", "", "4"),
                     Event(6.0, "join", "x0", "join"), Event(8.5, "resume-zombie", "w0", "zombie"),
                     Event(14.0, "leave", "x0", "join"), Event(18.0, "faults end", "")]
    result.samples = [Sample(t / 2, {"w0": 10 * t, "w1": 12 * t, "x0": 0},
                             {0: 20 * t, 1: 2 * t}, {0: 500, 1: 500}, ("w0", "w1"))
                      for t in range(60)]
    result.writes = [Write(t / 3, "w1" if t % 2 else "w0", {t % 2: 10}, t % 7 != 0)
                     for t in range(80)]
    result.liveness = [p for i in result.instances if (p := i.problem()) is not None]
    counts = Counts(duplicated=80)
    result.report = CheckReport("in", "out", 1_000, 1_080, counts,
                                examples={"duplicated": ["out/0@7 (id 'in/1/3') copy 2"]})
    return result


def test_an_instance_is_judged_by_how_it_was_meant_to_end() -> None:
    result = _made_up_result()
    zombie, live, replacement, extra = result.instances
    assert zombie.problem() is None  # fenced, as a zombie must be
    assert live.problem() is None and extra.problem() is None
    assert "died (exit 1)" in (replacement.problem() or "")
    assert "not fenced" in (Instance("w0", "worker", 0.0, expect="fenced").problem() or "")
    assert Instance("w2", "worker", 0.0, expect="killed", returncode=-9).problem() is None


def test_the_summary_names_the_seed_the_schedule_and_the_replay() -> None:
    result = _made_up_result()
    summary = result.summary()
    assert "seed 4: PROBLEMS" in summary
    assert "duplicated: 80" in summary and "FENCED_INSTANCE_ID" in summary
    assert "SIGSTOP w0, start its replacement" in summary
    assert "python -m eosclient.testing.nemesis --broker noida --seeds 4 --duration 20" in summary
    assert format_table([result]).splitlines()[-1].startswith("| noida | 4 | 0 | 80 |")


def test_the_report_is_one_self_contained_page(tmp_path: Path) -> None:
    path = write_report(_made_up_result(), tmp_path / "reports")
    assert path == (tmp_path / "reports" / "nemesis-noida-seed4.html").resolve()
    page = path.read_text()
    assert "src=" not in page and "<script" not in page and "http" not in page.replace(
        "http://www.w3.org/2000/svg", "")
    assert page.count("<svg") == 3
    for svg in page.split("<svg")[1:]:  # each chart is well-formed XML (escaped text inside)
        ET.fromstring("<svg" + svg.split("</svg>")[0] + "</svg>")
    for text in ("seed 4", "PROBLEM", "duplicated", "FENCED_INSTANCE_ID (82)", "&lt;&amp;&gt;",
                 "zombie stopped", "cut", "in/1", "--seeds 4"):
        assert text.replace("zombie stopped", "zombie: stopped") in page, text


# -- on the brokers --------------------------------------------------------------------------------

def _assert_clean(result: NemesisResult) -> None:
    assert not result.problems(), result.summary()
    assert result.faults_injected > 0, result.summary()


@pytest.mark.slow
@pytest.mark.proxy
@pytest.mark.parametrize("front", ["sync", pytest.param("asyncio", marks=pytest.mark.long)])
def test_a_short_schedule(broker: RunningBroker, tmp_path: Path, front: str) -> None:
    _short_schedule(broker, tmp_path, front)


@pytest.mark.slow
@pytest.mark.proxy
def test_a_short_schedule_with_the_asyncio_front(noida_broker: RunningBroker,
                                                 tmp_path: Path) -> None:
    # The asyncio front on one broker in the fast suite (both with --long): CI's time budget.
    _short_schedule(noida_broker, tmp_path, "asyncio")


def _short_schedule(broker: RunningBroker, tmp_path: Path, front: str) -> None:
    seed, seconds, records = QUICK[broker.kind]
    result = run_nemesis(broker, seed=seed, duration=seconds, records=records,
                         report_dir=tmp_path, asyncio=front == "asyncio")
    print(result.summary())
    assert result.report_path is not None and result.report_path.exists()
    logs = result.report_path.with_suffix(".log").read_text()
    assert logs.count("===== ") == len(result.instances)
    assert " INFO eosclient" in logs  # a stall is read from the workers' generations
    batches = result.report_path.with_suffix(".batches.txt").read_text().splitlines()
    assert any(line.endswith(" COMMIT") for line in batches)  # every output batch, one a line
    assert any(" records from " in line for line in batches)
    _assert_clean(result)


@pytest.mark.broker
def test_the_command_line_prints_a_row_per_seed(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    status = main(["--broker", "noida", "--seeds", "5", "--duration", "8", "--records",
                   "600", "--workers", "2", "--partitions", "2", "--report-dir",
                   str(tmp_path)])
    out = capsys.readouterr().out
    assert "nemesis schedule, seed 5" in out
    assert out.rstrip().splitlines()[-1].startswith("| noida | 5 |")
    assert (tmp_path / "nemesis-noida-seed5.html").exists()
    assert status in (0, 1)


@pytest.mark.long
@pytest.mark.proxy
@pytest.mark.parametrize("seed", LONG_SEEDS)
@pytest.mark.parametrize("front", ["sync", "asyncio"])
def test_long_run(broker: RunningBroker, seed: int, front: str, tmp_path: Path) -> None:
    result = run_nemesis(broker, seed=seed, duration=60, records=20_000,
                         report_dir=tmp_path, asyncio=front == "asyncio")
    print(format_table([result]))
    _assert_clean(result)


def test_copy_takes_key_equals_nothing_as_unset() -> None:
    # Extra members are dynamic: `eosclient copy --consumer-property group.instance.id=`.
    from eosclient.cli import _properties  # noqa: PLC0415

    assert _properties(["group.instance.id=", "session.timeout.ms=6000"]) == {
        "group.instance.id": None, "session.timeout.ms": 6000}
