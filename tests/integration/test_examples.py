"""The examples run as a user would run them, so the README cannot promise what does not work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _script(path: Path) -> object:
    marks = [pytest.mark.spark] if path.name.startswith("spark") else []
    return pytest.param(path.name, marks=marks, id=path.name)


@pytest.mark.broker
@pytest.mark.noida
@pytest.mark.parametrize("script", [_script(p) for p in sorted(EXAMPLES.glob("*.py"))])
def test_example_runs(script: str) -> None:
    result = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True,
                            text=True, timeout=150, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
