"""The producers compared, each behind one small interface: open, run one transaction, close.

A *variant* is one way of using one client (eosclient `send()` or `send_batch()`, with or without
pre-registration; confluent-kafka `produce()` or `produce_batch()`; kafka-python `send()`). Its
session is opened with `init_transactions` done, and `transaction()` is the unit that is timed:
begin, send every value, commit, return once the commit is acknowledged.

Every client gets the same settings: `linger.ms`, acks=all (implied by transactions), no
compression; everything else is the client's own default (batch sizes differ: confluent-kafka
batches up to 1 MB, kafka-python 16 KB).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import aiokafka
import confluent_kafka
import confluent_kafka.aio
import kafka

import eosclient

# The producer is written alongside this benchmark; until it lands (or while it is half written
# and fails to import for any reason), its rows say so and the peers still run.
try:
    from eosclient import TopicPartition, TransactionalProducer
except Exception as exc:
    EOSCLIENT_MISSING: str | None = "not available yet"
    EOSCLIENT_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"
else:
    EOSCLIENT_MISSING = None
    EOSCLIENT_IMPORT_ERROR = ""

EOSCLIENT: Final = "eosclient"
CONFLUENT: Final = "confluent-kafka"
KAFKA_PYTHON: Final = "kafka-python"
AIOKAFKA: Final = "aiokafka"

_TIMEOUT: Final = 30.0
_POLL_EVERY: Final = 1000  # confluent-kafka: serve delivery reports every so often, as advised
_UNASSIGNED: Final = -1  # confluent-kafka: RD_KAFKA_PARTITION_UA, "let the partitioner choose"


@dataclass(frozen=True, slots=True)
class Settings:
    """What every client is configured with."""

    bootstrap_servers: str
    linger_ms: int
    # --tls: librdkafka's settings (eosclient and confluent-kafka take the same dict) and
    # kafka-python's keywords for the same; empty for plaintext.
    security: Mapping[str, str] = field(default_factory=dict)
    kafka_python_security: Mapping[str, Any] = field(default_factory=dict)
    # The spread scenario: a transaction's records go round-robin over this many partitions,
    # record by record (0: as `transaction`'s `partition` says). eosclient and confluent-kafka
    # only: the scale figures compare those two.
    spread_over: int = 0


class Session(Protocol):
    """An initialised transactional producer."""

    def transaction(self, topic: str, values: Sequence[bytes], partition: int | None) -> None:
        """Begin, send `values` (to `partition`, or the client's partitioner), commit."""

    def close(self) -> None:
        """Release the producer (it has no open transaction)."""


Opener = Callable[[Settings, str], Session]


@dataclass(frozen=True, slots=True)
class Variant:
    """One way of using one client, as it appears in the table."""

    key: str
    family: str
    label: str
    open: Opener

    @property
    def missing(self) -> str | None:
        """Why this variant cannot run here, or None."""
        return EOSCLIENT_MISSING if self.family == EOSCLIENT else None


def versions() -> dict[str, str]:
    """The version of each client (and of librdkafka under confluent-kafka)."""
    return {
        EOSCLIENT: eosclient.__version__
        + (f" (no producer: {EOSCLIENT_IMPORT_ERROR})" if EOSCLIENT_MISSING else ""),
        CONFLUENT: f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})",
        KAFKA_PYTHON: kafka.__version__,
        AIOKAFKA: aiokafka.__version__,
    }


# --- eosclient ----------------------------------------------------------------------------------


