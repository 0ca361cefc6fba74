"""The Spark source's planning, without Spark running: options, and how maxOffsetsPerTrigger
shares a micro-batch's offsets among partitions."""

from __future__ import annotations

import pytest

from eosclient.errors import ConfigError
from eosclient.spark._source import _capped, _Options


def test_options_are_checked_and_named() -> None:
    parsed = _Options.parse({"bootstrap.servers": "h:1", "subscribe": "a, b",
                             "maxoffsetspertrigger": "10"})
    assert (parsed.topics, parsed.starting, parsed.max_offsets, parsed.timeout) == (
        ("a", "b"), "earliest", 10, 60.0)
    for options, key in (({"subscribe": "a"}, "bootstrap.servers"),
                         ({"bootstrap.servers": "h:1"}, "subscribe"),
                         ({"bootstrap.servers": "h:1", "subscribe": "a",
                           "startingOffsets": "soon"}, "startingOffsets"),
                         ({"bootstrap.servers": "h:1", "subscribe": "a",
                           "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
                         ({"bootstrap.servers": "h:1", "subscribe": "a",
                           "timeoutSeconds": "x"}, "timeoutSeconds")):
        with pytest.raises(ConfigError) as raised:
            _Options.parse(options)
        assert raised.value.key == key


def test_the_budget_is_shared_and_never_passes_the_latest_offsets() -> None:
    start = {"t": {"0": 10, "1": 0}}
    latest = {"t": {"0": 12, "1": 100}, "u": {"0": 5}}
    capped = _capped(start, latest, 20)
    assert capped["t"]["0"] == 12  # only 2 to read there: the rest goes to the others
    assert sum(capped["t"][p] - start["t"][p] for p in ("0", "1")) + capped["u"]["0"] == 20
    assert _capped(start, latest, 10_000) == latest
    assert _capped(start, latest, 1) != start  # progress even with a tiny budget


def test_a_partition_new_since_the_start_is_read_from_its_beginning_within_the_budget() -> None:
    assert _capped({"t": {"0": 3}}, {"t": {"0": 3, "1": 7}}, 100) == {"t": {"0": 3, "1": 7}}
    assert _capped({"t": {"0": 3}}, {"t": {"0": 3, "1": 7}}, 4) == {"t": {"0": 3, "1": 4}}
