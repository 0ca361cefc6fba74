"""Every python block of README.md and docs/*.md runs, on a noida-db broker of its page's own,
so the docs cannot show code that does not work. Blocks marked ``spark`` run in
tests/spark/test_doc_snippets_spark.py; blocks marked ``skip`` must say why (doc_snippets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from doc_snippets import ADDRESS, PAGES, ROOT, run_page, snippets
from eosclient.testing.brokers import start_broker

_RUNNABLE = {page: [s for s in snippets(page) if not s.mark] for page in PAGES}


@pytest.mark.broker
@pytest.mark.noida
@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", [p for p in PAGES if _RUNNABLE[p]],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_python_blocks_of_a_page_run(page: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # what a block writes (a report directory) lands here
    with start_broker("noida", data_dir=tmp_path / "data", log_dir=tmp_path) as broker:
        run_page(_RUNNABLE[page], {ADDRESS: broker.bootstrap_servers})


def test_every_block_either_runs_or_says_why_not() -> None:
    marks = [s for page in PAGES for s in snippets(page) if s.mark]
    for snippet in marks:
        assert snippet.mark in ("skip", "spark"), f"{snippet.where}: unknown mark {snippet.mark}"
        if snippet.mark == "skip":
            assert len(snippet.why) > 10, f"{snippet.where}: a skipped block must say why"
    assert sum(len(snippets(page)) for page in PAGES) > 10  # the pattern still finds blocks
