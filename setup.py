"""Build hook: compile the codec's hot modules with mypyc when it and a C compiler are at hand.

The modules stay plain Python (the fallback, and the one source of the algorithm); mypyc
compiles the same files into extension modules that Python imports in their place. Any failure
here (no compiler, no mypyc, a compile error) leaves the pure-Python package, with a warning.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HOT = ["src/eosclient/_core/decode.py", "src/eosclient/_core/encoder.py",
       "src/eosclient/_core/partitioner.py"]
HOT_PACKAGE = "eosclient._core"


def _warn(message: str) -> None:
    print(f"eosclient: {message}; the pure-Python codec is used", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing: the package works without the extensions."""

    def run(self) -> None:
        self.compiled: list[str] = []
        try:
            super().run()
        except Exception as exc:
            _warn(f"the accelerator was not built ({exc})")
        self._record()

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            _warn(f"{ext.name} was not compiled ({exc})")
        else:
            self.compiled.append(ext.name)

    def _record(self) -> None:
        """Write the SHA-256 of each source compiled beside its extension (eosclient._core._accel
        imports the source instead of an extension built from an older one)."""
        lines = []
        built = {ext.name for ext in self.extensions}
        for source in HOT:
            name = source.removeprefix("src/").removesuffix(".py").replace("/", ".")
            # mypyc's separate mode builds a shim (name) and the code (name__mypyc): a shim
            # built over code that failed to compile would load the code of an earlier build.
            parts = [name] + [f"{name}__mypyc"] * (f"{name}__mypyc" in built)
            if all(part in self.compiled for part in parts):
                digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
                lines.append(f"{digest}  {Path(source).name}\n")
        target = Path(self.get_ext_fullpath(HOT_PACKAGE + ".x")).parent
        target.mkdir(parents=True, exist_ok=True)
        (target / "compiled-from.sha256").write_text("".join(lines))


def _extensions() -> list:
    if os.environ.get("EOSCLIENT_PURE_PYTHON") == "1":
        return []
    try:
        from mypyc.build import mypycify  # noqa: PLC0415 - optional: only where it is
    except ImportError:
        _warn("mypyc is not installed")
        return []
    try:
        # The build runs in an isolated environment without the runtime dependencies (crc32c,
        # the compression codecs): their imports are typed as Any rather than failing the build.
        return mypycify(["--ignore-missing-imports", *HOT], opt_level="3", separate=True)
    except (Exception, SystemExit) as exc:
        _warn(f"mypyc failed ({exc})")
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
