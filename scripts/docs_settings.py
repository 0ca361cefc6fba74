"""The settings reference page, drawn from the config dataclasses.

``scripts/gen_docs.py`` writes it to ``docs/settings.md`` and the tests check that the page is
current (``gen_docs.py --check``), so it cannot drift from ``eosclient/config.py``. It is in the
repository, not made at site build time, so that the links to it work where the pages are read
as they are (a repository browser, a checkout). Run this alone to print the page:
``.venv/bin/python scripts/docs_settings.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from eosclient.config import AdminConfig, ClientConfig, ConsumerConfig, ProducerConfig

_INTRO = """\
# Settings reference

Generated from `eosclient/config.py` by `scripts/gen_docs.py`; do not edit by hand. Every
setting can be given by its Kafka (or librdkafka) key in `config={...}`, or as a keyword where
the constructor has one; the config objects (`producer.config`, `consumer.config`) carry it as
the attribute named here. A mistyped key fails at construction, naming the nearest known key.
Settings marked *eosclient* in their description are this client's own.
"""

_SECTIONS: tuple[tuple[str, type[ClientConfig], str], ...] = (
    ("Every client", ClientConfig,
     "`TransactionalProducer`, `ReadCommittedConsumer` (and the processor's two clients)."),
    ("TransactionalProducer", ProducerConfig, "`ProducerConfig`, besides the settings above."),
    ("ReadCommittedConsumer", ConsumerConfig, "`ConsumerConfig`, besides the settings above."),
    ("Admin", AdminConfig, "`AdminConfig`, besides the settings above."),
)


def settings_markdown() -> str:
    """The whole page: one table per config class, one row per setting it adds."""
    lines = [_INTRO]
    for title, cls, what in _SECTIONS:
        lines += ["", f"## {title}", "", what, "",
                  "| Kafka / librdkafka key | attribute | type | default | what it does |",
                  "|---|---|---|---|---|"]
        lines += [_row(spec) for spec in _own_fields(cls)]
    return "\n".join(lines) + "\n"


def _own_fields(cls: type[ClientConfig]) -> list[dataclasses.Field[Any]]:
    inherited = set() if cls is ClientConfig else {
        f.name for f in dataclasses.fields(ClientConfig)}
    return [f for f in dataclasses.fields(cls) if f.name not in inherited]


def _row(spec: dataclasses.Field[Any]) -> str:
    meta = spec.metadata
    cells = [f"`{meta['key']}`", f"`{spec.name}`", f"`{spec.type}`", _default(spec),
             meta["doc"]]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _default(spec: dataclasses.Field[Any]) -> str:
    if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
        return "required"
    value = spec.default if spec.default is not dataclasses.MISSING else spec.default_factory()
    if isinstance(value, Callable):  # type: ignore[arg-type]
        return f"`{getattr(value, '__name__', repr(value))}`"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 10_000:
        return f"`{value:_}`"
    return f"`{value!r}`"


if __name__ == "__main__":
    print(settings_markdown(), end="")
