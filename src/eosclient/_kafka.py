"""kafka-python, imported once without the DeprecationWarnings its import raises.

kafka-python 3.0 loads each message's JSON schema with ``importlib.resources.read_text`` while
defining its generated classes, which Python 3.11+ reports as a DeprecationWarning: under
``-W error::DeprecationWarning`` (as many test suites run) a bare ``import eosclient`` failed.
``import kafka`` defines every generated class eosclient uses, so it runs here once, first, with
exactly that warning ignored for the length of that import; any other warning still shows.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(read_text|open_text) is deprecated",
                            category=DeprecationWarning)
    import kafka  # noqa: F401
