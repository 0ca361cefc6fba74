"""The data source writer's driver SIGKILLed for real around its commit, on both brokers.

A child process runs the query (``writer_kill_job.py``, three tasks per batch); at a crash point
of batch 1 its commit step SIGKILLs the driver's whole process group. The query is restarted
here from the same checkpoint: the restarted driver finishes a decided batch when it plans its
first batch (before any task can touch a transactional id), and the replay of an undecided one
aborts the dead attempt's transactions (its tasks initialise the same ids). A read_committed
reader polls the topic the whole time: every line exactly once at the end, and no batch ever
seen in part: the gate the dead driver left open holds the batch until the restarted driver
releases it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from jobs import spark_env, start_writer_query, write_inputs
from pyspark.sql import SparkSession
from test_sink import check_output
from test_writer_crash_points import LINES, in_order, visible

from eosclient.spark._driver import CRASH_ENV
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker]

Names = Callable[[str], str]
KILL_JOB = Path(__file__).resolve().parent / "writer_kill_job.py"
FILES = 3


class Poller(threading.Thread):
    """A read_committed reader polling the topic: what it saw of each input file (one file is
    one batch), each time, in all and on each partition."""

    def __init__(self, servers: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.servers, self.topic = servers, topic
        self.views: list[dict[int, int]] = []
        self.by_partition: list[dict[tuple[int, int], int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        last = False
        while not last:  # once more after stop: the last view sees the end
            last = self.stop.is_set()
            view: dict[int, int] = {}
            parts: dict[tuple[int, int], int] = {}
            for r in read_topic(self.servers, self.topic):
                if r.value:
                    v = r.value.decode()
                    file = int(v[1:v.index("-")])
                    view[file] = view.get(file, 0) + 1
                    parts[r.partition, file] = parts.get((r.partition, file), 0) + 1
            self.views.append(view)
            self.by_partition.append(parts)
            self.stop.wait(0.05)

    def partial_views(self) -> list[dict[int, int]]:
        """Views with a file seen in part, or a file seen beyond its lines (a duplicate)."""
        return [v for v in self.views if any(n != LINES for n in v.values())]

    def partial_on_a_partition(self) -> list[dict[tuple[int, int], int]]:
        """Views with a batch's records on one partition seen in part (the final view says
        how many each partition has; the gate's release is one transaction, which Kafka makes
        visible a partition at a time, so across partitions this is what holds strictly)."""
        final = self.by_partition[-1]
        return [v for v in self.by_partition if any(n != final.get(k) for k, n in v.items())]

    def partial_twice_running(self) -> int:
        """How often a batch was seen in part (across partitions) in two polls in a row."""
        return sum(1 for a, b in zip(self.views, self.views[1:], strict=False)
                   if any(n != LINES for n in a.values())
                   and any(n != LINES for n in b.values()))


def kill_driver(broker: RunningBroker, topic: str, sink_id: str, tmp_path: Path,
                point: str) -> None:
    env = {**os.environ, **spark_env(), CRASH_ENV: f"{point}:1:kill=<own group>"}
    child = subprocess.run(
        [sys.executable, str(KILL_JOB), "--bootstrap", broker.bootstrap_servers, "--topic",
         topic, "--sink-id", sink_id, "--input", str(tmp_path / "in"), "--checkpoint",
         str(tmp_path / "checkpoint")],
        env=env, capture_output=True, text=True, timeout=150, check=False,
        start_new_session=True)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr[-3000:]


# One point runs in CI on both brokers (a child Spark driver costs a JVM start); the others run
# with --long. test_writer_crash_points.py covers every point in CI without the extra JVM.
@pytest.mark.parametrize("point", [
    "mid_commit",
    pytest.param("before_decision", marks=pytest.mark.long),
    pytest.param("after_decision", marks=pytest.mark.long),
    pytest.param("after_commit", marks=pytest.mark.long),  # all ended, the gate still open
])
def test_a_killed_driver_leaves_each_batch_whole(
        spark: SparkSession, broker: RunningBroker, unique_name: Names, tmp_path: Path,
        point: str) -> None:
    topic = topics.create_topic(broker, unique_name("out"), 2)
    sink_id = unique_name("sink")
    expected = write_inputs(tmp_path / "in", FILES, LINES)
    in_order(tmp_path / "in")
    started = time.monotonic()
    kill_driver(broker, topic, sink_id, tmp_path, point)
    print(f"killed after {time.monotonic() - started:.1f} s")

    poller = Poller(broker.bootstrap_servers, topic)
    poller.start()
    try:
        query = start_writer_query(spark, tmp_path / "in", tmp_path / "checkpoint",
                                   servers=broker.bootstrap_servers, topic=topic,
                                   sink_id=sink_id, tasks=3)
        assert query.awaitTermination(120), "the restarted query did not finish"
        assert query.exception() is None
        print(f"restarted query done after {time.monotonic() - started:.1f} s")
        visible(broker.bootstrap_servers, topic, len(expected))
    finally:
        poller.stop.set()
        poller.join(30)
    totals = check_output(broker, topic, expected).totals  # no order: repartition() shuffles
    assert (totals.lost, totals.duplicated, totals.unexpected) == (0, 0, 0), str(totals)
    # mid_commit: the dead driver committed one of batch 1's three transactions (after_commit:
    # all three), behind the gate it left open; readers saw none of batch 1 until the restarted
    # driver finished the batch and aborted that gate, first thing.
    assert poller.views and poller.views[-1] == dict.fromkeys(range(FILES), LINES)
    assert poller.partial_on_a_partition() == []
