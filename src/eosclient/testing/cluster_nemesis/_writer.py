"""The cluster nemesis's application: a loop of transactions of 20 records that does what the
clients' documentation asks of an application, and the clients it drives (eosclient's producer,
sync and asyncio, and confluent-kafka's), their errors read as retry, abort or close.

The loop's decisions are written once, as steps (:mod:`eosclient._processor.steps`, as the
processor's are): :class:`Writer` yields each call of the producer as ``Io("producer",
method, args)`` and each pause or re-creation as ``Io("front", "sleep" | "renew", args)``, and
is thrown the :class:`Retry`, :class:`Abort` or :class:`Fatal` the call raised. Two drivers
carry them out: :class:`Loop` on a sync client, on the caller's thread; :class:`AsyncLoop` on an
asyncio client, on an event loop it keeps in the caller's thread, so a run drives either the
same way (``init()``, ``run()``, ``close()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Final, Literal, Protocol

from eosclient._processor.steps import Io, Steps, drive
from eosclient.aio.processor import adrive
from eosclient.errors import AbortableError, EosError, RetriableError
from eosclient.testing.cluster_nemesis._schedule import PARTITIONS, TOPIC, TRANSACTIONAL_ID
from eosclient.testing.cluster_nemesis._verdict import ClusterNemesisResult, Txn, Wedge, value_of

__all__ = ["ASYNC_MAKERS", "CK_LOGGER", "CLIENTS", "CLOSE_TIMEOUT", "MAKERS",
           "RECORDS_PER_TRANSACTION", "Abort", "AsyncClient", "AsyncEosClient", "AsyncLoop",
           "Client", "ClientName", "EosClient", "Fatal", "Loop", "Retry", "Writer", "open_loop"]

log = logging.getLogger("eosclient.testing.cluster_nemesis")

ClientName = Literal["eosclient", "eosclient-asyncio", "confluent-kafka"]
CLIENTS: Final[tuple[ClientName, ...]] = ("eosclient", "eosclient-asyncio", "confluent-kafka")
RECORDS_PER_TRANSACTION: Final = 20
_INIT_TIMEOUT: Final = 30.0
_RETRY_PAUSE: Final = 0.01  # before calling again after a retriable error (no busy loop)
CLOSE_TIMEOUT: Final = 10.0
_LINGER_MS: Final = 5
CK_LOGGER: Final = "eosclient.testing.cluster_nemesis.librdkafka"


class Retry(Exception):
    """Transient: call the same method again."""


class Abort(Exception):
    """This transaction is lost: abort it."""


class Fatal(Exception):
    """The producer cannot go on: close it and make a new one."""


class Client(Protocol):
    """One transactional producer, its errors translated to :class:`Retry`, :class:`Abort`
    and :class:`Fatal` as its documentation tells an application to read them."""

    def init(self, timeout: float) -> None: ...
    def begin(self) -> None: ...
    def send(self, partition: int, value: bytes) -> None: ...
    def commit(self, timeout: float) -> None: ...
    def abort(self, timeout: float) -> None: ...
    def close(self, timeout: float) -> None: ...


class AsyncClient(Protocol):
    """:class:`Client` on asyncio: the calls that may wait are awaited (made inside the event
    loop that runs them)."""

    async def init(self, timeout: float) -> None: ...
    def begin(self) -> None: ...
    async def send(self, partition: int, value: bytes) -> None: ...
    async def commit(self, timeout: float) -> None: ...
    async def abort(self, timeout: float) -> None: ...
    async def close(self, timeout: float) -> None: ...


@contextlib.contextmanager
def _eos_errors() -> Iterator[None]:
    """eosclient's error kinds (docs/errors.md): retriable -> call again, abortable -> abort,
    fenced, fatal or a usage error -> close."""
    try:
        yield
    except RetriableError as exc:
        raise Retry(repr(exc)) from exc
    except AbortableError as exc:
        raise Abort(repr(exc)) from exc
    except EosError as exc:
        raise Fatal(repr(exc)) from exc


class EosClient:
    def __init__(self, servers: str, *, topic: str = TOPIC,
                 transactional_id: str = TRANSACTIONAL_ID) -> None:
        from eosclient.producer import TransactionalProducer  # noqa: PLC0415

        self._topic = topic
        self._producer = TransactionalProducer(servers, transactional_id=transactional_id,
                                               linger_ms=_LINGER_MS)

    def init(self, timeout: float) -> None:
        with _eos_errors():
            self._producer.init_transactions(timeout)

    def begin(self) -> None:
        with _eos_errors():
            self._producer.begin_transaction()

    def send(self, partition: int, value: bytes) -> None:
        with _eos_errors():
            self._producer.send(self._topic, value, partition=partition)

    def commit(self, timeout: float) -> None:
        with _eos_errors():
            self._producer.commit_transaction(timeout)

    def abort(self, timeout: float) -> None:
        with _eos_errors():
            self._producer.abort_transaction(timeout)

    def close(self, timeout: float) -> None:
        with contextlib.suppress(EosError):
            self._producer.close(timeout)


class AsyncEosClient:
    """:class:`EosClient` on :class:`~eosclient.aio.AsyncTransactionalProducer` (the same
    session as the sync producer's, driven by the event loop); made inside the running loop."""

    def __init__(self, servers: str, *, topic: str = TOPIC,
                 transactional_id: str = TRANSACTIONAL_ID) -> None:
        from eosclient.aio import AsyncTransactionalProducer  # noqa: PLC0415

        self._topic = topic
        self._producer = AsyncTransactionalProducer(servers, transactional_id=transactional_id,
                                                    linger_ms=_LINGER_MS)

    async def init(self, timeout: float) -> None:
        with _eos_errors():
            await self._producer.start()  # idempotent: a retried init starts it once
            await self._producer.init_transactions(timeout)

    def begin(self) -> None:
        with _eos_errors():
            self._producer.begin_transaction()

    async def send(self, partition: int, value: bytes) -> None:
        with _eos_errors():
            await self._producer.send(self._topic, value, partition=partition)

    async def commit(self, timeout: float) -> None:
        with _eos_errors():
            await self._producer.commit_transaction(timeout)

    async def abort(self, timeout: float) -> None:
        with _eos_errors():
            await self._producer.abort_transaction(timeout)

    async def close(self, timeout: float) -> None:
        with contextlib.suppress(EosError):
            await self._producer.close(timeout)


class _CkClient:
    def __init__(self, servers: str) -> None:
        import confluent_kafka  # noqa: PLC0415

        self._ck = confluent_kafka
        self._producer = confluent_kafka.Producer({
            "bootstrap.servers": servers, "transactional.id": TRANSACTIONAL_ID,
            "linger.ms": _LINGER_MS, "logger": logging.getLogger(CK_LOGGER)})

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """librdkafka's transactional error kinds (KafkaError.fatal(), txn_requires_abort(),
        retriable()); an error that is none of them (e.g. _STATE) leaves no way on: close."""
        try:
            yield
        except self._ck.KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if error is None or not hasattr(error, "fatal") or error.fatal():
                raise Fatal(repr(exc)) from exc
            if error.txn_requires_abort():
                raise Abort(repr(exc)) from exc
            if error.retriable():
                raise Retry(repr(exc)) from exc
            raise Fatal(repr(exc)) from exc
        except BufferError as exc:
            raise Retry(repr(exc)) from exc

    def init(self, timeout: float) -> None:
        with self._errors():
            self._producer.init_transactions(timeout)

    def begin(self) -> None:
        with self._errors():
            self._producer.begin_transaction()

    def send(self, partition: int, value: bytes) -> None:
        with self._errors():
            self._producer.produce(TOPIC, value, partition=partition)

    def commit(self, timeout: float) -> None:
        with self._errors():
            self._producer.commit_transaction(timeout)
        self._producer.poll(0)  # serve the log callback

    def abort(self, timeout: float) -> None:
        with self._errors():
            self._producer.abort_transaction(timeout)
        self._producer.poll(0)

    def close(self, timeout: float) -> None:
        """Purge, then close() in a thread of its own: it aborts an open transaction and
        flushes, and may wait for a broker for as long as it likes."""
        producer = self._producer
        with contextlib.suppress(Exception):
            producer.purge()
        closer = threading.Thread(target=producer.close, name="ck-close", daemon=True)
        closer.start()
        closer.join(timeout)
        if closer.is_alive():
            log.warning("confluent-kafka close() has not returned after %.0f s", timeout)


MAKERS: Final[Mapping[str, Callable[[str], Client]]] = {
    "eosclient": EosClient, "confluent-kafka": _CkClient}
ASYNC_MAKERS: Final[Mapping[str, Callable[[str], AsyncClient]]] = {
    "eosclient-asyncio": AsyncEosClient}


def _producer(method: str, *args: object) -> Io:
    return Io("producer", method, args)


def _sleep(seconds: float) -> Io:
    return Io("front", "sleep", (seconds,))


class Writer:
    """The application's decisions: transactions of 20 records until the window ends, as steps
    (see the module docstring); it records what it was told in ``result``.

    ``pace``: seconds to wait after each transaction (0: none); ``abort_every``: abort, after
    its sends, every transaction whose number is ``abort_every - 1`` modulo ``abort_every``
    (0: none; 2: every other one), as the front targets' steady writer does.
    """

    def __init__(self, result: ClusterNemesisResult, duration: float, *, pace: float = 0.0,
                 abort_every: int = 0) -> None:
        self.result, self._duration = result, duration
        self._pace, self._abort_every = pace, abort_every
        self.clock = time.monotonic()  # the schedule's clock: set when the faults start

    def now(self) -> float:
        return time.monotonic() - self.clock

    def init(self) -> Steps[None]:
        """init_transactions, retried while retriable, for at most ``give_up`` seconds."""
        started = time.monotonic()
        while True:
            try:
                yield _producer("init", _INIT_TIMEOUT)
                return
            except Retry:
                if time.monotonic() - started > self.result.give_up:
                    raise
                yield _sleep(_RETRY_PAUSE)

    def run(self) -> Steps[None]:
        n = len(self.result.txns)  # after any the caller ran itself (a warm-up)
        while self.now() < self._duration:
            txn = Txn(n, round(self.now(), 3))
            self.result.txns.append(txn)
            n += 1
            yield from self.transaction(txn)
            if self._pace:
                yield _sleep(self._pace)

    def transaction(self, txn: Txn) -> Steps[None]:
        started = time.monotonic()
        while True:
            try:
                yield _producer("begin")
                break
            except Retry as exc:
                if time.monotonic() - started < self.result.give_up:
                    yield _sleep(_RETRY_PAUSE)
                    continue
                txn.note = f"begin: {exc}"
                yield from self.recreate(txn, f"begin_transaction() did not succeed: {exc}",
                                         txn.began, time.monotonic() - started)
                return
            except Abort as exc:  # an earlier failure not aborted: abort it, begin again
                txn.note = f"begin: {exc}"
                yield from self.abort(txn)
                return
            except Fatal as exc:
                txn.note = f"begin: {exc}"
                yield from self.recreate(txn, f"begin_transaction() raised {exc}", txn.began)
                return
        try:
            for i in range(RECORDS_PER_TRANSACTION):
                yield _producer("send", i % PARTITIONS, value_of(txn.n, i))
                txn.sent += 1
        except (Retry, Abort, Fatal) as exc:
            txn.note = f"send: {exc}"
            yield from self.abort(txn)
            return
        if self._abort_every and txn.n % self._abort_every == self._abort_every - 1:
            txn.note = "aborted by the application"
            yield from self.abort(txn)
            return
        yield from self.commit(txn)

    def commit(self, txn: Txn) -> Steps[None]:
        started = time.monotonic()
        at = self.now()
        while True:
            try:
                yield _producer("commit", self.result.call_timeout)
            except Retry as exc:
                if time.monotonic() - started < self.result.give_up:
                    yield _sleep(_RETRY_PAUSE)
                    continue
                txn.commit_seconds = time.monotonic() - started
                txn.outcome, txn.note = "unknown", f"commit: {exc}"
                yield from self.recreate(txn, f"commit_transaction() did not finish: {exc}", at,
                                         txn.commit_seconds)
            except Abort as exc:
                txn.commit_seconds = time.monotonic() - started
                txn.note = f"commit: {exc}"
                yield from self.abort(txn)
            except Fatal as exc:
                txn.commit_seconds = time.monotonic() - started
                txn.outcome, txn.note = "unknown", f"commit: {exc}"
                yield from self.recreate(txn, f"commit_transaction() raised {exc}", at,
                                         txn.commit_seconds)
            else:
                txn.commit_seconds = time.monotonic() - started
                txn.outcome, txn.ended = "committed", round(self.now(), 3)
            return

    def abort(self, txn: Txn) -> Steps[None]:
        started = time.monotonic()
        at = self.now()
        while True:
            try:
                yield _producer("abort", self.result.call_timeout)
            except Retry as exc:
                if time.monotonic() - started < self.result.give_up:
                    yield _sleep(_RETRY_PAUSE)
                    continue
                txn.abort_seconds = time.monotonic() - started
                yield from self.recreate(txn, f"abort_transaction() did not finish: {exc}", at,
                                         txn.abort_seconds)
            except (Abort, Fatal) as exc:
                txn.abort_seconds = time.monotonic() - started
                yield from self.recreate(txn, f"abort_transaction() raised {exc}", at,
                                         txn.abort_seconds)
            else:
                txn.abort_seconds = time.monotonic() - started
                txn.outcome, txn.ended = "aborted", round(self.now(), 3)
            return

    def recreate(self, txn: Txn, what: str, at: float, seconds: float = 0.0) -> Steps[None]:
        """Close the producer and make a new one (a wedge, whatever the cause)."""
        self.result.wedges.append(Wedge(round(at, 2), txn.n, what, round(seconds, 1)))
        yield Io("front", "renew", (CLOSE_TIMEOUT,))
        self.result.recreated += 1
        yield from self.init()


class _Driver:
    """What both drivers share: the :class:`Writer` and its clock, and what a run calls."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer

    @property
    def result(self) -> ClusterNemesisResult:
        return self.writer.result

    @property
    def clock(self) -> float:
        """The schedule's clock (``time.monotonic()`` when the faults started)."""
        return self.writer.clock

    @clock.setter
    def clock(self, value: float) -> None:
        self.writer.clock = value

    def now(self) -> float:
        return self.writer.now()

    def init(self) -> None:
        """:meth:`Writer.init`, carried out.

        Raises:
            Retry: still retriable after ``give_up`` seconds; Abort, Fatal: as the client
                raised them. The producer is left as it is: ``close()`` it.
        """
        self._carry(self.writer.init())

    def run(self) -> None:
        """:meth:`Writer.run`, carried out: transactions until the window ends."""
        self._carry(self.writer.run())

    def transaction(self, txn: Txn) -> None:
        """:meth:`Writer.transaction`, carried out: one transaction, ``txn``."""
        self._carry(self.writer.transaction(txn))

    def _carry(self, steps: Steps[None]) -> None:
        raise NotImplementedError


class Loop(_Driver):
    """The writer on a sync client (``make()`` makes one), on the caller's thread; its own
    ports are ``"producer"`` (the client) and ``"front"`` (itself: ``sleep``, ``renew``)."""

    def __init__(self, result: ClusterNemesisResult, make: Callable[[], Client],
                 duration: float, *, pace: float = 0.0, abort_every: int = 0) -> None:
        super().__init__(Writer(result, duration, pace=pace, abort_every=abort_every))
        self._make = make
        self.client = make()

    def close(self, timeout: float) -> None:
        self.client.close(timeout)

    def _carry(self, steps: Steps[None]) -> None:
        drive(steps, self)

    def __getitem__(self, port: str) -> object:
        return self.client if port == "producer" else self

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def renew(self, timeout: float) -> None:
        self.client.close(timeout)
        self.client = self._make()


class AsyncLoop(_Driver):
    """The writer on an asyncio client (``make()``, called inside the event loop, makes one),
    on an event loop of the caller's thread: an :class:`asyncio.Runner` kept from the first
    client to :meth:`close`, each of ``init()``, ``run()`` and ``transaction()`` running it
    until its steps end (between them the loop, and the producer's turns, wait). Ports as
    :class:`Loop`'s, awaited."""

    def __init__(self, result: ClusterNemesisResult, make: Callable[[], AsyncClient],
                 duration: float, *, pace: float = 0.0, abort_every: int = 0) -> None:
        super().__init__(Writer(result, duration, pace=pace, abort_every=abort_every))
        self._make = make
        self._runner: asyncio.Runner | None = asyncio.Runner()
        try:
            self.client = self._runner.run(self._made())
        except BaseException:
            self._runner.close()
            raise

    async def _made(self) -> AsyncClient:
        return self._make()

    def close(self, timeout: float) -> None:
        """Close the client, then the event loop (idempotent)."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        try:
            runner.run(self.client.close(timeout))
        finally:
            runner.close()

    def _carry(self, steps: Steps[None]) -> None:
        if self._runner is None:
            steps.close()
            raise RuntimeError("the writer's event loop is closed")
        self._runner.run(adrive(steps, self))

    def __getitem__(self, port: str) -> object:
        return self.client if port == "producer" else self

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def renew(self, timeout: float) -> None:
        await self.client.close(timeout)
        self.client = self._make()


def open_loop(client: str, servers: str, result: ClusterNemesisResult,
              duration: float) -> Loop | AsyncLoop:
    """The driver of ``client`` (one of :data:`CLIENTS`) with its first producer made.

    Raises:
        ValueError: an unknown ``client``.
    """
    if client in MAKERS:
        return Loop(result, lambda: MAKERS[client](servers), duration)
    if client in ASYNC_MAKERS:
        return AsyncLoop(result, lambda: ASYNC_MAKERS[client](servers), duration)
    raise ValueError(f"client must be one of {', '.join(CLIENTS)}, not {client!r}")
