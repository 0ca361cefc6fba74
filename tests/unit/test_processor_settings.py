"""The processors' settings are checked when one is built, before any connection (the sync
processor and its asyncio twin check them in one place, ProcessorSettings)."""

from __future__ import annotations

from typing import Any

import pytest

from eosclient import ExactlyOnceProcessor, cli
from eosclient.aio import AsyncExactlyOnceProcessor

Processor = ExactlyOnceProcessor | AsyncExactlyOnceProcessor


@pytest.fixture(params=[ExactlyOnceProcessor, AsyncExactlyOnceProcessor],
                ids=lambda c: c.__name__)
def kind(request: pytest.FixtureRequest) -> type[Processor]:
    return request.param  # type: ignore[no-any-return]


def build(kind: type[Processor], **overrides: Any) -> Processor:
    settings: dict[str, Any] = {"bootstrap_servers": "127.0.0.1:1", "input_topics": ["in"],
                                "output_topic": "out", "group_id": "g", "transactional_id": "t"}
    return kind(**{**settings, **overrides})


@pytest.mark.parametrize(("overrides", "message"), [
    ({"fn": lambda r: [], "batch_fn": lambda rs: []}, "fn or batch_fn"),
    ({"input_topics": []}, "input_topics"),
    ({"input_topics": "in"}, "input_topics"),
    ({"max_records_per_transaction": 0}, "max_records_per_transaction"),
    ({"commit_interval_ms": -1}, "commit_interval_ms"),
    ({"max_consecutive_aborts": 0}, "max_consecutive_aborts"),
])
def test_a_bad_setting_is_refused_naming_it(kind: type[Processor], overrides: dict[str, Any],
                                            message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build(kind, **overrides)


def test_defaults_build_without_connecting(kind: type[Processor]) -> None:
    processor = build(kind, max_consecutive_aborts=None)
    assert processor.stats.transactions_committed == 0
    assert processor.group_id == "g" and processor.output_topic == "out"


def test_shared_config_reaches_both_clients_and_the_per_client_ones_win(
        kind: type[Processor]) -> None:
    # Security settings had to be repeated in producer_config and consumer_config.
    processor = build(kind, config={"security.protocol": "SSL", "client.id": "shared"},
                      consumer_config={"client.id": "reader"})
    settings = processor._core.settings
    assert settings.producer_config == {"security.protocol": "SSL", "client.id": "shared"}
    assert settings.consumer_config["security.protocol"] == "SSL"
    assert settings.consumer_config["client.id"] == "reader"


def test_copy_reads_a_config_file_and_x_options_for_both_clients(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    made: dict[str, Any] = {}

    class Recording:
        def __init__(self, **kwargs: Any) -> None:
            made.update(kwargs)
            raise ValueError("stop here")

    monkeypatch.setattr(cli, "ExactlyOnceProcessor", Recording)
    settings = tmp_path / "client.properties"
    settings.write_text("# comment\n! also a comment\n\nsecurity.protocol = SASL_SSL\n"
                        "sasl.password=123456\nclient.id=from-file\n")
    code = cli.main(["copy", "--input", "a", "--output", "b", "--group", "g",
                     "--transactional-id", "t", "--bootstrap-servers", "127.0.0.1:1",
                     "--config-file", str(settings), "-X", "client.id=from-x",
                     "-X", "request.timeout.ms=5000"])
    assert code == 2  # the recording stopped it
    # a password of digits stays text; -X wins over the file
    assert made["config"] == {"security.protocol": "SASL_SSL", "sasl.password": "123456",
                              "client.id": "from-x", "request.timeout.ms": 5000}


def test_copy_says_when_the_config_file_cannot_be_read(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["copy", "--input", "a", "--output", "b", "--group", "g",
                     "--transactional-id", "t", "--bootstrap-servers", "127.0.0.1:1",
                     "--config-file", str(tmp_path / "missing.properties")]) == 2
    assert "cannot read --config-file" in capsys.readouterr().err
