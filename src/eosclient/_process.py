"""Child processes that do not outlive their parent (Linux's PR_SET_PDEATHSIG).

Brokers and the demo's copier run in sessions of their own (so stopping a child's group cannot
hit the parent), which also means a parent killed by SIGKILL or a test runner's hard timeout
leaves them running, and atexit never runs then. :func:`die_with_parent`, passed as
``preexec_fn``, closes that gap where the kernel offers it; :func:`killed_with_parent` for a
child that may be stopped (SIGSTOP) when its parent dies, which would hold a SIGTERM for ever.
"""

from __future__ import annotations

import ctypes
import signal
import sys

__all__ = ["die_with_parent", "killed_with_parent"]

_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None).prctl if sys.platform == "linux" else None


def die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGTERM the child when its parent dies.

    Safe as ``preexec_fn`` with threads running: it only calls a C function resolved before the
    fork. Linux sends the signal when the *thread* that started the child exits, so start
    children from a thread that outlives them (the main thread, as fixtures and the CLI do).
    """
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def killed_with_parent() -> None:
    """As :func:`die_with_parent`, with SIGKILL: for a child its parent may have stopped
    (SIGSTOP), which holds any other signal until it is continued, so a parent killed from
    outside would leave it stopped for ever."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
