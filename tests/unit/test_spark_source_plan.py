"""The Spark source's planning, without Spark running: options, how maxOffsetsPerTrigger
shares a micro-batch's offsets among partitions (in proportion to their lag, as Spark's Kafka
source does), Trigger.AvailableNow's end, and the source on pyspark 4.1's API."""

from __future__ import annotations

import subprocess
import sys

import pytest

from eosclient.errors import ConfigError
from eosclient.spark._source import _capped, _held, _Options


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
    # Lags 2, 100 and 5 of 107: shares 0.37, 18.7 and 0.93, rounded down (0, 18, 0), and the
    # two offsets left go to the largest remainders (u-0, then t-1).
    assert capped == {"t": {"0": 10, "1": 19}, "u": {"0": 1}}
    assert _capped(start, latest, 10_000) == latest
    assert _capped(start, latest, 1) != start  # progress even with a tiny budget


def test_a_partition_new_since_the_start_is_read_from_its_beginning_within_the_budget() -> None:
    assert _capped({"t": {"0": 3}}, {"t": {"0": 3, "1": 7}}, 100) == {"t": {"0": 3, "1": 7}}
    assert _capped({"t": {"0": 3}}, {"t": {"0": 3, "1": 7}}, 4) == {"t": {"0": 3, "1": 4}}


def test_a_cap_is_shared_in_proportion_to_each_partitions_lag() -> None:
    start = {"t": {"0": 0, "1": 100, "2": 5}}
    latest = {"t": {"0": 300, "1": 200, "2": 5}}      # lags 300, 100, 0
    assert _capped(start, latest, 40) == {"t": {"0": 30, "1": 110, "2": 5}}


def test_a_cap_takes_exactly_its_budget_the_remainders_going_to_the_largest() -> None:
    start = {"t": {"0": 0, "1": 0, "2": 0}}
    latest = {"t": {"0": 10, "1": 10, "2": 10}}
    end = _capped(start, latest, 10)
    assert sum(end["t"].values()) == 10 and all(3 <= v <= 4 for v in end["t"].values())


def test_a_cap_above_the_lag_reads_to_the_latest() -> None:
    start, latest = {"t": {"0": 5}}, {"t": {"0": 9}}
    assert _capped(start, latest, 50) == latest


def test_a_partition_unknown_at_start_is_capped_from_its_beginning() -> None:
    assert _capped({"t": {"0": 10}}, {"t": {"0": 10, "1": 8}}, 4) == {"t": {"0": 10, "1": 4}}


def test_an_available_now_run_never_passes_its_target_nor_goes_back() -> None:
    target = {"t": {"0": 50, "1": 20}}
    assert _held({"t": {"0": 10, "1": 20}}, target) == target
    # A partition the start knows and the target lacks keeps its offset (it is not reread).
    assert _held({"t": {"0": 60, "1": 20, "2": 7}}, target) == {"t": {"0": 60, "1": 20, "2": 7}}


@pytest.mark.parametrize("value", ["0", "-5", "ten", "1.5"])
def test_max_offsets_per_trigger_must_be_a_positive_integer(value: str) -> None:
    with pytest.raises(ConfigError, match="positive") as caught:
        _Options.parse({"bootstrap.servers": "h:1", "subscribe": "t",
                        "maxOffsetsPerTrigger": value})
    assert caught.value.key == "maxOffsetsPerTrigger"


def test_on_a_pyspark_without_read_limits_the_source_imports_and_refuses_the_cap() -> None:
    # pyspark 4.1 has no pyspark.sql.streaming.datasource: importing the source used to fail.
    code = """
import sys
import pyspark.sql.datasource                                # (4.3's imports the module)
sys.modules["pyspark.sql.streaming.datasource"] = None      # what 4.1 lacks
from eosclient.errors import ConfigError
from eosclient.spark import _source
assert not _source._ADMISSION
reader = _source.ReadCommittedKafkaSource({"bootstrap.servers": "h:1", "subscribe": "t"})
assert type(reader.streamReader(None)) is _source._StreamReader
try:
    _source._Options.parse({"bootstrap.servers": "h:1", "subscribe": "t",
                            "maxOffsetsPerTrigger": "10"})
except ConfigError as exc:
    assert exc.key == "maxOffsetsPerTrigger" and "4.2" in str(exc), exc
else:
    raise AssertionError("the cap was accepted")
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
