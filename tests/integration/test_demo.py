"""``eosclient demo`` end to end, as the README runs it: a real broker, real processes, a kill.

The demo's verdict itself is unit-tested in tests/unit/test_demo_report.py; here it must come out
"exactly once" with every fault injected, and leave no process behind, also when interrupted.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.broker, pytest.mark.noida, pytest.mark.proxy]

COMMAND = [sys.executable, "-m", "eosclient.cli", "demo"]
PIDS = re.compile(r"\(pid (\d+)\)|processor \d: pid (\d+)")


def pids_in(text: str) -> list[int]:
    return [int(a or b) for a, b in PIDS.findall(text)]


def gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether ``pid`` has exited (the demo's children are reaped by the demo or by init)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_demo_copies_exactly_once_through_its_faults() -> None:
    started = time.monotonic()
    done = subprocess.run([*COMMAND, "--records", "6000", "--partitions", "3", "--seed", "7"],
                          capture_output=True, text=True, timeout=120, check=False)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "records in        6,000 committed" in out, out
    assert "records out       6,000 committed" in out, out
    aborted = re.search(r"transactions\s+committed ([\d,]+), aborted (\d+) \((\d+) by the "
                        r"processor on an error, 1 left open by a kill\)", out)
    assert aborted is not None, out
    assert int(aborted[2]) >= 2 and int(aborted[3]) >= 1, out  # the rewritten commit, the kill
    assert "processor 1 " in out and "(killed)" in out and "processor 2 " in out, out
    assert "faults injected   5 of 5" in out and "NOT INJECTED" not in out, out
    assert "anomalies         0 (lost 0, duplicated 0, aborted-read 0" in out, out
    assert out.rstrip().endswith("result            exactly once"), out
    assert "\r" not in out  # not a terminal: progress as plain lines
    pids = pids_in(out)
    assert len(pids) == 3, out  # the broker and two processors
    assert all(gone(pid) for pid in pids), pids
    assert time.monotonic() - started < 60


def test_an_interrupted_demo_stops_the_broker_and_the_processor() -> None:
    child = subprocess.Popen([*COMMAND, "--records", "200000", "--seed", "1"],
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen = ""
    try:
        assert child.stdout is not None
        for line in child.stdout:
            seen += line
            if re.search(r"processor 1: pid \d+", line):
                break
        child.send_signal(signal.SIGTERM)  # what Ctrl-C does, by way of the same handler
        seen += child.communicate(timeout=30)[0]
    finally:
        child.kill()
        child.wait(10)
    assert child.returncode == 130, seen
    pids = pids_in(seen)
    assert len(pids) == 2, seen  # the broker and the processor
    assert all(gone(pid) for pid in pids), pids
