"""Every python block of README.md and docs/*.md runs as a reader would paste it: alone, in a
fresh interpreter, in the page's order, on a noida-db broker of its page's own, so the docs
cannot show code that does not work as copied. Blocks marked ``spark`` run in
tests/spark/test_doc_snippets_spark.py; ``fragment`` and ``skip`` blocks must be marked so
(doc_snippets), and tests/unit/test_docs.py checks them all without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from doc_snippets import ADDRESS, MARKS, PAGES, ROOT, run_alone, runnable, snippets
from eosclient.testing.brokers import start_broker


@pytest.mark.broker
@pytest.mark.noida
@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_python_blocks_of_a_page_run_alone(page: Path, tmp_path: Path) -> None:
    # The blocks used to run in one shared namespace: two docs/asyncio.md blocks used an
    # `import asyncio` of an earlier block and failed as copied (NameError).
    with start_broker("noida", data_dir=tmp_path / "data", log_dir=tmp_path) as broker:
        for snippet in runnable(page):
            run_alone(snippet, {ADDRESS: broker.bootstrap_servers}, tmp_path)


def test_every_block_either_runs_or_says_why_not() -> None:
    marks = [s for page in PAGES for s in snippets(page) if s.mark]
    for snippet in marks:
        assert snippet.mark in MARKS, f"{snippet.where}: unknown mark {snippet.mark}"
        if snippet.mark in ("skip", "fragment"):
            assert len(snippet.why) > 10, f"{snippet.where}: a {snippet.mark} must say why"
    assert sum(len(snippets(page)) for page in PAGES) > 10  # the pattern still finds blocks
