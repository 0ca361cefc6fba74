"""Commit or abort prepared transactions from any process: the I/O around
:class:`eosclient._core.prepared.EndPrepared`.

Blocking connections, shared by every transaction ended in one call; requests go one at a
time (a coordinator answers EndTxn once its markers are written, so a pipeline would save
little next to the markers' own latency). :func:`end_prepared` and :func:`check_prepared`
connect afresh and close what they opened; :func:`end_pooled` and :func:`check_pooled` take
connections and known coordinators from a :class:`~eosclient._net.blocking.ConnectionPool`
and leave them there (the Spark writer's driver ends a few transactions per batch). TLS and
SASL are not used here yet: the connections are plaintext.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from eosclient._core.prepared import CheckPrepared, EndPrepared, PreparedTransaction, Step
from eosclient._core.types import TopicPartition
from eosclient._net.blocking import BlockingConnection, ConnectionPool
from eosclient.errors import KafkaConnectionError, KafkaTimeoutError

__all__ = ["check_pooled", "check_prepared", "end_pooled", "end_prepared"]

_KIND = "transaction"


def end_prepared(bootstrap_servers: str, prepared: Iterable[PreparedTransaction], *,
                 commit: bool, timeout: float) -> None:
    """Commit (or abort) each prepared transaction, in order, within ``timeout`` in all.

    Repeating a call that failed half way is safe: a transaction already ended with the same
    epoch is answered NONE again.

    Raises:
        FencedError: a transaction's transactional id was initialised again since it was
            prepared, which aborted it; the transactions before it in ``prepared`` are ended.
        KafkaTimeoutError: not all were ended within ``timeout``; call again to resume.
        EosError: a coordinator refused (e.g. not authorised).
    """
    pool = ConnectionPool()
    try:
        end_pooled(pool, bootstrap_servers, prepared, commit=commit, timeout=timeout)
    finally:
        pool.close()


def check_prepared(bootstrap_servers: str, prepared: Iterable[PreparedTransaction],
                   partition: TopicPartition, *, timeout: float) -> None:
    """Check that each prepared transaction is still live (its epoch current), ending none.

    Raises:
        FencedError: one was aborted by a later initialisation of its transactional id.
        KafkaTimeoutError: not all were checked within ``timeout``.
        EosError: a coordinator refused.
    """
    pool = ConnectionPool()
    try:
        check_pooled(pool, bootstrap_servers, prepared, partition, timeout=timeout)
    finally:
        pool.close()


def end_pooled(pool: ConnectionPool, bootstrap_servers: str,
               prepared: Iterable[PreparedTransaction], *, commit: bool, timeout: float) -> None:
    """:func:`end_prepared` through ``pool``'s connections and coordinators (left there)."""
    _run(pool, bootstrap_servers, timeout, (
        lambda item: EndPrepared(item, commit=commit,
                                 coordinator=pool.coordinator(_KIND, item.transactional_id)),
        prepared))


def check_pooled(pool: ConnectionPool, bootstrap_servers: str,
                 prepared: Iterable[PreparedTransaction], partition: TopicPartition, *,
                 timeout: float) -> None:
    """:func:`check_prepared` through ``pool``'s connections and coordinators (left there)."""
    _run(pool, bootstrap_servers, timeout, (
        lambda item: CheckPrepared(item, partition,
                                   coordinator=pool.coordinator(_KIND, item.transactional_id)),
        prepared))


def _run(pool: ConnectionPool, bootstrap_servers: str, timeout: float,
         work: tuple[Callable[[PreparedTransaction], EndPrepared],
                     Iterable[PreparedTransaction]]) -> None:
    deadline = time.monotonic() + timeout
    brokers = [_address(s) for s in bootstrap_servers.split(",") if s.strip()]
    held: dict[tuple[str, int], BlockingConnection] = {}
    make, items = work
    try:
        for item in items:
            _end_one(make(item), brokers, pool, held, deadline)
    finally:
        for conn in held.values():
            pool.give(conn)


def _end_one(ending: EndPrepared, brokers: list[tuple[str, int]], pool: ConnectionPool,
             held: dict[tuple[str, int], BlockingConnection], deadline: float) -> None:
    turn = 0
    key = ending.prepared.transactional_id
    while not ending.done:
        now = time.monotonic()
        if now >= deadline:
            verb = "check" if isinstance(ending, CheckPrepared) else \
                "commit" if ending.commit else "abort"
            raise KafkaTimeoutError(
                f"EndTxn({verb}) of {ending.prepared.transactional_id!r} not answered in time "
                f"(last: {ending.error!r}); the outcome may be unknown, call again to resume")
        request = ending.next_request(now)
        if request is None:
            time.sleep(max(0.0, min(ending.wait_until(), deadline) - now))
            continue
        step, body = request
        if step is Step.FIND:
            pool.forget(_KIND, key)
            address = brokers[turn % len(brokers)]
            turn += 1
        else:
            assert ending.coordinator is not None
            address = (ending.coordinator.host, ending.coordinator.port)
        try:
            conn = held.get(address)
            if conn is None or conn.closed:
                conn = held[address] = pool.take(address, timeout=max(0.01, deadline - now))
        except (KafkaConnectionError, KafkaTimeoutError) as exc:  # not reached: retry
            ending.on_failure(exc, time.monotonic())
            continue
        try:
            response = conn.request(body, timeout=max(0.01, deadline - time.monotonic()))
        except KafkaConnectionError as exc:  # the broker ended a live connection (Tansu: a
            held.pop(address, None)  # stale epoch): the core counts these
            if exc.__cause__ is None:
                exc.__cause__ = EOFError("the broker closed the connection")
            ending.on_failure(exc, time.monotonic())
            continue
        except KafkaTimeoutError as exc:
            held.pop(address, None)
            ending.on_failure(exc, time.monotonic())
            continue
        ending.on_response(response, time.monotonic())
        if step is Step.FIND and ending.coordinator is not None:
            pool.remember(_KIND, key, ending.coordinator)
    if ending.error is not None:
        raise ending.error


def _address(server: str) -> tuple[str, int]:
    host, _, port = server.strip().rpartition(":")
    return host.strip("[]"), int(port)

