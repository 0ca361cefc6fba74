"""Streaming queries on a standalone cluster (a master, two one-core workers: ``spark_cluster``)
whose executor JVM, worker or driver is SIGKILLed mid-batch, judged by the checker.

The driver is a child process (``cluster_job.py``); its tasks run in two executor JVMs started
by the workers, with Python workers below them running this environment's interpreter (the
held task reports it, and where it imported eosclient from: the installed package, as a user's
cluster has it). In batch 1 one task stops mid-batch (once per query); the test finds the
executor JVM above that task's Python worker and SIGKILLs it. The master starts a replacement
executor, the task runs again (on the other executor or the new one), and the query must finish
with every line in Kafka exactly once.

The driver kill: the test SIGKILLs the driver's process group (the Python driver and its JVM)
while the task is held, waits until the master lists the application completed and its
executors (with the held task's Python worker) are gone, then starts a new driver on the same
checkpoint: a second application, which must get executors and finish the query, every line
once.

``source`` mode reads a topic of committed and aborted transactions with the ``eosclient-kafka``
source (several micro-batches) and writes it with the data source writer; a UDF in the reading
task holds it at one record. The checker matches every output record to its input record by
its ``eos.src`` header: every committed record once, no aborted one.

The fast suite runs atomic mode on noida-db (about a minute on a two-core machine); with
``--long``, partitioned mode, the ``eosclient-kafka`` data source writer and the source on both
brokers, and atomic mode on Tansu; then every mode but the source on both brokers with the held
task's whole worker lost (worker and executor SIGKILLed together), and every mode on both
brokers with the driver killed and the query restarted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
from jobs import spark_env, write_inputs
from test_sink import check_output
from test_source import write as write_transactions
from test_writer_crash_points import in_order, visible

import eosclient
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import CheckReport, check
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
@pytest.mark.parametrize("mode", ["atomic", "partitioned", "writer", "source"])
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


@pytest.mark.long
@pytest.mark.parametrize("mode", ["atomic", "partitioned", "writer", "source"])
def test_the_driver_killed_mid_batch_and_the_query_restarted(
        spark_cluster: SparkCluster, broker: RunningBroker, unique_name: Names, tmp_path: Path,
        mode: str) -> None:
    # The driver's process group (the Python driver and its JVM) is SIGKILLed while batch 1's
    # task is held on an executor: in atomic mode the driver's transaction is open (the
    # ledger entry in it, the rows not yet arrived); in partitioned mode the held task's own
    # is (five rows handed to its producer); the writer's batch is undecided (the other
    # task's transaction prepared, or not yet; in source mode the other Kafka partition's
    # task's, while the held task's rows wait in its UDF; the batch's source offsets are in
    # the checkpoint, its commit is not). The master must end the application and its
    # executors (the held task's Python worker, now a zombie, with them), and a new driver on
    # the same checkpoint, a new application, must get executors and finish the query.
    query = prepare(broker, mode, unique_name, tmp_path)
    markers = tmp_path / "markers"
    started = time.monotonic()
    with (tmp_path / "driver.log").open("w+") as log:
        child = start_driver(spark_cluster, broker, query, tmp_path, log)
        try:
            held = wait_for_held(child, markers, log)
            executor = spark_cluster.executor_of(held["pid"])
            assert executor is not None, f"no executor JVM above {held}"
            os.killpg(child.pid, signal.SIGKILL)
            killed_at = time.monotonic() - started
            child.wait(IDLE_WAIT)
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
    assert child.returncode == -signal.SIGKILL
    zombie_gone, executors_gone, state = wait_released(spark_cluster, executor.app_id,
                                                       held["pid"])

    restarted_at = time.monotonic() - started
    with (tmp_path / "restarted.log").open("w+") as log:
        again = start_driver(spark_cluster, broker, query, tmp_path, log)
        try:
            again.wait(QUERY_WAIT)
        finally:
            if again.poll() is None:
                os.killpg(again.pid, signal.SIGKILL)
                again.wait()
        output = output_of(log)
    took = time.monotonic() - started
    print(f"{mode} on {broker.kind}: driver killed after {killed_at:.1f} s (batch "
          f"{HOLD_BATCH} held); then the zombie Python worker gone after {zombie_gone:.1f} s, "
          f"the application's executors after {executors_gone:.1f} s (master: {state}); "
          f"restarted after {restarted_at:.1f} s, query done after {took:.1f} s")
    assert again.returncode == 0, output[-4000:]
    assert (held["python"], held["eosclient"]) == (sys.executable, eosclient.__file__)

    # The restarted driver is a second application, which got executors of its own.
    apps = sorted(m.name.removeprefix("driver-") for m in markers.glob("driver-*"))
    assert len(apps) == 2 and apps[0] == executor.app_id, apps
    assert executor_dirs(spark_cluster, apps[1]), sorted(spark_cluster.log_dir.glob("worker-*/*"))
    wait_until_idle(spark_cluster, apps[1])

    report = judge(broker, query)
    if mode in {"atomic", "partitioned"}:  # one Spark partition per batch: in order too
        assert report.ok, str(report)
        # Batch 0 committed before the kill; the replay of batch 1 found no ledger entry (its
        # transaction was aborted when the restarted sink initialised its id) and wrote it.
        outcomes = json.loads(output.strip().splitlines()[-1])
        assert outcomes == [{"batch_id": b, "written": 1, "skipped": 0} for b in (1, 2)]


def run_with_a_killed_executor(cluster: SparkCluster, broker: RunningBroker, mode: str,
                               names: Names, tmp_path: Path, *, fault: str = "executor",
                               ) -> list[dict[str, int]]:
    """Run the query, SIGKILL the executor of the held task (or, ``fault="worker"``, its
    worker with it), check every line once; return the sink's outcomes."""
    query = prepare(broker, mode, names, tmp_path)
    markers = tmp_path / "markers"
    started = time.monotonic()
    with (tmp_path / "driver.log").open("w+") as log:
        child = start_driver(cluster, broker, query, tmp_path, log)
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

    report = judge(broker, query)
    if mode == "atomic":
        assert report.ok, str(report)
    outcomes: list[dict[str, int]] = json.loads(output.strip().splitlines()[-1])
    return outcomes


