"""The ``eosclient-kafka`` data source from a Spark Connect client (needs pyspark's ``connect``
extra: grpcio, pandas, ...; --long, as it starts a Connect server in a process of its own)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from jobs import spark_env, write_inputs

from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.long]

CONNECT_JOB = Path(__file__).resolve().parent / "connect_job.py"


def test_writer_source_and_foreach_batch_work_from_a_connect_client(
        noida_broker: RunningBroker, tmp_path: Path) -> None:
    pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect]")
    pytest.importorskip("pandas", reason="Spark Connect needs pyspark[connect]")
    for name in ("connect-written", "connect-copied", "connect-foreach", "connect-atomic"):
        topics.create_topic(noida_broker, name, 2)
    expected = len(write_inputs(tmp_path / "in", 2, 20))
    child = subprocess.run(
        [sys.executable, str(CONNECT_JOB), "--bootstrap", noida_broker.bootstrap_servers,
         "--input", str(tmp_path / "in"), "--work", str(tmp_path)],
        env={**os.environ, **spark_env()}, capture_output=True, text=True, timeout=300,
        check=False, cwd=Path(__file__).resolve().parent)
    assert child.returncode == 0, child.stdout + child.stderr[-3000:]
    counts = dict(line.split() for line in child.stdout.splitlines() if line.count(" ") == 1)
    assert counts == {"writer": str(expected), "source": str(expected),
                      "foreachBatch": str(expected), "atomic": str(expected)}, child.stdout
