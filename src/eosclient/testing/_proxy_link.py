"""One proxied connection: a client, its own upstream connection, and the ordered answers between.

Internal to :mod:`eosclient.testing.proxy` and :mod:`eosclient.testing.cluster_front`. A link
belongs to an `Owner` (the proxy, or one node of a cluster front), which holds the rules and the
latency, may answer a request itself instead of forwarding it (`Owner._route`: the cluster
front's routing), and rewrites the answers of the APIs it names (`Owner._present`: the broker
addresses of Metadata and FindCoordinator, for both).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, Protocol

from eosclient._protocol.framing import FrameDecoder, frame
from eosclient.errors import ApiKey, ProtocolError
from eosclient.testing._proxy_rules import (
    Action,
    Cut,
    Delay,
    DropResponse,
    ErrorResponse,
    RewriteError,
    RuleBook,
    decode_response,
    encode_response,
    error_response,
    expects_response,
    known_api,
    set_error_codes,
)
from eosclient.testing.security import SaslUsers

log = logging.getLogger("eosclient.testing.proxy")

_HEADER: Final = struct.Struct(">hhi")
_CORRELATION: Final = struct.Struct(">i")
_READ_SIZE: Final = 65536
_CLOSE_TIMEOUT: Final = 1.0
_INT16: Final = struct.Struct(">h")
_COARSE: Final = 0.0015  # a precise proxy's blocking part of a wait: a timer's lateness and more


class Owner(Protocol):
    """What a link needs of the proxy (or the cluster front's node) that accepted it."""

    _rules: RuleBook
    _presents: frozenset[int]  # the APIs whose answers _present rewrites

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def bootstrap_servers(self) -> str: ...
    @property
    def latency(self) -> float: ...
    @property
    def sasl(self) -> SaslUsers | None: ...
    @property
    def precise(self) -> bool: ...
    def _record(self, seen: SeenRequest) -> None: ...
    def _time(self, timing: Timing) -> None: ...
    def _route(self, seen: SeenRequest, body: bytes) -> bytes | None:
        """The owner's own answer (a whole frame) to a request it does not forward, or None."""
    def _present(self, seen: SeenRequest, request: bytes, response: Any) -> None:
        """Rewrite a decoded answer of an API in `_presents` (`request`: its request's body)."""


class SeenRequest(NamedTuple):
    """One request a client sent through the proxy."""

    api_key: int
    api_version: int
    correlation_id: int


@dataclass(slots=True)
class Timing:
    """When one request passed each point of the proxy (``time.monotonic()`` seconds).

    Filled in as the request goes: ``forwarded`` once written to the broker, ``answered`` once
    the broker's answer arrived, ``delivered`` as that answer is written to the client; each
    stays None if that never happened (a rule answered, dropped or cut it). The broker's own time
    is ``answered - forwarded``; the client's time before its next request on the connection is
    that request's ``arrived`` minus this one's ``delivered``.
    """

    api_key: int
    api_version: int
    connection: int  # which client connection (a number per proxy, in accept order)
    arrived: float
    forwarded: float | None = None
    answered: float | None = None
    delivered: float | None = None


@dataclass(frozen=True, slots=True)
class _Answer:
    """What a slot delivers to the client, and when: a frame, nothing (dropped), or a cut."""

    release_at: float
    payload: bytes | None = None
    cut: bool = False
    timing: Timing | None = None  # the request it answers, to note when it was delivered


@dataclass(eq=False, slots=True)
class _Exchange:
    """One request on one link, from arrival until its slot is filled."""

    seen: SeenRequest
    body: bytes
    action: Action | None
    release_at: float
    answer: asyncio.Future[_Answer]
    optional: bool  # Produce with acks=0: Kafka sends no response (noida-db and Tansu do)
    timing: Timing

    def settle(self, answer: _Answer) -> None:
        if not self.answer.done():
            self.answer.set_result(answer)


_Pair = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def close_writer(writer: asyncio.StreamWriter) -> None:
    """Close a connection and wait until it is closed; abort it if that takes too long."""
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), _CLOSE_TIMEOUT)
    except (OSError, TimeoutError):
        writer.transport.abort()


