"""The processor under test as a real child process: ``python -m eosclient.cli copy``.

A child process, not a thread, so that the demo can SIGKILL it as a crash would: no ``finally``,
no ``atexit``, sockets closed by the kernel, a transaction left open at the broker.

The child logs at debug level (``copy --log-level debug``); a reader thread appends each line
to a log file and counts what the processor says about its transactions (the messages of
:mod:`eosclient.processor`): one ``committed N in, M out`` line per committed transaction, one
``transaction failed, aborting`` line per abort.
A line is written before the processor begins its next transaction, so a child killed in a
transaction has reported every transaction before it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from eosclient._process import die_with_parent

__all__ = ["CopierCounts", "CopierProcess", "counted"]

_COMMITTED: Final = re.compile(r"eosclient\.processor: committed (\d+) in, (\d+) out")
_ABORTED: Final = re.compile(r"eosclient\.processor: transaction failed, aborting")
_STOP_WAIT: Final = 30.0


@dataclass(frozen=True, slots=True)
class CopierCounts:
    """What one processor process reported so far."""

    records_in: int = 0
    records_out: int = 0
    committed: int = 0
    aborted: int = 0


class CopierProcess:
    """One ``eosclient copy`` child; :meth:`counts` may be read from any thread.

    Args:
        arguments: The ``copy`` subcommand's arguments (after ``copy``).
        log_path: The file that receives the child's stdout and stderr.
    """

    def __init__(self, arguments: Sequence[str], log_path: Path) -> None:
        self.log_path = log_path
        self._lock = threading.Lock()
        self._counts = CopierCounts()
        self._last = ""
        self.first_commit = threading.Event()
        command = [sys.executable, "-m", "eosclient.cli", "copy", *arguments,
                   "--log-level", "debug"]
        self._proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # the terminal's Ctrl-C is the demo's to handle
            preexec_fn=die_with_parent)  # noqa: PLW1509 - only a prctl() call
        self._reader = threading.Thread(target=self._read, name=f"copier-{self._proc.pid}",
                                        daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), or None while it runs."""
        return self._proc.poll()

    def counts(self) -> CopierCounts:
        """What the child reported so far."""
        with self._lock:
            return self._counts

    def last_line(self) -> str:
        """The last line the child wrote (its error, when it failed)."""
        self._reader.join(_STOP_WAIT)  # once it has exited, the pipe ends soon
        return self._last

    def kill(self) -> None:
        """SIGKILL it, as a crash would, and reap it."""
        self._signal(signal.SIGKILL)
        self._proc.wait(_STOP_WAIT)
        self._reader.join(_STOP_WAIT)

    def stop(self, timeout: float = _STOP_WAIT) -> int:
        """SIGTERM (the processor commits what is open and exits), SIGKILL after ``timeout``;
        return the exit status. Idempotent."""
        self._signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self._proc.wait(_STOP_WAIT)
        self._reader.join(_STOP_WAIT)
        return self._proc.returncode

    def _signal(self, sig: signal.Signals) -> None:
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)

    def _read(self) -> None:
        assert self._proc.stdout is not None
        with self.log_path.open("a", encoding="utf-8") as log:
            for line in self._proc.stdout:
                log.write(line)
                self._last = line.strip() or self._last
                self._count(line)

    def _count(self, line: str) -> None:
        with self._lock:
            self._counts = counted(self._counts, line)
        if self._counts.committed:
            self.first_commit.set()


def counted(counts: CopierCounts, line: str) -> CopierCounts:
    """``counts`` with what one line of the child's output adds to them."""
    found = _COMMITTED.search(line)
    if found:
        return replace(counts, records_in=counts.records_in + int(found[1]),
                       records_out=counts.records_out + int(found[2]),
                       committed=counts.committed + 1)
    if _ABORTED.search(line):
        return replace(counts, aborted=counts.aborted + 1)
    return counts
