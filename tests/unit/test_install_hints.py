"""A message that explains a missing dependency says how to install it as README.md's Install
section does today, not with a command that fails."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from eosclient._extras import install_extra

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "src" / "eosclient").rglob("*.py"))


def test_no_message_says_pip_install_eosclient_from_the_index() -> None:
    # `pip install "eosclient[spark]"` (and [compression], [broker], [testing]) was what the
    # errors said; eosclient is not on the package index, so each of them failed as copied.
    said = [f"{path.relative_to(ROOT)}:{number}"
            for path in SOURCES
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if re.search(r"pip install \W*eosclient\[", line)]
    assert said == []


def test_every_extra_named_is_one_the_readme_installs() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    readme = (ROOT / "README.md").read_text()
    calls = [node for path in SOURCES for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "install_extra"]
    named = {call.args[0].value for call in calls if isinstance(call.args[0], ast.Constant)}
    assert named >= {"compression", "spark", "broker", "testing"}
    for extra in named:
        assert extra in extras
        command = f'pip install ".[{extra}]"'
        assert command in install_extra(extra) and command in readme, extra
