"""pytest plugin: real noida-db and Tansu brokers as fixtures.

Opt in from a ``conftest.py``::

    pytest_plugins = ["eosclient.testing.pytest_plugin"]

Fixtures:

``broker``
    Function-scoped and parametrised over ``noida`` and ``tansu``, so a test runs once per broker.
    The broker behind it is shared by the session: one per kind, started on first use, stopped at
    the end. Don't stop, restart or kill it; use ``fresh_broker`` for that. Name topics, groups
    and transactional ids with ``unique_name``/``topic_name`` so tests don't see each other's data.
``noida_broker``, ``tansu_broker``
    The same shared brokers, for tests about one broker only.
``fresh_broker``
    Function-scoped, parametrised like ``broker``: a broker of the test's own, stopped after it.
``unique_name``
    A factory: ``unique_name("group")`` gives a new Kafka-safe name on every call.
``topic_name``
    One unique topic name for the test.

Each test that uses a broker carries the ``broker`` mark and ``noida`` or ``tansu``, so
``pytest -m tansu`` runs the Tansu half. When such a test fails, the broker's log tail is added
to its report and the full log is copied to ``test-logs/<test id>/`` under the rootdir.
"""

from __future__ import annotations

import itertools
import re
import shutil
import signal
import threading
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Final

import pytest

from eosclient.testing.brokers import (
    BROKER_KINDS,
    BrokerError,
    BrokerKind,
    RunningBroker,
    start_broker,
)

__all__ = [
    "broker",
    "fresh_broker",
    "noida_broker",
    "tansu_broker",
    "topic_name",
    "unique_name",
]

LOG_TAIL_LINES: Final = 100
LOGS_DIR: Final = "test-logs"

_MARKERS: Final = {
    "broker": "needs a real broker (started by the eosclient fixtures)",
    "noida": "runs on noida-db only (select with -m noida)",
    "tansu": "runs on Tansu only (select with -m tansu)",
}
_UNSAFE_CHARS: Final = re.compile(r"[^A-Za-z0-9._-]+")


def _param(kind: BrokerKind) -> Any:
    return pytest.param(kind, marks=[pytest.mark.broker, getattr(pytest.mark, kind)], id=kind)


_ALL_KINDS: Final = [_param(kind) for kind in BROKER_KINDS]


class _BrokerPool:
    """The session's shared brokers: started on first use, restarted if one has died."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._brokers: dict[BrokerKind, RunningBroker] = {}
        self._failures: dict[BrokerKind, BrokerError] = {}

    def get(self, kind: BrokerKind) -> RunningBroker:
        if kind in self._failures:  # don't wait for a broken start once per test
            raise self._failures[kind]
        broker = self._brokers.get(kind)
        try:
            if broker is None:
                broker = self._brokers[kind] = self._start(kind)
            elif not broker.running:
                broker.restart()
        except BrokerError as exc:
            self._failures[kind] = exc
            raise
        return broker

    def close(self) -> None:
        for broker in self._brokers.values():
            broker.stop()

    def _start(self, kind: BrokerKind) -> RunningBroker:
        data_dir = self._root / kind / "data" if kind == "noida" else None
        return start_broker(kind, data_dir=data_dir, log_dir=self._root / kind)


@pytest.fixture(scope="session")
def _eosclient_broker_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_BrokerPool]:
    pool = _BrokerPool(tmp_path_factory.mktemp("eosclient-brokers"))
    yield pool
    pool.close()


@pytest.fixture(params=_ALL_KINDS)
def broker(request: pytest.FixtureRequest, _eosclient_broker_pool: _BrokerPool) -> RunningBroker:
    """The session's shared broker of each kind in turn (the test runs once per kind)."""
    kind: BrokerKind = request.param
    return _eosclient_broker_pool.get(kind)


@pytest.fixture(params=[_param("noida")])
def noida_broker(_eosclient_broker_pool: _BrokerPool) -> RunningBroker:
    """The session's shared noida-db broker."""
    return _eosclient_broker_pool.get("noida")


@pytest.fixture(params=[_param("tansu")])
def tansu_broker(_eosclient_broker_pool: _BrokerPool) -> RunningBroker:
    """The session's shared Tansu broker."""
    return _eosclient_broker_pool.get("tansu")


@pytest.fixture(params=_ALL_KINDS)
def fresh_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    """A broker of this test's own, free to stop, kill or restart; stopped after the test."""
    kind: BrokerKind = request.param
    data_dir = tmp_path / f"{kind}-data" if kind == "noida" else None
    with start_broker(kind, data_dir=data_dir, log_dir=tmp_path / f"{kind}-log") as running:
        yield running


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """A factory of names unique to this call, built from the test's name (Kafka-safe)."""
    base = _safe_name(request.node.name)[:80]
    counter = itertools.count(1)

    def make(prefix: str = "eos") -> str:
        return f"{prefix}-{base}-{next(counter)}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def topic_name(unique_name: Callable[[str], str]) -> str:
    """A topic name no other test uses."""
    return unique_name("topic")


def pytest_configure(config: pytest.Config) -> None:
    known = {line.split(":", 1)[0].strip() for line in config.getini("markers")}
    for name, description in _MARKERS.items():
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {description}")
    _stop_on_sigterm()


def pytest_unconfigure(config: pytest.Config) -> None:
    on_main_thread = threading.current_thread() is threading.main_thread()
    if on_main_thread and signal.getsignal(signal.SIGTERM) is _raise_keyboard_interrupt:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for name, running in _brokers_of(item):
            _attach_log(item, report, name, running)
    return report


def _brokers_of(item: pytest.Item) -> list[tuple[str, RunningBroker]]:
    funcargs: dict[str, object] = getattr(item, "funcargs", None) or {}
    found: dict[int, tuple[str, RunningBroker]] = {}
    for name, value in funcargs.items():
        if isinstance(value, RunningBroker):
            found.setdefault(id(value), (name, value))
    return list(found.values())


def _attach_log(
    item: pytest.Item, report: pytest.TestReport, name: str, running: RunningBroker
) -> None:
    target = item.config.rootpath / LOGS_DIR / _safe_name(item.nodeid)[:200]
    target.mkdir(parents=True, exist_ok=True)
    copy = target / f"{name}-{running.log_path.name}"
    if running.log_path.exists():
        shutil.copyfile(running.log_path, copy)
    title = f"{name} log ({running.kind} {running.bootstrap_servers}, full log: {copy})"
    report.sections.append((title, running.log_tail(LOG_TAIL_LINES)))


def _safe_name(text: str) -> str:
    return _UNSAFE_CHARS.sub("_", text).strip("_") or "test"


def _stop_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt, so fixtures and atexit still stop the brokers.

    Brokers run in sessions of their own, so a terminal's or CI runner's signals don't reach them;
    without this, a SIGTERMed pytest would leave them running. A handler someone else installed
    is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
