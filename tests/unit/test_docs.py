"""Docs pages drawn from code must match the code they are drawn from, and every python block
of README.md and docs/*.md is whole (tests/integration/test_doc_snippets.py runs them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from doc_snippets import PAGES, Snippet, snippets

ROOT = Path(__file__).resolve().parents[2]


def test_generated_docs_are_current() -> None:
    # A table row changed without `scripts/gen_docs.py` leaves docs/ describing old behaviour.
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# Whole programs: the blocks that run, and those that would with a cluster of their own.
_WHOLE = ("", "skip")


def _blocks_as_files(directory: Path, marks: tuple[str, ...] = _WHOLE) -> dict[str, Snippet]:
    files = {}
    for page in PAGES:
        for snippet in snippets(page):
            if snippet.mark in marks:
                (directory / snippet.file_name).write_text(snippet.code)
                files[snippet.file_name] = snippet
    return files


def test_every_block_compiles() -> None:
    # Fragments and skipped blocks are not run: a typo in one would go unseen.
    for page in PAGES:
        for snippet in snippets(page):
            if snippet.mark != "spark":
                compile(snippet.code, snippet.where, "exec")


def test_every_whole_block_defines_what_it_uses(tmp_path: Path) -> None:
    # Two docs/asyncio.md blocks used `asyncio` imported by an earlier block: they ran in the
    # tests (one namespace per page) and failed as copied. Without a broker: ruff's F821.
    files = _blocks_as_files(tmp_path)
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select",
                             "F821", "--output-format", "concise", "--no-cache", str(tmp_path)],
                            capture_output=True, text=True, check=False)
    found = [line for line in result.stdout.splitlines() if "F821" in line]
    where = [f"{files[Path(line.split(':')[0]).name].where}: {line.split(' ', 1)[1]}"
             for line in found]
    assert result.returncode == 0 and not where, where or result.stderr
    assert len(files) > 10


# Blocks that run but cannot pass `mypy --strict` yet, by page and a line of theirs, with why.
# Each must still fail (the test says when one passes: take it off the list).
_NOT_STRICT_YET: dict[tuple[str, str], str] = {}


def test_every_whole_block_passes_mypy_strict(tmp_path: Path) -> None:
    # A reader who type-checks their code copies these blocks too: untyped callbacks and
    # `record.value.upper()` on a `bytes | None` passed the run and failed strict mypy.
    files = _blocks_as_files(tmp_path)
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                             str(ROOT / "pyproject.toml"), "--strict", "--cache-dir",
                             str(tmp_path / ".mypy_cache"), *sorted(files)],
                            cwd=tmp_path, capture_output=True, text=True, check=False,
                            env={**os.environ, "MYPYPATH": str(ROOT / "src")})
    failing = {line.split(":")[0] for line in result.stdout.splitlines() if ": error:" in line}
    assert failing <= set(files), result.stdout  # errors only in the blocks themselves
    expected = {name for name, snippet in files.items()
                for page, line in _NOT_STRICT_YET
                if snippet.where.startswith(page + ":") and line in snippet.code}
    assert len(expected) == len(_NOT_STRICT_YET), "a listed block is gone: update the list"
    assert failing - expected == set(), result.stdout
    assert expected - failing == set(), "these pass strict now: take them off the list"


_LINK = re.compile(r"\]\(([^)\s#]+\.md)(?:#[^)]*)?\)")


def test_every_link_between_pages_finds_its_page() -> None:
    # docs/index.md and docs/migrating.md linked settings.md, which existed only in a built
    # site: `mkdocs build --strict` passed and the link was broken wherever the pages are read
    # as they are. Links are checked against the files, not the site.
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = [f"{page.relative_to(ROOT)}: {target}" for page in pages
              for target in _LINK.findall(page.read_text())
              if "://" not in target and not (page.parent / target).resolve().is_file()]
    assert broken == []
