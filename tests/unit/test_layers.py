"""Layers import downward only: wire codec -> sans-IO core -> I/O -> public facades.

An upward import would let socket or thread code leak into the sans-IO core, whose whole point is
that it can be tested by feeding responses in and reading requests out.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "eosclient"

# The package root imports every facade: a module below it that takes a name from it climbs to
# the roof (it once worked only because the root set __version__ before its own imports). Banned
# in every layer below; matched exactly, so ``eosclient.errors`` and the like stay allowed.
ROOT = "eosclient"
# The roof: the facades, the fronts over them, and what is built on those.
_FACADES = {"eosclient.producer", "eosclient.consumer", "eosclient.processor", "eosclient.admin",
            "eosclient.group"}
_ROOF = {"eosclient.aio", "eosclient.spark", "eosclient.cli", "eosclient._cli",
         "eosclient.testing", "eosclient._demo"}

# For each internal package, the eosclient modules it must not import, and stdlib modules that
# would mean I/O, threads or clocks inside a layer that must have none.
FORBIDDEN: dict[str, tuple[set[str], set[str]]] = {
    "_core": ({ROOT, "eosclient._net", "eosclient.producer", "eosclient.consumer",
               "eosclient.testing"},
              {"socket", "selectors", "threading", "asyncio", "time", "ssl"}),
    "_protocol": ({ROOT, "eosclient._core", "eosclient._net", "eosclient.producer",
                   "eosclient.testing"},
                  {"socket", "selectors", "threading", "asyncio", "ssl"}),
    "_net": ({ROOT, "eosclient.producer", "eosclient.consumer", "eosclient.testing"}, set()),
    "_producer": ({ROOT, "eosclient.consumer", "eosclient.processor", "eosclient.testing"},
                  set()),
    "_consumer": ({ROOT, "eosclient.producer", "eosclient._producer", "eosclient.consumer",
                   "eosclient.group", "eosclient.processor", "eosclient.testing"}, set()),
    # The processor's decisions sit beside the clients' insides and below every facade: the
    # fronts (sync facade, asyncio, Spark) hand it their clients, it names what it uses of them.
    "_processor": ({ROOT, *_FACADES, *_ROOF}, set()),
    # The admin's insides sit beside the consumer's: no client facade, no CLI, no testing kit.
    "_admin": ({ROOT, "eosclient.producer", "eosclient.consumer", "eosclient.processor",
                "eosclient.admin", "eosclient.cli", "eosclient._cli", "eosclient.testing"},
               set()),
    # The shell commands use the public clients, never the testing kit (brokers are cli.py's).
    "_cli": ({"eosclient.testing", "eosclient._demo"}, set()),
    # The asyncio front waits on the event loop only: no thread of its own, no blocking call.
    "aio": ({ROOT, "eosclient.testing", "eosclient.spark", "eosclient.cli", "eosclient.processor"},
            {"threading", "selectors", "socket"}),
    # The Spark sink sits on the public clients; nothing below it may import it (or pyspark).
    "spark": ({ROOT, "eosclient.testing", "eosclient.cli", "eosclient.processor"}, set()),
    # The root hands on the public names of the clients and nothing else: what needs an extra
    # (Spark, the brokers of the testing kit) or is a front of its own (asyncio, the command
    # line) is imported by whoever uses it, so ``import eosclient`` stays light.
    "__init__.py": (set(_ROOF), set()),
}
_SPARK_FREE = ("_core", "_protocol", "_net", "_producer", "_consumer", "_processor", "_admin",
               "_cli", "__init__.py")


def _imports(path: Path) -> set[str]:
    """The eosclient and other modules ``path`` imports. ``from eosclient import errors`` is
    ``eosclient.errors``; ``from eosclient import X`` of a name defined there is ``eosclient``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module != ROOT:
                names.add(node.module)
                continue
            for alias in node.names:
                submodule = PACKAGE / alias.name
                is_module = submodule.is_dir() or submodule.with_suffix(".py").exists()
                names.add(f"{ROOT}.{alias.name}" if is_module else ROOT)
    return names


def _banned(name: str, banned: set[str]) -> bool:
    """Whether ``name`` is one of ``banned`` or inside one (the root only as itself)."""
    return any(name == b or (b != ROOT and name.startswith(b + ".")) for b in banned)


def _modules(layer: str) -> list[Path]:
    place = PACKAGE / layer
    return [place] if place.is_file() else sorted(place.rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_downward(layer: str) -> None:
    banned_internal, banned_stdlib = FORBIDDEN[layer]
    offences = []
    for path in _modules(layer):
        for name in _imports(path):
            top = name.split(".")[0]
            if top in banned_stdlib or _banned(name, banned_internal):
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


def test_the_version_is_a_leaf() -> None:
    # Any layer may read the version; were it to import anything, that layer would climb with it.
    assert _imports(PACKAGE / "_version.py") == set()


def test_importing_the_package_loads_nothing_of_the_roof() -> None:
    # The ban on __init__.py sees its own imports; this sees what they import in turn.
    roof = (*sorted(_ROOF), "pyspark")
    code = (f"import sys, eosclient; roof = {roof!r}; "
            "print(sorted(m for m in sys.modules if any(m == r or m.startswith(r + '.') "
            "for r in roof)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "[]", result.stdout


def _own_names(tree: ast.Module) -> set[str]:
    """The underscore names a module defines itself: its functions, methods, classes and the
    attributes its methods set on ``self``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id == "self"):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)  # a class's declared slots and fields
    return names


@pytest.mark.parametrize("path", sorted((PACKAGE / "aio").glob("*.py")), ids=lambda p: p.name)
def test_the_asyncio_fronts_read_no_other_class_private_names(path: Path) -> None:
    """The asyncio fronts are as thin as the sync ones: they call the shared sessions' named
    interface, never another module's ``_private`` attribute, so a change behind that interface
    cannot break them without a type error."""
    tree = ast.parse(path.read_text(), str(path))
    own = _own_names(tree)
    offences = sorted(
        f"{path.name}:{node.lineno} reads .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_")
        and not node.attr.startswith("__") and node.attr not in own
        and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}))
    assert not offences, "\n".join(offences)
