"""Every ``eosclient`` subcommand that talks to a cluster takes its brokers and settings the same
way (docs/cli.md's Conventions): ``-b/--bootstrap-servers`` or ``$EOSCLIENT_BOOTSTRAP_SERVERS``,
``-X KEY=VALUE`` and ``--config-file``. The test walks the parser, so a new subcommand is
checked without being named here (its minimal arguments excepted)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from eosclient._cli.common import BOOTSTRAP_ENV, client_settings, resolve_bootstrap
from eosclient.cli import build_parser

# The arguments each subcommand needs besides the connection's, to parse at all.
_REQUIRED: dict[str, list[str]] = {
    "topics create": ["t"], "topics list": [], "topics describe": ["t"],
    "topics delete": ["t"], "produce": ["-t", "t"], "consume": ["-t", "t"],
    "groups list": [], "groups describe": ["g"], "txn list": [], "txn describe": ["id"],
    "txn hanging": [], "txn abort": ["--transactional-id", "id"],
    "verify": ["--input", "a", "--output", "b"],
    "copy": ["--input", "a", "--output", "b", "--group", "g", "--transactional-id", "t"],
}
# These start a broker of their own: they take no cluster's address.
_OWN_BROKER = {"broker", "demo"}


def _leaves(parser: argparse.ArgumentParser, prefix: str = "",
            ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix.strip(), parser
        return
    for name, sub in subs[0].choices.items():
        yield from _leaves(sub, f"{prefix} {name}")


_COMMANDS = dict(_leaves(build_parser()))


def test_every_subcommand_is_walked() -> None:
    # A subcommand added without an entry here would go unchecked.
    assert set(_COMMANDS) == set(_REQUIRED) | _OWN_BROKER


def _parse(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    resolve_bootstrap(args)
    return args


@pytest.mark.parametrize("command", sorted(_REQUIRED))
def test_brokers_from_b_or_the_environment(command: str, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    # copy and verify demanded --bootstrap-servers even with the variable set, and took no -b.
    argv = [*command.split(), *_REQUIRED[command]]
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    assert _parse([*argv, "-b", "h:1"]).bootstrap_servers == "h:1"
    assert _parse([*argv, "--bootstrap-servers", "h:2"]).bootstrap_servers == "h:2"
    with pytest.raises(SystemExit) as exit_:
        _parse(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "-b/--bootstrap-servers" in err and BOOTSTRAP_ENV in err, err
    monkeypatch.setenv(BOOTSTRAP_ENV, "env:9")
    assert _parse(argv).bootstrap_servers == "env:9"
    assert _parse([*argv, "-b", "h:1"]).bootstrap_servers == "h:1"  # -b wins


@pytest.mark.parametrize("command", sorted(_REQUIRED))
def test_the_usage_line_shows_b_as_optional(command: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # With the variable unset, the usage line showed -b as required though the variable
    # would do; it now reads the same either way.
    for value in (None, "env:9"):
        if value is None:
            monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
        else:
            monkeypatch.setenv(BOOTSTRAP_ENV, value)
        (parser,) = [p for name, p in _leaves(build_parser()) if name == command]
        usage = " ".join(parser.format_usage().split())
        assert "[-b HOST:PORT[,...]]" in usage, usage


@pytest.mark.parametrize("command", sorted(_REQUIRED))
def test_settings_from_x_and_a_config_file(command: str, tmp_path: Path) -> None:
    # verify took neither -X nor --config-file: it could not check a secured cluster.
    config = tmp_path / "client.properties"
    config.write_text("# a comment\nsecurity.protocol=SSL\nclient.id=from-file\n")
    argv = [*command.split(), *_REQUIRED[command], "-b", "h:1", "--config-file", str(config),
            "-X", "client.id=from-x", "-X", "retries=3"]
    settings = client_settings(_parse(argv))
    assert settings == {"bootstrap.servers": "h:1", "security.protocol": "SSL",
                        "client.id": "from-x", "retries": 3}
