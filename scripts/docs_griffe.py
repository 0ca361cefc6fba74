"""A griffe extension for the docs site: the docstrings' Sphinx roles as Markdown code.

The docstrings are written for ``help()`` and Sphinx-style readers (``:meth:`poll```,
``:class:`~eosclient.errors.FatalError```); mkdocstrings reads Markdown, where a role would
show as ``:meth:`` text. This turns each role into inline code, ``~`` keeping the last name only,
as Sphinx shows it. Named in mkdocs.yml (mkdocstrings' python handler, ``extensions``).
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    name = match[2].rsplit(".", 1)[-1] if match[1] else match[2]
    return f"`{name}`"


class SphinxRoles(Extension):
    """Rewrites the roles of every docstring as it is loaded."""

    def on_object(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code, obj.docstring.value)
