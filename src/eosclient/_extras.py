"""How to install an extra, said one way wherever a missing dependency is explained.

eosclient is not on the package index yet, so installing an extra by the package's name fails:
the README's Install section installs from a clone (``pip install ".[spark]"``) or from a built
wheel (``pip install "<the wheel>[spark]"``). Every message that names an extra takes its
words from :func:`install_extra`, so they change together when the package is published.
"""

from __future__ import annotations

__all__ = ["install_extra"]


def install_extra(extra: str) -> str:
    """The instruction for installing eosclient's ``extra`` (a name in pyproject.toml's
    ``[project.optional-dependencies]``), as the README's Install section gives it."""
    return (f'install eosclient with its "{extra}" extra: pip install ".[{extra}]" in a clone '
            f'of eosclient, or pip install "<the built wheel>[{extra}]" (README: Install)')
