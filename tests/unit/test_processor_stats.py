"""The processor's records/s: committed records over the time up to the last commit."""

from __future__ import annotations

import time

from eosclient._processor.stats import ProcessorStats, StatsCounter


def test_an_idle_wait_after_the_last_commit_does_not_dilute_the_rate() -> None:
    # docs/processor.md's example showed 4 records/s for 21 records: the idle_timeout after
    # them was counted.
    counter = StatsCounter()
    counter.started()
    counter.committed(21, 21)
    time.sleep(0.3)  # the idle wait
    stats = counter.snapshot()
    assert stats.elapsed >= 0.3
    assert stats.busy is not None and stats.busy < 0.1
    assert stats.records_per_second > 21 / 0.1


def test_before_the_first_commit_the_rate_is_zero_and_busy_is_elapsed() -> None:
    counter = StatsCounter()
    counter.started()
    stats = counter.snapshot()
    assert stats.records_per_second == 0.0
    assert stats.busy == stats.elapsed


def test_a_snapshot_made_without_busy_counts_the_whole_run() -> None:
    assert ProcessorStats(10, 10, 1, 0, 2.0).records_per_second == 5.0