class Link:
    """One client connection and its own upstream connection."""

    def __init__(self, proxy: Owner, client: _Pair, broker: _Pair, number: int = 0) -> None:
        self._proxy = proxy
        self._number = number
        self._loop = asyncio.get_running_loop()
        self._client_reader, self._client_writer = client
        self._broker_reader, self._broker_writer = broker
        self._outbound: asyncio.Queue[_Exchange] = asyncio.Queue()
        self._slots: asyncio.Queue[asyncio.Future[_Answer]] = asyncio.Queue()
        self._awaiting: deque[_Exchange] = deque()
        self._broker_open = True
        self._cut = asyncio.Event()
        self._login = proxy.sasl.session() if proxy.sasl is not None else None
        self.closed = asyncio.Event()  # set by the proxy once the link is closed and forgotten
        peer = self._client_writer.get_extra_info("peername")
        self._name = f"{proxy.bootstrap_servers} <- {peer}"

    def cut(self) -> None:
        """Ask the link to close both sides (the loop's thread only)."""
        self._cut.set()

    async def run(self) -> None:
        """Move frames until the client leaves, a cut, or an error; then close both sides."""
        broker_reader = asyncio.create_task(self._read_broker())
        others = {
            asyncio.create_task(self._read_client()),
            asyncio.create_task(self._write_broker()),
            asyncio.create_task(self._write_client()),
            asyncio.create_task(self._cut.wait()),
        }
        try:
            await self._supervise(broker_reader, others)
        finally:
            for task in (broker_reader, *others):
                task.cancel()
            await asyncio.gather(broker_reader, *others, return_exceptions=True)
            await asyncio.gather(
                close_writer(self._client_writer), close_writer(self._broker_writer)
            )

    async def _supervise(
        self, broker_reader: asyncio.Task[None], others: set[asyncio.Task[Any]]
    ) -> None:
        pending = {broker_reader, *others}
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                self._report(task)
            # The broker closing alone ends nothing yet: answers it sent may still be on their
            # way to the client (see _broker_gone).
            if done != {broker_reader} or self._failed(broker_reader):
                return

    @staticmethod
    def _failed(task: asyncio.Task[Any]) -> bool:
        return task.cancelled() or task.exception() is not None

    def _report(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        if isinstance(exc, ConnectionError | TimeoutError):
            log.debug("link %s: %r", self._name, exc)
        else:
            log.error("link %s failed; closing it", self._name, exc_info=exc)

    # --- client -> broker -------------------------------------------------------------------

    async def _read_client(self) -> None:
        decoder = FrameDecoder()
        while data := await self._client_reader.read(_READ_SIZE):
            now = self._loop.time()
            for body in decoder.feed(data):
                self._take(body, now)

    def _take(self, body: bytes, now: float) -> None:
        if len(body) < _HEADER.size:
            raise ProtocolError(f"request frame of {len(body)} bytes has no header")
        seen = SeenRequest(*_HEADER.unpack_from(body))
        self._proxy._record(seen)
        if self._login is not None and self._front(seen, body, now):
            return
        answer: asyncio.Future[_Answer] = self._loop.create_future()
        self._slots.put_nowait(answer)
        optional = not expects_response(seen.api_key, seen.api_version, body)
        timing = Timing(seen.api_key, seen.api_version, self._number, now)
        self._proxy._time(timing)
        own = self._proxy._route(seen, body)
        if own is not None:  # a round trip to the owner, which the broker never hears of
            payload = None if optional else own  # acks=0: Kafka would not answer either
            answer.set_result(_Answer(now + 2 * self._proxy.latency, payload, timing=timing))
            return
        rule = self._proxy._rules.match(seen.api_key, seen.api_version)
        action = rule.action if rule is not None else None
        if rule is not None:
            log.debug("link %s: %r fires on %r", self._name, rule, seen)
        held = action.seconds if isinstance(action, Delay) and action.direction == "request" else 0
        release_at = now + self._proxy.latency + held
        self._outbound.put_nowait(
            _Exchange(seen, body, action, release_at, answer, optional, timing))

    def _front(self, seen: SeenRequest, body: bytes, now: float) -> bool:
        """The SASL front's part: answer a login request here, or cut a request sent before
        the login; False for a request that goes on to the broker."""
        assert self._login is not None
        api_key, version, correlation_id = seen
        slot: asyncio.Future[_Answer] = self._loop.create_future()
        if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            api = known_api(api_key)
            assert api is not None
            request = api.request.decode(body, version=version, header=True)
            fields = self._login.answer(api_key, version, request)
            payload = encode_response(api, api.response(version=version, **fields), version,
                                      correlation_id)
            slot.set_result(_Answer(now + self._proxy.latency, payload))
        elif api_key == ApiKey.API_VERSIONS or self._login.allows():
            return False
        else:  # Kafka closes a connection that skips the login (or outlived its session)
            log.debug("link %s: %r before a SASL login; cut", self._name, seen)
            slot.set_result(_Answer(now, cut=True))
        self._slots.put_nowait(slot)
        return True

    async def _write_broker(self) -> None:
        while True:
            exchange = await self._outbound.get()
            await self._sleep_until(exchange.release_at)
            action = exchange.action
            if isinstance(action, Cut) and action.when == "before":
                log.debug("link %s: cut before %r", self._name, exchange.seen)
                return
            if isinstance(action, ErrorResponse):
                exchange.settle(self._error_answer(exchange, action.code))
            elif not self._broker_open:
                exchange.settle(_Answer(self._loop.time(), cut=True))
            else:
                await self._forward(exchange)

    async def _forward(self, exchange: _Exchange) -> None:
        self._awaiting.append(exchange)
        exchange.timing.forwarded = self._loop.time()
        self._broker_writer.write(frame(exchange.body))
        await self._broker_writer.drain()

    def _error_answer(self, exchange: _Exchange, code: int) -> _Answer:
        if exchange.optional:
            return _Answer(self._loop.time())  # acks=0: Kafka would not answer either
        api_key, version, correlation_id = exchange.seen
        api = known_api(api_key)
        assert api is not None  # Rule checked it
        response = error_response(api, version, exchange.body, code)
        payload = encode_response(api, response, version, correlation_id)
        return _Answer(self._loop.time() + self._proxy.latency, payload)

    # --- broker -> client -------------------------------------------------------------------

    async def _read_broker(self) -> None:
        decoder = FrameDecoder()
        while data := await self._broker_reader.read(_READ_SIZE):
            now = self._loop.time()
            for body in decoder.feed(data):
                self._receive(body, now)
        self._broker_gone(self._loop.time())

    def _receive(self, body: bytes, now: float) -> None:
        if len(body) < _CORRELATION.size:
            raise ProtocolError(f"{len(body)}-byte response frame from the broker")
        (correlation_id,) = _CORRELATION.unpack_from(body)
        exchange = self._answered(correlation_id, now)
        exchange.timing.answered = now
        action = exchange.action
        release_at = now + self._proxy.latency
        if isinstance(action, Delay) and action.direction == "response":
            release_at += action.seconds
        if isinstance(action, DropResponse):
            answer = _Answer(release_at)
        elif isinstance(action, Cut):
            answer = _Answer(release_at, cut=True)
        else:
            answer = _Answer(release_at, self._rewrite(exchange, body), timing=exchange.timing)
        exchange.settle(answer)

    def _answered(self, correlation_id: int, now: float) -> _Exchange:
        """Pop the request this response answers, and the acks=0 requests left unanswered."""
        while self._awaiting:
            exchange = self._awaiting.popleft()
            if exchange.seen.correlation_id == correlation_id:
                return exchange
            if not exchange.optional:
                raise ProtocolError(
                    f"broker answered correlation id {correlation_id}, expected {exchange.seen}"
                )
            exchange.settle(_Answer(now))  # answered in order: this one never will be
        raise ProtocolError(f"broker answered correlation id {correlation_id}, none pending")

    def _rewrite(self, exchange: _Exchange, body: bytes) -> bytes:
        api_key, version, correlation_id = exchange.seen
        action = exchange.action
        # An ApiVersions error comes in a v0 body whatever the version asked: nothing to add.
        refused = api_key == ApiKey.API_VERSIONS and _INT16.unpack_from(body, 4)[0] != 0
        presented = api_key in self._proxy._presents and not refused
        sasl_versions = api_key == ApiKey.API_VERSIONS and self._login is not None and not refused
        if not isinstance(action, RewriteError) and not presented and not sasl_versions:
            return frame(body)
        api = known_api(api_key)
        if api is None or version > api.response.max_version:
            if isinstance(action, RewriteError):
                raise ProtocolError(f"RewriteError cannot decode {exchange.seen}")
            log.error(
                "link %s: cannot decode %r; its addresses stay the broker's",
                self._name,
                exchange.seen,
            )
            return frame(body)
        response = decode_response(api, version, body)
        if presented:
            self._proxy._present(exchange.seen, exchange.body, response)
        if sasl_versions and response.error_code == 0:
            _offer_sasl(response)
        if isinstance(action, RewriteError):
            set_error_codes(response, version, action.code)
        return encode_response(api, response, version, correlation_id)

    def _broker_gone(self, now: float) -> None:
        """The broker closed: answers already received still go out, then the client is cut."""
        self._broker_open = False
        cut = _Answer(now + self._proxy.latency, cut=True)
        while self._awaiting:
            self._awaiting.popleft().settle(cut)
        last: asyncio.Future[_Answer] = self._loop.create_future()
        last.set_result(cut)
        self._slots.put_nowait(last)
        log.debug("link %s: the broker closed the connection", self._name)

    async def _write_client(self) -> None:
        while True:
            answer = await (await self._slots.get())
            if answer.payload is None and not answer.cut:
                continue  # DropResponse: the client never hears of it
            await self._sleep_until(answer.release_at)
            if answer.cut:
                log.debug("link %s: cut instead of a response", self._name)
                return
            assert answer.payload is not None
            if answer.timing is not None:  # (before the write: the client may read it at once)
                answer.timing.delivered = self._loop.time()
            self._client_writer.write(answer.payload)
            await self._client_writer.drain()

    async def _sleep_until(self, when: float) -> None:
        delay = when - self._loop.time()
        if delay <= 0:
            return
        if not self._proxy.precise:
            await asyncio.sleep(delay)
            return
        if delay > _COARSE:
            await asyncio.sleep(delay - _COARSE)
        rest = when - self._loop.time()
        if rest > 0:
            time.sleep(rest)  # the loop's timer would wake up to 1 ms late (see KafkaProxy)


def _offer_sasl(response: Any) -> None:
    """Add SaslHandshake v0-1 and SaslAuthenticate v0-2 to an ApiVersions answer (the broker
    behind a SASL front does not offer them itself)."""
    entry = response.fields["api_keys"]
    listed = {key.api_key for key in response.api_keys}
    extra = [entry.data_class(api_key=key, min_version=0, max_version=top)
             for key, top in ((ApiKey.SASL_HANDSHAKE, 1), (ApiKey.SASL_AUTHENTICATE, 2))
             if key not in listed]
    response.api_keys = sorted([*response.api_keys, *extra], key=lambda k: k.api_key)
