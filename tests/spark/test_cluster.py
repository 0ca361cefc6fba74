"""Streaming queries on a standalone cluster (a master, two one-core workers: ``spark_cluster``)
whose executor JVM is SIGKILLed mid-batch, judged by the checker.

The driver is a child process (``cluster_job.py``); its tasks run in two executor JVMs started
by the workers, with Python workers below them running this environment's interpreter (the
held task reports it, and where it imported eosclient from: the installed package, as a user's
cluster has it). In batch 1 one task stops mid-batch (once per query); the test finds the
executor JVM above that task's Python worker and SIGKILLs it. The master starts a replacement
executor, the task runs again (on the other executor or the new one), and the query must finish
with every line in Kafka exactly once.

The fast suite runs atomic mode on noida-db (about a minute on a two-core machine); with
``--long``, partitioned mode and the ``eosclient-kafka`` data source writer on both brokers, and
atomic mode on Tansu; then every mode on both brokers with the held task's whole worker lost
(worker and executor SIGKILLed together).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest
from jobs import spark_env, write_inputs
from test_sink import check_output
from test_writer_crash_points import in_order, visible

import eosclient
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.spark_cluster import SparkCluster

pytestmark = [pytest.mark.spark, pytest.mark.broker]

Names = Callable[[str], str]
CLUSTER_JOB = Path(__file__).resolve().parent / "cluster_job.py"
FILES, LINES = 3, 40
HOLD_BATCH = 1
HELD_WAIT = 120.0  # a driver JVM, two executors and a batch, on a loaded two-core machine
QUERY_WAIT = 150.0
IDLE_WAIT = 30.0


def test_atomic_survives_an_executor_killed_mid_batch(
        spark_cluster: SparkCluster, noida_broker: RunningBroker, unique_name: Names,
        tmp_path: Path) -> None:
    outcomes = run_with_a_killed_executor(spark_cluster, noida_broker, "atomic", unique_name,
                                          tmp_path)
    # One transaction per batch; batch 1 was written once, by the driver, after the retry.
    assert outcomes == [{"batch_id": b, "written": 1, "skipped": 0} for b in range(FILES)]


@pytest.mark.long
@pytest.mark.parametrize("mode", ["atomic", "partitioned", "writer"])
def test_an_executor_killed_mid_batch(
        spark_cluster: SparkCluster, broker: RunningBroker, unique_name: Names, tmp_path: Path,
        mode: str) -> None:
    if mode == "atomic" and broker.kind == "noida":
        pytest.skip("the fast suite runs it")
    outcomes = run_with_a_killed_executor(spark_cluster, broker, mode, unique_name, tmp_path)
    if mode == "partitioned":  # one Spark partition per batch (one file): one transaction
        assert outcomes == [{"batch_id": b, "written": 1, "skipped": 0} for b in range(FILES)]


@pytest.mark.long
@pytest.mark.parametrize("mode", ["atomic", "partitioned", "writer"])
def test_a_worker_lost_mid_batch(
        spark_cluster: SparkCluster, broker: RunningBroker, unique_name: Names, tmp_path: Path,
        mode: str) -> None:
    # The held task's worker and its executor are SIGKILLed together, as a lost host: the
    # master cannot replace the executor (the other worker's one core is taken), so the task
    # runs again on the remaining executor. A new worker takes the lost one's place after.
    try:
        outcomes = run_with_a_killed_executor(spark_cluster, broker, mode, unique_name,
                                              tmp_path, fault="worker")
    finally:
        while spark_cluster.alive_workers() < 2:
            spark_cluster.add_worker()
    if mode != "writer":
        assert outcomes == [{"batch_id": b, "written": 1, "skipped": 0} for b in range(FILES)]


def run_with_a_killed_executor(cluster: SparkCluster, broker: RunningBroker, mode: str,
                               names: Names, tmp_path: Path, *, fault: str = "executor",
                               ) -> list[dict[str, int]]:
    """Run the query, SIGKILL the executor of the held task (or, ``fault="worker"``, its
    worker with it), check every line once; return the sink's outcomes."""
    topic = topics.create_topic(broker, names("out"), 2)
    expected = write_inputs(tmp_path / "in", FILES, LINES)
    in_order(tmp_path / "in")
    markers = tmp_path / "markers"
    markers.mkdir()
    started = time.monotonic()
    with (tmp_path / "driver.log").open("w+") as log:
        child = subprocess.Popen(
            [sys.executable, str(CLUSTER_JOB), mode, "--master", cluster.master_url,
             "--bootstrap", broker.bootstrap_servers, "--topic", topic, "--sink-id",
             names("sink"), "--input", str(tmp_path / "in"), "--checkpoint",
             str(tmp_path / "checkpoint"), "--markers", str(markers), "--hold-batch",
             str(HOLD_BATCH)],
            env={**os.environ, **spark_env()}, stdout=log, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)  # its group: the driver and its JVM, killed together
        try:
            held = wait_for_held(child, markers, log)
            executor = cluster.executor_of(held["pid"])
            assert executor is not None, f"no executor JVM above {held}"
            if fault == "worker":
                cluster.kill_worker(executor.worker)
            else:
                cluster.kill_executor(executor)
            killed_at = time.monotonic() - started
            child.wait(QUERY_WAIT)
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        output = output_of(log)
    took = time.monotonic() - started
    lost = " with its worker" if fault == "worker" else ""
    print(f"{mode} on {broker.kind}: executor {executor.executor_id} killed{lost} after "
          f"{killed_at:.1f} s, query done after {took:.1f} s")
    assert child.returncode == 0, output[-4000:]
    # The executors import eosclient from this environment, with this interpreter.
    assert (held["python"], held["eosclient"]) == (sys.executable, eosclient.__file__)

    # The held task ran again; the master started a replacement executor for the app (on
    # the worker that lost one; a lost worker's executor has no place to be replaced).
    attempts = sorted(markers.glob(f"ran-{HOLD_BATCH}-{held['partition']}-*"))
    assert len(attempts) >= 2, sorted(markers.iterdir())
    if fault == "executor":
        started_executors = executor_dirs(cluster, executor.app_id)
        assert len(started_executors) >= 3, started_executors
    wait_until_idle(cluster, executor.app_id)

    visible(broker.bootstrap_servers, topic, len(expected))
    report = check_output(broker, topic, expected)
    totals = report.totals  # the writer's repartition() shuffles lines: no order to check
    assert (totals.lost, totals.duplicated, totals.unexpected) == (0, 0, 0), str(report)
    if mode == "atomic":
        assert report.ok, str(report)
    outcomes: list[dict[str, int]] = json.loads(output.strip().splitlines()[-1])
    return outcomes


