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
    """Without ``--long``, the long run is deselected (not 51 skips in every summary)."""
    if config.getoption("--long"):
        return
    long_run = [item for item in items if "long" in item.keywords]
    if long_run:
        config.hook.pytest_deselected(items=long_run)
        items[:] = [item for item in items if "long" not in item.keywords]


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
