"""Shared pytest configuration: the eosclient broker fixtures, and ``--long``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

_T = TypeVar("_T")

pytest_plugins = ["eosclient.testing.pytest_plugin"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true",
                     help="run the tests marked long (the fault suite's long run)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``--long``, the long run is deselected (not 51 skips in every summary), and so
    are the Tansu runs of tests marked ``long_on_tansu``: Tansu holds each group join for about
    half the session timeout, so a test that rebalances a group several times takes 20-25 s
    there (about 2 s on noida-db, where the fast suite runs it)."""
    if config.getoption("--long"):
        return
    long_run = [item for item in items if "long" in item.keywords
                or ("long_on_tansu" in item.keywords and _broker_of(item) == "tansu")]
    if long_run:
        config.hook.pytest_deselected(items=long_run)
        dropped = set(map(id, long_run))
        items[:] = [item for item in items if id(item) not in dropped]


def _broker_of(item: pytest.Item) -> object:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("broker") if callspec is not None else None


def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop  # noqa: PLC0415 - optional extra
    except ImportError:
        return None
    return uvloop.new_event_loop


_LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": _uvloop_factory()}


@pytest.fixture(params=sorted(_LOOPS))
def run_async(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, _T]], _T]:
    """Run a coroutine to its end on a new event loop: the standard one, and uvloop's (the
    ``aio`` extra) where it is installed, skipped where not."""
    factory = _LOOPS[request.param]
    if factory is None:
        pytest.skip('uvloop is not installed (the aio extra: pip install ".[aio]")')

    def run(coro: Coroutine[Any, Any, _T]) -> _T:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)

    return run
