"""Which build of the codec's hot modules is imported: compiled (mypyc) or pure Python.

The modules in :data:`HOT` are plain Python, and the one source of their algorithms. When a C
compiler is present at install time, ``setup.py`` also compiles them with mypyc into extension
modules beside them, which Python imports in their place; it records the SHA-256 of each source
it compiled in :data:`BUILT_FROM` (a file beside this one).

:func:`install` runs before any of them is imported (from ``eosclient._core``'s ``__init__``)
and puts a finder first on ``sys.meta_path`` that imports the ``.py`` file instead when

* ``EOSCLIENT_PURE_PYTHON=1`` is set (the fallback, forced: tests and debugging), or
* the source changed since it was compiled (an editable install being worked on), or the last
  build did not compile it (an extension left from an earlier one): a stale extension would run
  other code than the source. This is logged at WARNING, naming the module and the fix.

:func:`compiled` says which modules run compiled; ``eosclient.accelerated`` is whether all do.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Final

__all__ = ["BUILT_FROM", "ENV", "HOT", "compiled", "install", "load_pure"]

log = logging.getLogger("eosclient")

ENV: Final = "EOSCLIENT_PURE_PYTHON"
"""Set to ``1`` to import the pure-Python modules even where compiled ones are installed."""

HOT: Final = ("eosclient._core.decode", "eosclient._core.encoder", "eosclient._core.partitioner")
"""The modules ``setup.py`` compiles (the same list as its ``HOT``)."""

BUILT_FROM: Final = "compiled-from.sha256"
"""The file, beside this module, in which the build records ``<sha256>  <source name>`` lines."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _recorded(directory: Path) -> dict[str, str]:
    try:
        lines = (directory / BUILT_FROM).read_text().splitlines()
    except OSError:
        return {}
    return {name: digest for digest, _, name in (line.partition("  ") for line in lines)}


class _PureFinder(importlib.abc.MetaPathFinder):
    """Finds the ``.py`` source of the named modules, ahead of any extension module."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        for entry in path or ():
            source = Path(entry) / (fullname.rpartition(".")[2] + ".py")
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def _stale(directory: Path) -> set[str]:
    """The hot modules with an extension module not compiled from their source as it is now
    (edited since, or left by an earlier build: the last one recorded no hash for it)."""
    recorded = _recorded(directory)
    stale = set()
    for name in HOT:
        base = name.rpartition(".")[2]
        source = directory / f"{base}.py"
        if not any((directory / f"{base}{suffix}").is_file()
                   for suffix in importlib.machinery.EXTENSION_SUFFIXES):
            continue
        if source.is_file() and _sha256(source) != recorded.get(source.name):
            stale.add(name)
    return stale


def install(package_dir: str) -> None:
    """Put the finder first when the pure modules must be imported (module docstring)."""
    if os.environ.get(ENV) == "1":
        names = set(HOT)
    else:
        names = _stale(Path(package_dir))
        for name in sorted(names):
            log.warning("%s: the extension module beside it was not compiled from its source as "
                    "it is now, so the pure-Python source is used "
                        "(reinstall, e.g. scripts/setup-venv, to compile it again)", name)
    if names and not any(isinstance(f, _PureFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PureFinder(names))


def compiled() -> dict[str, bool]:
    """Each hot module (imported now if it was not) -> whether it runs compiled."""
    out = {}
    for name in HOT:
        module = importlib.import_module(name)
        loader = module.__spec__.loader if module.__spec__ is not None else None
        out[name] = isinstance(loader, importlib.machinery.ExtensionFileLoader)
    return out


def load_pure(name: str) -> ModuleType:
    """A fresh copy of hot module ``name`` run from its ``.py`` source, whichever build is
    imported under ``name`` (so tests can hold the two builds side by side). It is registered
    as ``<name>_pure``; its classes are its own (compare values, not types)."""
    module = importlib.import_module(name)
    assert module.__file__ is not None
    source = Path(module.__file__).parent / f"{name.rpartition('.')[2]}.py"
    alias = f"{name}_pure"
    spec = importlib.util.spec_from_file_location(alias, source)
    assert spec is not None and spec.loader is not None
    pure = importlib.util.module_from_spec(spec)
    sys.modules[alias] = pure
    spec.loader.exec_module(pure)
    return pure