@dataclass(frozen=True, slots=True)
class Query:
    """A query's input and output: ``FILES`` text files under ``tmp_path / "in"`` (one per
    micro-batch) or, in ``source`` mode, the topic ``source`` of committed and aborted
    transactions; the output ``topic`` and the sink's id; what the output must hold."""

    mode: str
    topic: str
    sink_id: str
    source: str
    lines: list[str]  # the lines the output must hold (each + "!"); empty in source mode
    committed: int  # the records the output must hold


def prepare(broker: RunningBroker, mode: str, names: Names, tmp_path: Path) -> Query:
    """Create the topics, write the query's input, make the markers' directory."""
    (tmp_path / "markers").mkdir()
    topic, sink_id = topics.create_topic(broker, names("out"), 2), names("sink")
    if mode == "source":  # 6 transactions of 30 records, 2 of them aborted
        source = topics.create_topic(broker, names("in"), 2)
        committed = write_transactions(broker, source, names("w"), range(6))
        return Query(mode, topic, sink_id, source, [], committed)
    lines = write_inputs(tmp_path / "in", FILES, LINES)
    in_order(tmp_path / "in")
    return Query(mode, topic, sink_id, "", lines, len(lines))


def judge(broker: RunningBroker, query: Query) -> CheckReport:
    """Check that readers see every line (or committed source record) exactly once, nothing
    else (an aborted source record included), and return the checker's report for the order.
    The text is matched by value; the source's records by the ``eos.src`` header."""
    visible(broker.bootstrap_servers, query.topic, query.committed)
    if query.mode == "source":
        report = check(broker.bootstrap_servers, query.source, query.topic)
    else:
        report = check_output(broker, query.topic, query.lines)
    totals = report.totals  # the writers' order is not checked (repartition, keyless rows)
    assert (totals.lost, totals.duplicated, totals.unexpected) == (0, 0, 0), str(report)
    assert report.output_records == query.committed, str(report)
    return report


def start_driver(cluster: SparkCluster, broker: RunningBroker, query: Query, tmp_path: Path,
                 log: IO[str]) -> subprocess.Popen[str]:
    """``cluster_job.py`` in a child process and a session of its own (its process group: the
    Python driver and its JVM, killed together), its checkpoint and markers under
    ``tmp_path``, its output to ``log``."""
    return subprocess.Popen(
        [sys.executable, str(CLUSTER_JOB), query.mode, "--master", cluster.master_url,
         "--bootstrap", broker.bootstrap_servers, "--topic", query.topic, "--sink-id",
         query.sink_id, "--source-topic", query.source, "--input", str(tmp_path / "in"),
         "--checkpoint", str(tmp_path / "checkpoint"), "--markers", str(tmp_path / "markers"),
         "--hold-batch", str(HOLD_BATCH)],
        env={**os.environ, **spark_env()}, stdout=log, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)


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


def wait_released(cluster: SparkCluster, app_id: str, worker_pid: int,
                  ) -> tuple[float, float, str]:
    """After the driver of ``app_id`` was killed: seconds until process ``worker_pid`` (the
    held task's Python worker, whose task is a zombie now) is gone, seconds until the
    application's executors are, and the state the master gives the application once it lists
    it completed."""
    started = time.monotonic()
    zombie_gone = executors_gone = None
    while True:
        now = time.monotonic() - started
        if zombie_gone is None and not alive(worker_pid):
            zombie_gone = now
        if executors_gone is None and not [e for e in cluster.executors() if e.app_id == app_id]:
            executors_gone = now
        view = cluster.status()
        states = [a.get("state") for a in view.get("completedapps", []) if a.get("id") == app_id]
        if zombie_gone is not None and executors_gone is not None and states:
            return zombie_gone, executors_gone, str(states[0])
        assert now < IDLE_WAIT, (f"{app_id}'s driver killed {now:.0f} s ago: zombie gone after "
                                 f"{zombie_gone}, executors after {executors_gone}; "
                                 f"master: {view}")
        time.sleep(0.2)


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (dead, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def executor_dirs(cluster: SparkCluster, app_id: str) -> list[Path]:
    """Every executor the workers started for ``app_id`` (each has a work directory)."""
    return sorted(cluster.log_dir.glob(f"worker-*/{app_id}/*"))


def wait_until_idle(cluster: SparkCluster, app_id: str) -> None:
    """Wait until the application's executors are gone (the next test needs both cores)."""
    deadline = time.monotonic() + IDLE_WAIT
    while left := [e for e in cluster.executors() if e.app_id == app_id]:
        assert time.monotonic() < deadline, f"{app_id} ended, its executors still run: {left}"
        time.sleep(0.2)
