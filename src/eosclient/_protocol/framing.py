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

    Each byte is copied once on its way from the socket to a frame: frames complete in the
    buffer are cut out of it (one copy each), and the body of a frame that is not yet complete
    is kept as the chunks the socket returned, joined once when the last one arrives (a
    multi-megabyte Fetch answer used to be grown in the buffer, sliced out, and copied again).

    Args:
        max_frame_size: frames announcing a larger size raise `ProtocolError`.
    """

    __slots__ = ("_body", "_buffer", "_have", "_max_frame_size", "_need")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buffer = bytearray()
        self._max_frame_size = max_frame_size
        self._body: list[bytes] = []  # the chunks of an incomplete frame's body, and
        self._have = 0  # how many bytes they hold,
        self._need = 0  # of how many (0: no frame is incomplete; its bytes are in _buffer)

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buffer) + self._have

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
        frames: list[bytes] = []
        if self._need:
            chunk = bytes(data)
            if self._have + len(chunk) < self._need:
                self._body.append(chunk)
                self._have += len(chunk)
                return frames
            rest = self._need - self._have  # the body's last bytes; the next frames follow
            self._body.append(chunk[:rest] if rest < len(chunk) else chunk)
            frames.append(b"".join(self._body))
            self._body, self._have, self._need = [], 0, 0
            data = memoryview(chunk)[rest:]
        self._buffer += data
        start = 0
        end = len(self._buffer)
        with memoryview(self._buffer) as view:
            while end - start >= _SIZE.size:
                (size,) = _SIZE.unpack_from(view, start)
                if size < 0:
                    raise ProtocolError(f"frame size {size} is negative; the stream is not "
                                        "Kafka or is corrupt")
                if size > self._max_frame_size:
                    if frames:  # hand these over first; the next feed() raises (the header
                        break  # stays)
                    raise ResponseTooLargeError(
                        f"an answer of {size} bytes is over receive.message.max.bytes "
                        f"({self._max_frame_size})", size=size, limit=self._max_frame_size)
                body_start = start + _SIZE.size
                if end - body_start < size:  # incomplete: collect its body in chunks
                    self._body = [bytes(view[body_start:end])]
                    self._have, self._need = end - body_start, size
                    start = end
                    break
                frames.append(bytes(view[body_start : body_start + size]))
                start = body_start + size
        if start:
            del self._buffer[:start]
        return frames
