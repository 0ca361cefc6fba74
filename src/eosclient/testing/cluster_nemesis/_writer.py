"""The cluster nemesis's application: a loop of transactions of 20 records that does what the
clients' documentation asks of an application, and the clients it drives (eosclient's and
confluent-kafka's producers), their errors read as retry, abort or close.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Final, Literal, Protocol

from eosclient.errors import AbortableError, EosError, RetriableError
from eosclient.testing.cluster_nemesis._schedule import PARTITIONS, TOPIC, TRANSACTIONAL_ID
from eosclient.testing.cluster_nemesis._verdict import ClusterNemesisResult, Txn, Wedge, value_of

__all__ = ["CK_LOGGER", "CLIENTS", "CLOSE_TIMEOUT", "MAKERS", "RECORDS_PER_TRANSACTION",
           "Abort", "Client", "ClientName", "EosClient", "Fatal", "Loop", "Retry"]

log = logging.getLogger("eosclient.testing.cluster_nemesis")

ClientName = Literal["eosclient", "confluent-kafka"]
CLIENTS: Final[tuple[ClientName, ...]] = ("eosclient", "confluent-kafka")
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


class Loop:
    """The application: transactions of 20 records until the window ends.

    ``pace``: seconds to wait after each transaction (0: none); ``abort_every``: abort, after
    its sends, every transaction whose number is ``abort_every - 1`` modulo ``abort_every``
    (0: none; 2: every other one), as the front targets' steady writer does.
    """

    def __init__(self, result: ClusterNemesisResult, make: Callable[[], Client],
                 duration: float, *, pace: float = 0.0, abort_every: int = 0) -> None:
        self.result, self._make, self._duration = result, make, duration
        self._pace, self._abort_every = pace, abort_every
        self.clock = time.monotonic()  # the schedule's clock: set when the faults start
        self.client = make()

    def now(self) -> float:
        return time.monotonic() - self.clock

    def init(self) -> None:
        """init_transactions, retried while retriable, for at most ``give_up`` seconds."""
        started = time.monotonic()
        while True:
            try:
                self.client.init(_INIT_TIMEOUT)
                return
            except Retry:
                if time.monotonic() - started > self.result.give_up:
                    raise
                time.sleep(_RETRY_PAUSE)

    def run(self) -> None:
        n = len(self.result.txns)  # after any the caller ran itself (a warm-up)
        while self.now() < self._duration:
            txn = Txn(n, round(self.now(), 3))
            self.result.txns.append(txn)
            n += 1
            self.transaction(txn)
            if self._pace:
                time.sleep(self._pace)

    def transaction(self, txn: Txn) -> None:
        started = time.monotonic()
        while True:
            try:
                self.client.begin()
                break
            except Retry as exc:
                if time.monotonic() - started < self.result.give_up:
                    time.sleep(_RETRY_PAUSE)
                    continue
                txn.note = f"begin: {exc}"
                self.recreate(txn, f"begin_transaction() did not succeed: {exc}", txn.began,
                              time.monotonic() - started)
                return
            except Abort as exc:  # an earlier failure not aborted: abort it, begin again
                txn.note = f"begin: {exc}"
                self.abort(txn)
                return
            except Fatal as exc:
                txn.note = f"begin: {exc}"
                self.recreate(txn, f"begin_transaction() raised {exc}", txn.began)
                return
        try:
            for i in range(RECORDS_PER_TRANSACTION):
                self.client.send(i % PARTITIONS, value_of(txn.n, i))
                txn.sent += 1
        except (Retry, Abort, Fatal) as exc:
            txn.note = f"send: {exc}"
            self.abort(txn)
            return
        if self._abort_every and txn.n % self._abort_every == self._abort_every - 1:
            txn.note = "aborted by the application"
            self.abort(txn)
            return
        self.commit(txn)

    def commit(self, txn: Txn) -> None:
        started = time.monotonic()
        at = self.now()
        while True:
            try:
                self.client.commit(self.result.call_timeout)
            except Retry as exc:
                if time.monotonic() - started < self.result.give_up:
                    time.sleep(_RETRY_PAUSE)
                    continue
                txn.commit_seconds = time.monotonic() - started
                txn.outcome, txn.note = "unknown", f"commit: {exc}"
                self.recreate(txn, f"commit_transaction() did not finish: {exc}", at,
                              txn.commit_seconds)
            except Abort as exc:
                txn.commit_seconds = time.monotonic() - started
                txn.note = f"commit: {exc}"
                self.abort(txn)
            except Fatal as exc:
                txn.commit_seconds = time.monotonic() - started
                txn.outcome, txn.note = "unknown", f"commit: {exc}"
                self.recreate(txn, f"commit_transaction() raised {exc}", at, txn.commit_seconds)
            else:
                txn.commit_seconds = time.monotonic() - started
                txn.outcome, txn.ended = "committed", round(self.now(), 3)
            return

    def abort(self, txn: Txn) -> None:
        started = time.monotonic()
        at = self.now()
        while True:
            try:
                self.client.abort(self.result.call_timeout)
            except Retry as exc:
                if time.monotonic() - started < self.result.give_up:
                    time.sleep(_RETRY_PAUSE)
                    continue
                txn.abort_seconds = time.monotonic() - started
                self.recreate(txn, f"abort_transaction() did not finish: {exc}", at,
                              txn.abort_seconds)
            except (Abort, Fatal) as exc:
                txn.abort_seconds = time.monotonic() - started
                self.recreate(txn, f"abort_transaction() raised {exc}", at, txn.abort_seconds)
            else:
                txn.abort_seconds = time.monotonic() - started
                txn.outcome, txn.ended = "aborted", round(self.now(), 3)
            return

    def recreate(self, txn: Txn, what: str, at: float, seconds: float = 0.0) -> None:
        """Close the producer and make a new one (a wedge, whatever the cause)."""
        self.result.wedges.append(Wedge(round(at, 2), txn.n, what, round(seconds, 1)))
        self.client.close(CLOSE_TIMEOUT)
        self.result.recreated += 1
        self.client = self._make()
        self.init()
