"""Shared pytest configuration: the eosclient broker fixtures, and ``--long``."""

from __future__ import annotations

import pytest

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
