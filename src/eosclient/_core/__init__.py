"""The sans-IO core: protocol rules as pure state machines, with no sockets, threads or clocks.

Time is passed in (``now``, in seconds); requests come out as values and responses go in as
values, so every rule is testable in microseconds without a broker.
"""

import os as _os

from eosclient._core import _accel

# Before any hot module is imported: the pure-Python source where it must be used (_accel).
_accel.install(_os.path.dirname(__file__))
