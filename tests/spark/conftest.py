"""One local Spark session for the whole test session (a JVM takes seconds to start), and one
standalone cluster (a master and two one-core workers) for the tests that need executors in
other JVMs; the cluster's log tails are added to the report of a test that fails with it."""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest
from jobs import build_session
from pyspark.sql import SparkSession

from eosclient.testing.spark_cluster import SparkCluster, start_spark_cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The session's Spark (started on first use, stopped at the end)."""
    session = build_session("eosclient-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A standalone master and two workers of one core each on loopback (started on first use,
    stopped at the end, nothing left running); logs under the session's temporary directory."""
    with start_spark_cluster(log_dir=tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None],
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    cluster = (getattr(item, "funcargs", None) or {}).get("spark_cluster")
    if report.failed and isinstance(cluster, SparkCluster):
        report.sections.append((f"spark cluster logs ({cluster.log_dir})", cluster.log_tails()))
    return report
