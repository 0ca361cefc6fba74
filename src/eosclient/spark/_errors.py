"""eosclient errors raised on Spark executors, recovered from Spark's wrapper.

Spark does not carry a Python exception from a task to the caller: it sends its traceback as
text, and the caller gets a ``PythonException`` or ``StreamingQueryException`` (a JVM error).
The eosclient class name and message survive in that text, as the traceback's last line
(``eosclient.errors.RecordTypeError: a row has a null topic ...``); :func:`eos_error_of` reads
them back.
"""

from __future__ import annotations

import re

from eosclient import errors
from eosclient.errors import EosError

__all__ = ["eos_error_of"]

_RAISED = re.compile(r"eosclient\.errors\.([A-Za-z]+Error): ([^\n]*)")
_CODE = re.compile(r"^\w+: ([A-Z_]+) \((-?\d+)\)")


def eos_error_of(exc: BaseException) -> EosError | None:
    """The eosclient error a Spark exception reports, rebuilt (its class and message, and its
    code and code name when the message names them), or None if it reports none.

    ``exc`` itself is returned when it is an eosclient error already (raised on the driver). The
    innermost (last) eosclient error in the text wins: it is where the failure began.
    """
    if isinstance(exc, EosError):
        return exc
    found = _RAISED.findall(str(exc))
    for name, message in reversed(found):
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, EosError):
            error = cls.__new__(cls)
            Exception.__init__(error, message)
            code = _CODE.match(message)
            error.code = int(code.group(2)) if code else None
            error.code_name = code.group(1) if code else None
            error.api = None
            return error
    return None
