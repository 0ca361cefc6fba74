"""The fenced ``python`` blocks of README.md and docs/*.md, for the tests that run them.

A block runs as a reader would paste it: **alone, in a fresh interpreter** (``python
BLOCK.py``), so it must import and define every name it uses. The blocks of a page run in the
page's order against one broker, so a later block may read what an earlier one wrote, as a
reader's would. The address ``127.0.0.1:9092`` is replaced by the test broker's. A comment line
right before the fence changes that:

    <!-- snippet: fragment WHAT --> a part of a program, shown on its own: not run (only
                                    compiled); WHAT says what it is part of, or what it lacks
    <!-- snippet: skip REASON -->   a whole program that cannot run here (a real cluster,
                                    credentials); REASON says why. It is still checked for
                                    undefined names and with mypy --strict (tests/unit)
    <!-- snippet: spark -->         runs in tests/spark with the name ``spark``, a Spark session
                                    (in-process: a Spark session per block would take minutes)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ADDRESS = "127.0.0.1:9092"
MARKS = ("fragment", "skip", "spark")

_BLOCK = re.compile(r"(?:^<!-- snippet: (?P<mark>\w+)(?: (?P<why>[^\n]*?))? -->\n)?"
                    r"^```python\n(?P<code>.*?)^```", re.M | re.S)


@dataclass(frozen=True)
class Snippet:
    """One block: where it is, its code, and its mark ("" when it runs as it is)."""

    page: Path
    line: int
    code: str
    mark: str = ""
    why: str = ""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def file_name(self) -> str:
        """A name for the block as a file of its own (``README_97.py``)."""
        return f"{self.page.stem.replace('-', '_')}_{self.line}.py"


def snippets(page: Path) -> list[Snippet]:
    """Every fenced python block of ``page``, in order."""
    text = page.read_text()
    found = []
    for match in _BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("code")) + 1  # the block's first line
        found.append(Snippet(page, line, match["code"], match["mark"] or "", match["why"] or ""))
    return found


def runnable(page: Path) -> list[Snippet]:
    """The blocks of ``page`` that run as they are (no mark)."""
    return [s for s in snippets(page) if not s.mark]


def run_alone(snippet: Snippet, replace: dict[str, str], cwd: Path, *,
              python: str = sys.executable, env: Mapping[str, str] | None = None,
              timeout: float = 300.0) -> None:
    """Run one block in a fresh interpreter (``python``, this one by default; ``env``, this
    process's by default) in ``cwd``, each text in ``replace`` replaced; a failure names the
    block's page and line and shows its stderr.

    Raises:
        AssertionError: the block exited with an error.
    """
    code = snippet.code
    for old, new in replace.items():
        code = code.replace(old, new)
    path = cwd / snippet.file_name
    path.write_text(code)
    done = subprocess.run([python, str(path)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False,
                          env={**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, (f"{snippet.where} fails as copied, alone in a fresh "
                                  f"interpreter:\n{done.stderr[-4000:]}")


def run_page(snippets_of_page: list[Snippet], replace: dict[str, str], **names: Any) -> None:
    """Run the blocks in order in this interpreter, in one namespace (``names`` predefined:
    the Spark blocks' ``spark``), each text in ``replace`` replaced; a failure names the
    block's page and line in its traceback."""
    namespace: dict[str, Any] = {"__name__": "__snippet__", **names}
    for snippet in snippets_of_page:
        code = snippet.code
        for old, new in replace.items():
            code = code.replace(old, new)
        exec(compile(code, snippet.where, "exec"), namespace)
