"""The docs' python blocks marked ``spark`` run, with this session's Spark, on a noida-db broker
of their page's own (tests/integration/test_doc_snippets.py runs the others)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from doc_snippets import ADDRESS, PAGES, ROOT, run_page, snippets
from eosclient.testing.brokers import start_broker

_SPARK = {page: [s for s in snippets(page) if s.mark == "spark"] for page in PAGES}


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.noida
@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", [p for p in PAGES if _SPARK[p]],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_spark_blocks_of_a_page_run(page: Path, spark: SparkSession, tmp_path: Path) -> None:
    with start_broker("noida", data_dir=tmp_path / "data", log_dir=tmp_path) as broker:
        run_page(_SPARK[page], {ADDRESS: broker.bootstrap_servers,
                                "/tmp/upper-checkpoint": str(tmp_path / "checkpoint")},
                 spark=spark)