def wait_for_held(child: subprocess.Popen[str], markers: Path, log: IO[str],
                  ) -> dict[str, Any]:
    """What the held task's Python worker wrote, once it is there."""
    deadline = time.monotonic() + HELD_WAIT
    while not (found := sorted(markers.glob("held-*[0-9]"))):
        assert child.poll() is None, "the driver exited first:\n" + output_of(log)[-4000:]
        assert time.monotonic() < deadline, "no task was held:\n" + output_of(log)[-4000:]
        time.sleep(0.1)
    held: dict[str, Any] = json.loads(found[0].read_text())
    return held


def output_of(log: IO[str]) -> str:
    log.flush()
    log.seek(0)
    return log.read()


def executor_dirs(cluster: SparkCluster, app_id: str) -> list[Path]:
    """Every executor the workers started for ``app_id`` (each has a work directory)."""
    return sorted(cluster.log_dir.glob(f"worker-*/{app_id}/*"))


def wait_until_idle(cluster: SparkCluster, app_id: str) -> None:
    """Wait until the application's executors are gone (the next test needs both cores)."""
    deadline = time.monotonic() + IDLE_WAIT
    while left := [e for e in cluster.executors() if e.app_id == app_id]:
        assert time.monotonic() < deadline, f"{app_id} ended, its executors still run: {left}"
        time.sleep(0.2)
