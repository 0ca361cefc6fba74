"""Layers import downward only: wire codec -> sans-IO core -> I/O -> public facades.

An upward import would let socket or thread code leak into the sans-IO core, whose whole point is
that it can be tested by feeding responses in and reading requests out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "eosclient"

# For each internal package, the eosclient modules it must not import, and stdlib modules that
# would mean I/O, threads or clocks inside a layer that must have none.
FORBIDDEN: dict[str, tuple[set[str], set[str]]] = {
    "_core": ({"eosclient._net", "eosclient.producer", "eosclient.consumer", "eosclient.testing"},
              {"socket", "selectors", "threading", "asyncio", "time", "ssl"}),
    "_protocol": ({"eosclient._core", "eosclient._net", "eosclient.producer", "eosclient.testing"},
                  {"socket", "selectors", "threading", "asyncio", "ssl"}),
    "_net": ({"eosclient.producer", "eosclient.consumer", "eosclient.testing"}, set()),
    "_producer": ({"eosclient.consumer", "eosclient.processor", "eosclient.testing"}, set()),
    "_consumer": ({"eosclient.producer", "eosclient._producer", "eosclient.consumer",
                   "eosclient.group", "eosclient.processor", "eosclient.testing"}, set()),
    # The admin's insides sit beside the consumer's: no client facade, no CLI, no testing kit.
    "_admin": ({"eosclient.producer", "eosclient.consumer", "eosclient.processor",
                "eosclient.admin", "eosclient.cli", "eosclient._cli", "eosclient.testing"},
               set()),
    # The shell commands use the public clients, never the testing kit (brokers are cli.py's).
    "_cli": ({"eosclient.testing", "eosclient._demo"}, set()),
    # The asyncio front waits on the event loop only: no thread of its own, no blocking call.
    "aio": ({"eosclient.testing", "eosclient.spark", "eosclient.cli", "eosclient.processor"},
            {"threading", "selectors", "socket"}),
    # The Spark sink sits on the public clients; nothing below it may import it (or pyspark).
    "spark": ({"eosclient.testing", "eosclient.cli", "eosclient.processor"}, set()),
}
_SPARK_FREE = ("_core", "_protocol", "_net", "_producer", "_consumer", "_processor", "_admin",
               "_cli")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_downward(layer: str) -> None:
    banned_internal, banned_stdlib = FORBIDDEN[layer]
    offences = []
    for path in _modules(layer):
        for name in _imports(path):
            top = name.split(".")[0]
            if top in banned_stdlib or any(name == b or name.startswith(b + ".")
                                           for b in banned_internal):
                offences.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert not offences, "\n".join(offences)


@pytest.mark.parametrize("layer", _SPARK_FREE)
def test_nothing_below_the_spark_sink_imports_it_or_pyspark(layer: str) -> None:
    offences = [f"{path.relative_to(PACKAGE)} imports {name}"
                for path in _modules(layer) for name in _imports(path)
                if name.split(".")[0] == "pyspark" or name.startswith("eosclient.spark")]
    assert not offences, "\n".join(offences)


def test_errors_module_depends_on_nothing_above_it() -> None:
    allowed = {"eosclient._error_table"}
    for path in (PACKAGE / "errors.py", PACKAGE / "_error_table.py"):
        internal = {n for n in _imports(path) if n.startswith("eosclient")}
        assert internal <= allowed, (path.name, internal - allowed)
