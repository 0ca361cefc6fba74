"""Children that must not outlive their parent (eosclient._process), on Linux: a stopped
child holds a SIGTERM until it is continued, so only SIGKILL ends it when its parent dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")

_PARENT = """
import subprocess, sys, time
from eosclient import _process
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         preexec_fn=getattr(_process, sys.argv[1]))
print(child.pid, flush=True)
time.sleep(60)
"""


def _state(pid: int) -> str | None:
    """The process's state letter (T: stopped, Z: a zombie), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def _orphan_stopped_child(preexec: str) -> int:
    """Start a parent that starts a child with ``preexec``, stop the child, kill the parent:
    the child's pid."""
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, preexec], stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    os.kill(child, signal.SIGSTOP)
    # Stopped before the parent dies: a SIGTERM pending beside the SIGSTOP is taken first
    # (the lower number), and a busy machine may not run the child in between.
    until = time.monotonic() + 10
    while _state(child) != "T":
        assert time.monotonic() < until, "the child did not stop"
        time.sleep(0.01)
    parent.kill()
    parent.wait(10)
    return child


def _gone_within(pid: int, seconds: float) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if _state(pid) in (None, "Z"):
            return True
        time.sleep(0.05)
    return False


def test_a_stopped_child_is_killed_with_its_parent() -> None:
    assert _gone_within(_orphan_stopped_child("killed_with_parent"), 10)


def test_a_stopped_child_holds_the_sigterm_of_die_with_parent() -> None:
    # why the nemesis's workers (which it stops) use killed_with_parent
    child = _orphan_stopped_child("die_with_parent")
    try:
        assert not _gone_within(child, 1)
        assert _state(child) == "T"
    finally:
        os.kill(child, signal.SIGKILL)