class _EosSession:
    def __init__(self, settings: Settings, txn_id: str, *, batch: bool, preregister: bool) -> None:
        self._producer: Any = TransactionalProducer(
            bootstrap_servers=settings.bootstrap_servers,
            transactional_id=txn_id,
            config={"linger.ms": settings.linger_ms, **settings.security},
        )
        self._batch = batch
        self._preregister = preregister
        self._spread = settings.spread_over
        self._producer.init_transactions(timeout=_TIMEOUT)

    def transaction(self, topic: str, values: Sequence[bytes], partition: int | None) -> None:
        producer = self._producer
        if self._spread:
            producer.begin_transaction()
            send, spread = producer.send, self._spread
            for n, value in enumerate(values):
                send(topic, value, partition=n % spread)
            producer.commit_transaction(timeout=_TIMEOUT)
            return
        if self._preregister and partition is not None:
            producer.begin_transaction(partitions=[TopicPartition(topic, partition)])
        else:
            producer.begin_transaction()
        if self._batch:
            producer.send_batch(topic, values, partition=partition)
        else:
            send = producer.send
            for value in values:
                send(topic, value, partition=partition)
        producer.commit_transaction(timeout=_TIMEOUT)

    def close(self) -> None:
        self._producer.close(timeout=_TIMEOUT)


def _eos(*, batch: bool = False, preregister: bool = False) -> Opener:
    def open_session(settings: Settings, txn_id: str) -> Session:
        return _EosSession(settings, txn_id, batch=batch, preregister=preregister)

    return open_session


# --- confluent-kafka ----------------------------------------------------------------------------


class _ConfluentSession:
    def __init__(self, settings: Settings, txn_id: str, *, batch: bool) -> None:
        self._producer = confluent_kafka.Producer({
            "bootstrap.servers": settings.bootstrap_servers,
            "transactional.id": txn_id,
            "linger.ms": settings.linger_ms,
            "compression.type": "none",
            "log.connection.close": False,
            **settings.security,
        })
        self._batch = batch
        self._spread = settings.spread_over
        self._producer.init_transactions(_TIMEOUT)

    def transaction(self, topic: str, values: Sequence[bytes], partition: int | None) -> None:
        producer = self._producer
        producer.begin_transaction()
        if self._spread:
            self._produce_spread(topic, values)
        elif self._batch:
            self._produce_batch(topic, values, partition)
        else:
            self._produce(topic, values, partition)
        producer.commit_transaction(_TIMEOUT)

    def _produce(self, topic: str, values: Sequence[bytes], partition: int | None) -> None:
        produce, poll = self._producer.produce, self._producer.poll
        where = _UNASSIGNED if partition is None else partition
        for n, value in enumerate(values, 1):
            try:
                produce(topic, value, partition=where)
            except BufferError:  # the local queue is full: serve it, then try once more
                poll(0.05)
                produce(topic, value, partition=where)
            if n % _POLL_EVERY == 0:
                poll(0)

    def _produce_spread(self, topic: str, values: Sequence[bytes]) -> None:
        produce, poll, spread = self._producer.produce, self._producer.poll, self._spread
        for n, value in enumerate(values):
            try:
                produce(topic, value, partition=n % spread)
            except BufferError:  # the local queue is full: serve it, then try once more
                poll(0.05)
                produce(topic, value, partition=n % spread)
            if n % _POLL_EVERY == _POLL_EVERY - 1:
                poll(0)

    def _produce_batch(self, topic: str, values: Sequence[bytes], partition: int | None) -> None:
        messages = [{"value": value} for value in values]  # the dicts are part of the API's cost
        where = _UNASSIGNED if partition is None else partition
        queued = self._producer.produce_batch(topic, messages, partition=where)
        if queued != len(messages):
            raise RuntimeError(f"produce_batch queued {queued} of {len(messages)}")
        self._producer.poll(0)

    def close(self) -> None:
        self._producer.flush(_TIMEOUT)
        self._producer.close()


def _confluent(*, batch: bool = False) -> Opener:
    def open_session(settings: Settings, txn_id: str) -> Session:
        return _ConfluentSession(settings, txn_id, batch=batch)

    return open_session


# --- kafka-python -------------------------------------------------------------------------------


class _KafkaPythonSession:
    def __init__(self, settings: Settings, txn_id: str) -> None:
        self._producer = kafka.KafkaProducer(
            bootstrap_servers=settings.bootstrap_servers,
            transactional_id=txn_id,
            linger_ms=settings.linger_ms,
            compression_type=None,
            **settings.kafka_python_security,
        )
        self._producer.init_transactions()

    def transaction(self, topic: str, values: Sequence[bytes], partition: int | None) -> None:
        producer = self._producer
        producer.begin_transaction()
        send = producer.send
        for value in values:
            send(topic, value, partition=partition)
        producer.commit_transaction()

    def close(self) -> None:
        self._producer.close(timeout=_TIMEOUT)


