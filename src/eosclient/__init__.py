"""eosclient: exactly-once Kafka for Python.

The public names live here and nowhere else; modules with a leading underscore are internal.
"""

from __future__ import annotations

__version__ = "0.1.0.dev0"

__all__ = ["__version__"]
