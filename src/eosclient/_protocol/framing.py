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

    The bytes received are kept as the chunks they came in, and joined only once they hold the
    frame (or size header) at their head whole: a frame of several MiB arriving in socket-sized
    pieces is copied once when it completes, not once per piece (a growing buffer cost ~30x
    more on 6 MiB Fetch answers).

    Args:
        max_frame_size: frames announcing a larger size raise `ProtocolError`.
    """

    __slots__ = ("_chunks", "_have", "_max_frame_size", "_want")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._chunks: list[bytes] = []  # received, not yet a whole frame; in order
        self._have = 0  # their length
        self._want = _SIZE.size  # bytes needed before the head frame (or its header) is whole
        self._max_frame_size = max_frame_size

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return self._have

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
        if data:
            self._chunks.append(data if type(data) is bytes else bytes(data))
            self._have += len(data)
        if self._have < self._want:
            return []  # the head frame is still arriving: nothing to copy yet
        chunks = self._chunks
        frames: list[bytes] = []
        if len(chunks) > 1 and self._want > _SIZE.size:  # a frame that came in pieces
            head, buffer = self._take_head(chunks)
            frames.append(head)
        else:
            buffer = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        more, start = self._split(buffer)
        frames += more
        rest = buffer[start:] if start else buffer  # within the last chunk (the rest came whole)
        self._chunks = [rest] if rest else []
        self._have = len(rest)
        return frames

    def _take_head(self, chunks: list[bytes]) -> tuple[bytes, bytes]:
        """The head frame, whole now, joined with one copy (its header left out), and the
        bytes after it. The frame ends in the last chunk: before it came, it was not whole;
        and its header is in the first (``_split`` read it from there)."""
        need = self._want - len(chunks[0])
        parts = [chunks[0][_SIZE.size :]]
        for chunk in chunks[1:-1]:
            parts.append(chunk)
            need -= len(chunk)
        last = chunks[-1]
        parts.append(last[:need] if need < len(last) else last)
        return b"".join(parts), last[need:]

    def _split(self, buffer: bytes) -> tuple[list[bytes], int]:
        """The whole frames at the head of ``buffer``, and where the rest starts; sets what the
        next frame needs (``_want``)."""
        frames: list[bytes] = []
        start = 0
        end = len(buffer)
        self._want = _SIZE.size
        while end - start >= _SIZE.size:
            (size,) = _SIZE.unpack_from(buffer, start)
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
                self._want = _SIZE.size + size
                break
            body_start = start + _SIZE.size
            frames.append(buffer[body_start : body_start + size])
            start = body_start + size
        return frames, start