def _kafka_python(settings: Settings, txn_id: str) -> Session:
    return _KafkaPythonSession(settings, txn_id)


# --- asyncio: eosclient.aio, aiokafka, confluent-kafka's AIOProducer ---------------------------
#
# Each session owns one event loop (asyncio.Runner) for its whole life; a timed transaction is one
# runner.run() of a coroutine that begins, sends every value (awaiting each send, as an async
# application does) and awaits the commit.


class _AsyncSession:
    """Runs an async producer's open / transaction / close on the session's own loop."""

    def __init__(self, settings: Settings, txn_id: str) -> None:
        self._runner = asyncio.Runner()
        self._runner.run(self._open(settings, txn_id))

    def transaction(self, topic: str, values: Sequence[bytes], partition: int | None) -> None:
        self._runner.run(self._transaction(topic, values, partition))

    def close(self) -> None:
        try:
            self._runner.run(self._close())
        finally:
            self._runner.close()

    async def _open(self, settings: Settings, txn_id: str) -> None:
        raise NotImplementedError

    async def _transaction(self, topic: str, values: Sequence[bytes],
                           partition: int | None) -> None:
        raise NotImplementedError

    async def _close(self) -> None:
        raise NotImplementedError


class _EosAioSession(_AsyncSession):
    def __init__(self, settings: Settings, txn_id: str, *, batch: bool, preregister: bool) -> None:
        self._batch, self._preregister = batch, preregister
        super().__init__(settings, txn_id)

    async def _open(self, settings: Settings, txn_id: str) -> None:
        from eosclient.aio import AsyncTransactionalProducer  # noqa: PLC0415

        self._producer = AsyncTransactionalProducer(
            bootstrap_servers=settings.bootstrap_servers, transactional_id=txn_id,
            config={"linger.ms": settings.linger_ms, **settings.security})
        await self._producer.start()
        await self._producer.init_transactions(timeout=_TIMEOUT)

    async def _transaction(self, topic: str, values: Sequence[bytes],
                           partition: int | None) -> None:
        producer = self._producer
        if self._preregister and partition is not None:
            producer.begin_transaction(partitions=[TopicPartition(topic, partition)])
        else:
            producer.begin_transaction()
        if self._batch:
            await producer.send_batch(topic, values, partition=partition)
        else:
            send = producer.send
            for value in values:
                await send(topic, value, partition=partition)
        await producer.commit_transaction(timeout=_TIMEOUT)

    async def _close(self) -> None:
        await self._producer.close(timeout=_TIMEOUT)


def _eos_aio(*, batch: bool = False, preregister: bool = False) -> Opener:
    def open_session(settings: Settings, txn_id: str) -> Session:
        return _EosAioSession(settings, txn_id, batch=batch, preregister=preregister)

    return open_session


class _AiokafkaSession(_AsyncSession):
    async def _open(self, settings: Settings, txn_id: str) -> None:
        if settings.security:
            raise RuntimeError("the aiokafka variant runs in plaintext only")
        self._producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap_servers, transactional_id=txn_id,
            linger_ms=settings.linger_ms, compression_type=None, enable_idempotence=True)
        await self._producer.start()

    async def _transaction(self, topic: str, values: Sequence[bytes],
                           partition: int | None) -> None:
        producer = self._producer
        async with producer.transaction():
            send = producer.send  # queues, returns a future of the delivery (not awaited)
            for value in values:
                await send(topic, value, partition=partition)

    async def _close(self) -> None:
        await self._producer.stop()


def _aiokafka(settings: Settings, txn_id: str) -> Session:
    return _AiokafkaSession(settings, txn_id)


