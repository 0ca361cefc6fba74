#!/usr/bin/env python3
"""Regenerate the docs pages that are drawn from code, so they cannot drift from it.

    .venv/bin/python scripts/gen_docs.py          # rewrite them
    .venv/bin/python scripts/gen_docs.py --check  # exit 1 if any is stale (the tests do this)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from docs_settings import settings_markdown  # this directory: run as a script

from eosclient._core._txn_table import producer_states_markdown
from eosclient.errors import (
    AbortableError,
    ApiKey,
    EosError,
    EpochBumpRequiredError,
    FatalError,
    FencedError,
    RetriableError,
    error_for,
    iter_table,
)

DOCS = Path(__file__).resolve().parent.parent / "docs"

_ERRORS_INTRO = """\
# Error classification

Generated from `eosclient/_error_table.py` by `scripts/gen_docs.py`; do not edit by hand.

Every error code a broker returns is classified per (API, code) into one of four kinds, which say
what the application does next: **Retriable** (call again), **Abortable** (abort the transaction
and redo it; *bump* means the abort also bumps the producer epoch, KIP-360), **Fenced** (close;
another instance owns the transactional.id), **Fatal** (close and fix the configuration). A pair not
listed falls back to Retriable if Kafka marks the code retriable, else Fatal. See the module
docstring of `eosclient.errors` for the reasoning and the KIPs followed.
"""


def render_errors() -> str:
    """The error table as Markdown, one section per API."""
    lines = [_ERRORS_INTRO]
    current: ApiKey | None = None
    for row in iter_table():
        if row.api != current:
            current = row.api
            lines += ["", f"## {row.api.label} (API key {int(row.api)})", "",
                      "| code | name | kind | why |", "|---:|---|---|---|"]
        name = error_for(row.api, row.code).code_name
        lines.append(f"| {row.code} | {name} | {_kind_label(row.kind)} | {row.note} |")
    return "\n".join(lines) + "\n"


_KIND_LABELS: tuple[tuple[type[EosError], str], ...] = (
    (EpochBumpRequiredError, "Abortable (bump)"),
    (AbortableError, "Abortable"),
    (RetriableError, "Retriable"),
    (FencedError, "Fenced"),
    (FatalError, "Fatal"),
)


def _kind_label(kind: type[EosError]) -> str:
    return next(label for base, label in _KIND_LABELS if issubclass(kind, base))


PAGES: dict[str, Callable[[], str]] = {
    "errors.md": render_errors,
    "producer-states.md": producer_states_markdown,
    "settings.md": settings_markdown,
}


def main(argv: list[str]) -> int:
    stale = []
    for name, render in PAGES.items():
        path, text = DOCS / name, render()
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    for name in stale:
        print(f"docs/{name} is stale: run scripts/gen_docs.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
