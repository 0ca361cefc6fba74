"""Kafka's framing: every request and response is an int32 big-endian size, then that many bytes.

`FrameDecoder` is sans-IO: feed it whatever the socket returned (a byte, a frame, a frame and a
half) and it hands back each complete frame once.
"""

from __future__ import annotations

import struct

from eosclient.errors import ProtocolError, ResponseTooLargeError

_SIZE = struct.Struct(">i")

#: Largest frame accepted by default: ``receive.message.max.bytes``' default (librdkafka's).
#: Brokers cap Fetch answers by fetch.max.bytes (50 MiB by default), or should (noida-db does
#: not); the clients pass their setting.
DEFAULT_MAX_FRAME_SIZE = 100_000_000


def frame(payload: bytes) -> bytes:
    """Return `payload` prefixed with its size."""
    return _SIZE.pack(len(payload)) + payload


class FrameDecoder:
    """Splits a byte stream into Kafka frames.

    Args:
        max_frame_size: frames announcing a larger size raise `ProtocolError`.
    """

    __slots__ = ("_buffer", "_max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buffer = bytearray()
        self._max_frame_size = max_frame_size

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Take more bytes from the stream; return the frames they complete, in order.

        Raises:
            ResponseTooLargeError: a frame announced a size over the limit; it is refused before
                its body is buffered (frames completed before it in the same call are returned
                first, and the next call raises). The decoder is then unusable; close the
                connection.
            ProtocolError: a frame announced a negative size (the stream has lost its framing);
                close the connection.
        """
        self._buffer += data
        frames: list[bytes] = []
        start = 0
        end = len(self._buffer)
        while end - start >= _SIZE.size:
            (size,) = _SIZE.unpack_from(self._buffer, start)
            if size < 0:
                raise ProtocolError(f"frame size {size} is negative; the stream is not Kafka "
                                    "or is corrupt")
            if size > self._max_frame_size:
                if frames:  # hand these over first; the next feed() raises (the header stays)
                    break
                raise ResponseTooLargeError(
                    f"an answer of {size} bytes is over receive.message.max.bytes "
                    f"({self._max_frame_size})", size=size, limit=self._max_frame_size)
            if end - start - _SIZE.size < size:
                break
            body_start = start + _SIZE.size
            frames.append(bytes(self._buffer[body_start : body_start + size]))
            start = body_start + size
        if start:
            del self._buffer[:start]
        return frames
