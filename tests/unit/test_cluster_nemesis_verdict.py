"""The front targets' verdict, sans-IO: which part of a run's log a failure prints."""

from __future__ import annotations

from eosclient.testing.cluster_nemesis._front_verdict import FrontNemesisResult
from eosclient.testing.cluster_nemesis._schedule import make_schedule
from eosclient.testing.cluster_nemesis._verdict import ClusterNemesisResult


def _result(lines: list[str], liveness: list[str]) -> FrontNemesisResult:
    feed = ClusterNemesisResult("eosclient", make_schedule(9, duration=8, target="processor"),
                                loop_seconds=8.1, log_lines=lines)
    return FrontNemesisResult("processor", "noida", False, feed, liveness=liveness,
                              slowest_commit=0.2, slowest_commit_at=3.0)


def test_a_target_that_did_not_catch_up_shows_what_its_clients_said_after_the_writer() -> None:
    lines = [f"t={t:.3f}s w0 eosclient.consumer DEBUG line {t}" for t in (1.0, 7.5, 9.0)]
    lines.append("t=36.243s w0 eosclient.consumer WARNING group 'g': no generation for 30 s "
                 "(JoinGroup in flight)")
    result = _result(lines, ["the group's committed offsets did not reach the input's end"])
    assert result.window() == (8.1, 36.243)
    summary = result.summary()
    assert "no generation for 30 s (JoinGroup in flight)" in summary
    assert "line 7.5" in summary and "line 1.0" not in summary  # 3 s either side


def test_a_run_that_caught_up_shows_its_slowest_commit() -> None:
    assert _result(["t=1.000s w0 x DEBUG y"], []).window() == (3.0, 3.2)
