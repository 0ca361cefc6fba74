"""Docs pages drawn from code must match the code they are drawn from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_docs_are_current() -> None:
    # A table row changed without `scripts/gen_docs.py` leaves docs/ describing old behaviour.
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
