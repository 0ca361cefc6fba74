"""The docs site builds with ``mkdocs build --strict`` (a broken link, a docstring the API pages
cannot parse, or a missing page fails it), lists every page in its nav, and its settings page
names every setting."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from eosclient.config import ConsumerConfig, ProducerConfig

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                             "--site-dir", str(tmp_path / "site")], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    assert "No module named mkdocs" not in result.stderr, "install the docs extra"
    assert result.returncode == 0, result.stdout + result.stderr
    settings = (tmp_path / "site" / "settings" / "index.html").read_text()
    assert "transactional.id" in settings and "isolation.level" in settings
    api = (tmp_path / "site" / "reference" / "clients" / "index.html").read_text()
    assert "send_offsets_to_transaction" in api and "records" in api


def test_every_page_is_in_the_nav() -> None:
    # A page added to docs/ without a nav line builds, but no reader can find it.
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:", 1)[1]
    listed = set(re.findall(r":\s*([\w/-]+\.md)\s*$", nav, re.M))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages - listed == set(), "pages missing from the nav in mkdocs.yml"
    assert listed - pages == set()  # settings.md too: scripts/gen_docs.py writes it


@pytest.mark.parametrize("cls", [ProducerConfig, ConsumerConfig])
def test_the_settings_page_names_every_setting(cls: type[ProducerConfig | ConsumerConfig],
                                               ) -> None:
    page = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs_settings.py")],
                          capture_output=True, text=True, check=True).stdout
    for spec in dataclasses.fields(cls):
        assert f"| `{spec.metadata['key']}` | `{spec.name}` |" in page, spec.name
