"""One local Spark session for the whole test session (a JVM takes seconds to start)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from jobs import build_session
from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The session's Spark (started on first use, stopped at the end)."""
    session = build_session("eosclient-tests")
    yield session
    session.stop()
