"""The fenced ``python`` blocks of README.md and docs/*.md, for the tests that run them.

A block runs as a reader would paste it, in the order of its page, every block of a page in one
namespace (a later block may use what an earlier one made), so a page must define what its
blocks use. The address ``127.0.0.1:9092`` is replaced by the test broker's. A comment line
right before the fence changes that:

    <!-- snippet: skip REASON -->   cannot run here (a real cluster, credentials); REASON says why
    <!-- snippet: spark -->         runs in tests/spark with the name ``spark``, a Spark session
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ADDRESS = "127.0.0.1:9092"

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


def snippets(page: Path) -> list[Snippet]:
    """Every fenced python block of ``page``, in order."""
    text = page.read_text()
    found = []
    for match in _BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("code")) + 1  # the block's first line
        found.append(Snippet(page, line, match["code"], match["mark"] or "", match["why"] or ""))
    return found


def run_page(snippets_of_page: list[Snippet], replace: dict[str, str], **names: Any) -> None:
    """Run the blocks in order in one namespace (``names`` predefined), each text in
    ``replace`` replaced (the broker's address, a checkpoint path); a failure names the
    block's page and line in its traceback."""
    namespace: dict[str, Any] = {"__name__": "__snippet__", **names}
    for snippet in snippets_of_page:
        code = snippet.code
        for old, new in replace.items():
            code = code.replace(old, new)
        exec(compile(code, snippet.where, "exec"), namespace)
