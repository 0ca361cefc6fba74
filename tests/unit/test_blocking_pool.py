"""ConnectionPool: idle blocking connections and found coordinators kept for later calls."""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest

from eosclient._net import blocking
from eosclient._net.blocking import BlockingConnection, ConnectionPool

ADDRESS = ("127.0.0.1", 9092)


def connection_over(sock: socket.socket) -> BlockingConnection:
    """A BlockingConnection on one end of a socket pair (no handshake: no broker here)."""
    conn = BlockingConnection.__new__(BlockingConnection)
    conn.address, conn._sock = ADDRESS, sock
    return conn


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The connections the pool had to make (each over a fresh socket pair)."""
    out: list[Any] = []

    def make(host: str, port: int, *, timeout: float) -> BlockingConnection:
        ours, theirs = socket.socketpair()
        out.append((ours, theirs))
        return connection_over(ours)

    monkeypatch.setattr(blocking, "BlockingConnection", make)
    return out


def test_a_connection_given_back_is_taken_again(made: list[Any]) -> None:
    pool = ConnectionPool()
    first = pool.take(ADDRESS, timeout=1)
    pool.give(first)
    assert pool.take(ADDRESS, timeout=1) is first and len(made) == 1
    pool.close()


def test_one_the_broker_closed_while_idle_is_replaced(made: list[Any]) -> None:
    pool = ConnectionPool()
    first = pool.take(ADDRESS, timeout=1)
    pool.give(first)
    made[0][1].close()  # the broker's end: idle connections are closed after a while
    second = pool.take(ADDRESS, timeout=1)
    assert second is not first and first.closed and len(made) == 2
    pool.close()


def test_one_idle_too_long_is_closed_not_reused(made: list[Any]) -> None:
    pool = ConnectionPool(max_idle=0.0)
    first = pool.take(ADDRESS, timeout=1)
    pool.give(first)
    assert pool.take(ADDRESS, timeout=1) is not first and first.closed
    pool.close()


def test_a_closed_connection_is_not_kept(made: list[Any]) -> None:
    pool = ConnectionPool()
    first = pool.take(ADDRESS, timeout=1)
    first.close()
    pool.give(first)
    assert pool.take(ADDRESS, timeout=1) is not first


def test_coordinators_are_remembered_until_forgotten() -> None:
    pool = ConnectionPool()
    pool.remember("group", "g", ("h", 1))
    assert pool.coordinator("group", "g") == ("h", 1)
    assert pool.coordinator("transaction", "g") is None
    pool.forget("group", "g")
    assert pool.coordinator("group", "g") is None


def test_one_pool_per_cluster_per_process() -> None:
    assert blocking.pool_for("a:1") is blocking.pool_for("a:1")
    assert blocking.pool_for("a:1") is not blocking.pool_for("b:1")


def test_a_forked_child_starts_with_no_pool() -> None:
    # A Spark daemon forks its Python workers: sockets the parent pooled are not the child's.
    parent = blocking.pool_for("fork:1")
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if it got a pool of its own
        os._exit(0 if blocking.pool_for("fork:1") is not parent else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert blocking.pool_for("fork:1") is parent
