"""Shared pytest configuration: the eosclient broker fixtures, and ``--long``."""

from __future__ import annotations

import pytest

pytest_plugins = ["eosclient.testing.pytest_plugin"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true",
                     help="run the tests marked long (the fault suite's long run)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="the long run: pass --long to run it")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)
