"""One Kafka connection's protocol state, without I/O.

Requests go out as bytes from `send()`; whatever the socket returns goes into `receive()`, which
hands back each `Reply` once its frame is complete. Kafka answers a connection's requests in the
order they were sent, so a response whose correlation id is not the oldest pending one means the
stream is broken: `ProtocolError`, and the connection must be closed.

The first request on a connection is ApiVersions (`handshake()`); its reply sets `versions`, after
which `send()` picks each API's negotiated version by itself. A broker too old for the ApiVersions
version sent answers UNSUPPORTED_VERSION with its own range; `retry_handshake()` then yields the
request to resend at the broker's newest version.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eosclient._protocol import fetch_response
from eosclient._protocol.apis import Api, api_for
from eosclient._protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from eosclient._protocol.versions import VersionTable, negotiate
from eosclient._version import __version__
from eosclient.errors import ApiKey, ProtocolError, ResponseTooLargeError

_CORRELATION = struct.Struct(">i")
_UNSUPPORTED_VERSION = 35


@dataclass(frozen=True, slots=True)
class Reply:
    """A response matched to the request that asked for it."""

    correlation_id: int
    version: int
    request: Any
    response: Any


@dataclass(frozen=True, slots=True)
class _Pending:
    correlation_id: int
    api: Api
    version: int
    request: Any


class Connection:
    """Framing, correlation ids and negotiated versions for one broker connection.

    Args:
        client_id: sent in every request header.
        caps: optional per-API version ceilings for this broker (see `versions.negotiate`).
        max_frame_size: a response frame announcing more raises `ProtocolError`.
    """

    def __init__(
        self,
        client_id: str = "eosclient",
        *,
        caps: Mapping[ApiKey, int] | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.client_id = client_id
        self.versions: VersionTable | None = None
        self._caps = dict(caps or {})
        self._decoder = FrameDecoder(max_frame_size)
        self._pending: deque[_Pending] = deque()
        self._next_id = 0

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses have not arrived."""
        return len(self._pending)

    def handshake(self, version: int | None = None) -> bytes:
        """Return the ApiVersions request that opens the connection."""
        api = api_for(ApiKey.API_VERSIONS)
        request = api.request(client_software_name="eosclient", client_software_version=__version__)
        return self.send(request, api.max_version if version is None else version)

    def retry_handshake(self, reply: Reply) -> bytes | None:
        """Return an ApiVersions request at the broker's newest version, if `reply` asks for one.

        A broker that does not speak the version sent answers UNSUPPORTED_VERSION with its range.
        """
        response = reply.response
        if reply.request.API_KEY != ApiKey.API_VERSIONS:
            return None
        if response.error_code != _UNSUPPORTED_VERSION:
            return None
        for entry in response.api_keys:
            if entry.api_key == ApiKey.API_VERSIONS and entry.max_version < reply.version:
                return self.handshake(entry.max_version)
        # No usable range in the answer: v0 is the version every broker speaks.
        return self.handshake(0) if reply.version > 0 else None

    def send(self, request: Any, version: int | None = None) -> bytes:
        """Frame `request` with a header; return the bytes to write.

        Args:
            request: an instance of one of kafka-python's generated request classes.
            version: the version to send; by default the negotiated one.

        Raises:
            UnsupportedVersionError: no version of the API is common to both sides.
            ProtocolError: no version given and the handshake has not completed.
        """
        api = api_for(request.API_KEY)
        if version is None:
            if self.versions is None:
                raise ProtocolError(f"{api.key.name} sent before the ApiVersions handshake")
            version = self.versions.version(api.key)
        request.API_VERSION = version
        correlation_id = self._next_id
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        data: bytes = request.encode(header=True, framed=True)
        if request.expect_response():
            self._pending.append(_Pending(correlation_id, api, version, request))
        return data

    def receive(self, data: bytes | bytearray | memoryview) -> list[Reply]:
        """Take bytes from the socket; return the replies they complete, in request order.

        Raises:
            ResponseTooLargeError: the next answer is over ``max_frame_size``; its ``api`` names
                the request it answers (Kafka answers in order: the oldest pending one).
            ProtocolError: bad framing, an unexpected correlation id, or an undecodable response.
        """
        try:
            frames = self._decoder.feed(data)
        except ResponseTooLargeError as exc:
            if not self._pending:
                raise
            api = self._pending[0].api.key
            raise ResponseTooLargeError(f"{api.label}: {exc}", size=exc.size, limit=exc.limit,
                                        api=api) from None
        replies = [self._decode(frame) for frame in frames]
        for reply in replies:
            if reply.request.API_KEY == ApiKey.API_VERSIONS and reply.response.error_code == 0:
                keys = reply.response.api_keys
                ranges = ((k.api_key, k.min_version, k.max_version) for k in keys)
                self.versions = negotiate(ranges, self._caps)
        return replies

    def _decode(self, frame: bytes) -> Reply:
        if len(frame) < _CORRELATION.size:
            raise ProtocolError(f"response frame of {len(frame)} bytes has no header")
        (correlation_id,) = _CORRELATION.unpack_from(frame)
        if not self._pending:
            raise ProtocolError(f"response with correlation id {correlation_id}, none pending")
        pending = self._pending[0]
        if correlation_id != pending.correlation_id:
            raise ProtocolError(
                f"response with correlation id {correlation_id}, expected "
                f"{pending.correlation_id} ({pending.api.key.name})"
            )
        self._pending.popleft()
        try:
            response = None
            if pending.api.key == ApiKey.FETCH:  # read by its own reader: fetch_response.py
                response = fetch_response.read(frame, pending.version)
            if response is None:
                response = pending.api.response.decode(frame, version=pending.version,
                                                       header=True)
        except Exception as exc:
            response = _unreadable_unsupported_version(pending, frame)
            if response is None:
                raise ProtocolError(
                    f"undecodable {pending.api.key.name} v{pending.version} response: {exc!r}"
                ) from exc
        return Reply(correlation_id, pending.version, pending.request, response)


def _unreadable_unsupported_version(pending: _Pending, frame: bytes) -> Any:
    """An UNSUPPORTED_VERSION answer to ApiVersions whose body cannot be read, as an empty one.

    Kafka answers with a v0 body that lists its range; librdkafka's mock cluster answers with a
    body no version's schema reads. Both start with the error code, and both mean "try lower".
    """
    if pending.api.key != ApiKey.API_VERSIONS or len(frame) < 6:
        return None
    (error_code,) = struct.unpack_from(">h", frame, _CORRELATION.size)
    if error_code != _UNSUPPORTED_VERSION:
        return None
    return pending.api.response(error_code=error_code, api_keys=[], version=0)
