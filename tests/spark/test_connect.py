"""The ``eosclient-kafka`` data source and ``ExactlyOnceKafkaSink`` from a Spark Connect client
(pyspark's ``connect`` extra: grpcio, pandas, ..., in the ``test`` extra), the client in a
process of its own (``connect_job.py``): the writer, the streaming source, the batch read, and
``foreachBatch`` in ``datasource``, ``atomic`` and ``partitioned`` mode (the last through
``mapInArrow``: a Connect DataFrame has no ``rdd``), each to a topic of its own, each topic's
committed records numbering the input's lines.

Twice: against the local server pyspark starts for ``remote("local[2]")``, and against a real
one, ``eosclient.testing.spark_connect``'s ``SparkConnectServer`` process on the standalone
cluster (``spark_cluster``: its tasks run in the two workers' executor JVMs), reached at
``sc://127.0.0.1:PORT``, on both brokers. All ``--long``: each starts JVMs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from jobs import spark_env, write_inputs

from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.spark_cluster import SparkCluster
from eosclient.testing.spark_connect import (
    SERVER_NAME,
    SparkConnectServer,
    start_connect_server,
)

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.long]

Names = Callable[[str], str]
CONNECT_JOB = Path(__file__).resolve().parent / "connect_job.py"
TOPICS = ("written", "copied", "foreach", "atomic", "partitioned")
JOB_WAIT = 420.0  # five queries and a read through a server on a loaded two-core machine


@pytest.fixture(scope="module")
def connect_server(spark_cluster: SparkCluster,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkConnectServer]:
    """A Connect server whose application runs on the standalone cluster (stopped when this
    module's tests end, which gives the cluster's executors back to the other tests)."""
    pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect]")
    with start_connect_server(cluster=spark_cluster,
                              log_dir=tmp_path_factory.mktemp("connect-server")) as server:
        yield server


def test_the_paths_work_from_a_client_of_a_local_connect_server(
        noida_broker: RunningBroker, unique_name: Names, tmp_path: Path) -> None:
    run_connect_job("local[2]", noida_broker, unique_name("connect"), tmp_path)


def test_the_paths_work_from_a_client_of_a_connect_server_on_the_cluster(
        connect_server: SparkConnectServer, spark_cluster: SparkCluster,
        broker: RunningBroker, unique_name: Names, tmp_path: Path) -> None:
    try:
        run_connect_job(connect_server.url, broker, unique_name("connect"), tmp_path)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- connect server log ---\n"
                             f"{connect_server.log_tail()}") from None
    # The server is an application of the cluster, and its tasks ran in the workers' executors.
    apps = {app["id"] for app in spark_cluster.status().get("activeapps", [])
            if app.get("name") == SERVER_NAME}
    assert apps, spark_cluster.status()
    assert {e.app_id for e in spark_cluster.executors()} & apps


def run_connect_job(remote: str, broker: RunningBroker, prefix: str, tmp_path: Path) -> None:
    pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect]")
    pytest.importorskip("pandas", reason="Spark Connect needs pyspark[connect]")
    for name in TOPICS:
        topics.create_topic(broker, f"{prefix}-{name}", 2)
    expected = str(len(write_inputs(tmp_path / "in", 2, 20)))
    child = subprocess.run(
        [sys.executable, str(CONNECT_JOB), "--bootstrap", broker.bootstrap_servers,
         "--input", str(tmp_path / "in"), "--work", str(tmp_path), "--remote", remote,
         "--prefix", prefix],
        env={**os.environ, **spark_env()}, capture_output=True, text=True, timeout=JOB_WAIT,
        check=False, cwd=Path(__file__).resolve().parent)
    assert child.returncode == 0, child.stdout + child.stderr[-3000:]
    counts = dict(line.split() for line in child.stdout.splitlines() if line.count(" ") == 1)
    assert counts == {"writer": expected, "source": expected, "foreachBatch": expected,
                      "atomic": expected, "partitioned": expected, "batch": expected}, \
        child.stdout
