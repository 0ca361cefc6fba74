"""What Kafka's wire types can carry, checked where the application hands a value over.

A value the protocol cannot encode (a timestamp past int64, a partition past int32, a
``client.id`` longer than an int16-length STRING holds, a str with a lone surrogate) used to pass
the argument checks and fail later, while the I/O thread encoded a request or a record batch:
the client then died with a ``FatalError`` for one bad argument. Every public entry point checks
against these limits instead, before anything is queued, and raises the usage or config error
its caller expects; the I/O thread only ever encodes what fits.
"""

from __future__ import annotations

__all__ = ["INT16_MAX", "INT32_MAX", "INT64_MAX", "string_problem"]

INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# UTF-8 takes at most 4 bytes a character: a shorter str cannot exceed INT16_MAX bytes.
_SURELY_SHORT = INT16_MAX // 4


def string_problem(value: str) -> str | None:
    """Why ``value`` cannot go on the wire as a Kafka STRING (int16 length, UTF-8), or None.

    Every request field this client fills from the application's strings (client id,
    transactional id, group and instance ids, topic names) is such a STRING.
    """
    if value.isascii():  # the common case, in C: always encodable, one byte a character
        n = len(value)
    elif len(value) <= _SURELY_SHORT:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"cannot be encoded as UTF-8 ({exc.reason} at index {exc.start})"
        return None
    else:
        try:
            n = len(value.encode("utf-8"))
        except UnicodeEncodeError as exc:
            return f"cannot be encoded as UTF-8 ({exc.reason} at index {exc.start})"
    if n > INT16_MAX:
        return f"is {n} bytes long in UTF-8; a Kafka string holds at most {INT16_MAX}"
    return None