class _ConfluentAioSession(_AsyncSession):
    async def _open(self, settings: Settings, txn_id: str) -> None:
        self._producer = confluent_kafka.aio.AIOProducer({
            "bootstrap.servers": settings.bootstrap_servers, "transactional.id": txn_id,
            "linger.ms": settings.linger_ms, "compression.type": "none",
            "log.connection.close": False, **settings.security})
        await self._producer.init_transactions(_TIMEOUT)

    async def _transaction(self, topic: str, values: Sequence[bytes],
                           partition: int | None) -> None:
        producer = self._producer
        await producer.begin_transaction()
        produce = producer.produce
        if partition is None:
            for value in values:
                await produce(topic, value)
        else:
            for value in values:
                await produce(topic, value, partition=partition)
        await producer.commit_transaction(_TIMEOUT)

    async def _close(self) -> None:
        await self._producer.close()


def _confluent_aio(settings: Settings, txn_id: str) -> Session:
    return _ConfluentAioSession(settings, txn_id)


# --- the variants, by scenario ------------------------------------------------------------------

EOS_SEND = Variant("eos-send", EOSCLIENT, "eosclient send()", _eos())
EOS_BATCH = Variant("eos-batch", EOSCLIENT, "eosclient send_batch()", _eos(batch=True))
EOS_PLAIN = Variant("eos-plain", EOSCLIENT, "eosclient", _eos())
EOS_PREREG = Variant("eos-prereg", EOSCLIENT, "eosclient pre-registered", _eos(preregister=True))
CONFLUENT_PRODUCE = Variant("ck-produce", CONFLUENT, "confluent-kafka produce()", _confluent())
CONFLUENT_BATCH = Variant(
    "ck-batch", CONFLUENT, "confluent-kafka produce_batch()", _confluent(batch=True)
)
CONFLUENT_PLAIN = Variant("ck", CONFLUENT, "confluent-kafka", _confluent())
KAFKA_PYTHON_SEND = Variant("kp-send", KAFKA_PYTHON, "kafka-python send()", _kafka_python)
KAFKA_PYTHON_PLAIN = Variant("kp", KAFKA_PYTHON, "kafka-python", _kafka_python)

EOS_AIO_SEND = Variant("eos-aio-send", EOSCLIENT, "eosclient.aio send()", _eos_aio())
EOS_AIO_BATCH = Variant("eos-aio-batch", EOSCLIENT, "eosclient.aio send_batch()",
                        _eos_aio(batch=True))
EOS_AIO_PLAIN = Variant("eos-aio", EOSCLIENT, "eosclient.aio", _eos_aio())
AIOKAFKA_SEND = Variant("aiokafka-send", AIOKAFKA, "aiokafka send()", _aiokafka)
AIOKAFKA_PLAIN = Variant("aiokafka", AIOKAFKA, "aiokafka", _aiokafka)
CONFLUENT_AIO_PRODUCE = Variant("ck-aio-produce", CONFLUENT, "confluent-kafka AIOProducer",
                                _confluent_aio)
CONFLUENT_AIO_PLAIN = Variant("ck-aio", CONFLUENT, "confluent-kafka AIOProducer", _confluent_aio)

# The spread scenario (--partitions): send() against produce(), record by record over every
# partition.
SPREAD_VARIANTS: Final = (EOS_SEND, CONFLUENT_PRODUCE)
BULK_VARIANTS: Final = (EOS_SEND, EOS_BATCH, CONFLUENT_PRODUCE, CONFLUENT_BATCH, KAFKA_PYTHON_SEND)
SMALL_VARIANTS: Final = (EOS_PLAIN, EOS_PREREG, CONFLUENT_PLAIN, KAFKA_PYTHON_PLAIN)
# --asyncio: the async producers beside the sync eosclient they must stay within 0.9x of.
ASYNC_BULK_VARIANTS: Final = (EOS_SEND, EOS_BATCH, EOS_AIO_SEND, EOS_AIO_BATCH, AIOKAFKA_SEND,
                              CONFLUENT_AIO_PRODUCE)
ASYNC_SMALL_VARIANTS: Final = (EOS_PLAIN, EOS_AIO_PLAIN, AIOKAFKA_PLAIN, CONFLUENT_AIO_PLAIN)
