"""ExactlyOnceProcessor's settings are checked when it is built, before any connection."""

from __future__ import annotations

from typing import Any

import pytest

from eosclient import ExactlyOnceProcessor


def build(**overrides: Any) -> ExactlyOnceProcessor:
    settings: dict[str, Any] = {"bootstrap_servers": "127.0.0.1:1", "input_topics": ["in"],
                                "output_topic": "out", "group_id": "g", "transactional_id": "t"}
    return ExactlyOnceProcessor(**{**settings, **overrides})


@pytest.mark.parametrize(("overrides", "message"), [
    ({"fn": lambda r: [], "batch_fn": lambda rs: []}, "fn or batch_fn"),
    ({"input_topics": []}, "input_topics"),
    ({"input_topics": "in"}, "input_topics"),
    ({"max_records_per_transaction": 0}, "max_records_per_transaction"),
    ({"commit_interval_ms": -1}, "commit_interval_ms"),
    ({"max_consecutive_aborts": 0}, "max_consecutive_aborts"),
])
def test_a_bad_setting_is_refused_naming_it(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build(**overrides)


def test_defaults_build_without_connecting() -> None:
    processor = build(max_consecutive_aborts=None)
    assert processor.stats.transactions_committed == 0
    assert processor.group_id == "g" and processor.output_topic == "out"
