"""The Spark source's planning, without Spark running: options (what to read, offsets per
partition, what a batch read allows), how maxOffsetsPerTrigger
shares a micro-batch's offsets among partitions (in proportion to their lag, as Spark's Kafka
source does), Trigger.AvailableNow's end, and the source on pyspark 4.1's API."""

from __future__ import annotations

import subprocess
import sys

import pytest

from eosclient._core.types import TopicPartition
from eosclient.errors import ConfigError
from eosclient.spark._source import _capped, _held, _ranges
from eosclient.spark._source_options import Options as _Options
from eosclient.spark._source_options import resolve


def test_options_are_checked_and_named() -> None:
    parsed = _Options.parse({"bootstrap.servers": "h:1", "subscribe": "a, b",
                             "maxoffsetspertrigger": "10"})
    assert (parsed.subscription.topics, parsed.starting, parsed.max_offsets, parsed.timeout) == (
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
    _source.Options.parse({"bootstrap.servers": "h:1", "subscribe": "t",
                           "maxOffsetsPerTrigger": "10"}, read_limits=_source._ADMISSION)
except ConfigError as exc:
    assert exc.key == "maxOffsetsPerTrigger" and "4.2" in str(exc), exc
else:
    raise AssertionError("the cap was accepted")
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


BASE = {"bootstrap.servers": "h:1"}
TPS = [TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)]


def ends(tps: list[TopicPartition], which: str) -> dict[TopicPartition, int]:
    """A stand-in for the brokers: every partition begins at 5 and its LSO is 100."""
    return dict.fromkeys(tps, 5 if which == "earliest" else 100)


def test_starting_offsets_as_json_per_partition_with_earliest_and_latest_codes() -> None:
    parsed = _Options.parse({**BASE, "subscribe": "a,b",
                             "startingOffsets": '{"a": {"0": 23, "01": -2}, "b": {"0": -1}}'})
    assert parsed.starting == {"a": {"0": 23, "1": -2}, "b": {"0": -1}}
    assert resolve(parsed.starting, TPS, "startingOffsets", ends) == {
        "a": {"0": 23, "1": 5}, "b": {"0": 100}}
    assert resolve("latest", TPS, "startingOffsets", ends) == {"a": {"0": 100, "1": 100},
                                                               "b": {"0": 100}}


@pytest.mark.parametrize("spec", ['{"a": {"0": 23}}',                        # a-1, b-0 missing
                                  '{"a": {"0": 1, "1": 1, "2": 1}, "b": {"0": 1}}'])  # a-2 extra
def test_json_offsets_must_name_every_partition_read_as_spark_requires(spec: str) -> None:
    starting = _Options.parse({**BASE, "subscribe": "a,b", "startingOffsets": spec}).starting
    with pytest.raises(ConfigError, match="every partition") as raised:
        resolve(starting, TPS, "startingOffsets", ends)
    assert raised.value.key == "startingOffsets"


@pytest.mark.parametrize(("options", "mode", "key"), [
    ({"startingOffsets": '{"a": {"0": -3}}'}, "stream", "startingOffsets"),
    ({"startingOffsets": '{"a": {"x": 1}}'}, "stream", "startingOffsets"),
    ({"startingOffsets": '{"a": {"0": "1"}}'}, "stream", "startingOffsets"),
    ({"startingOffsets": '{"a": [0]}'}, "stream", "startingOffsets"),
    ({"startingOffsets": '{"a": {"0": 1}'}, "stream", "startingOffsets"),   # not JSON
    ({"startingOffsets": "[1]"}, "stream", "startingOffsets"),
    ({"endingOffsets": "latest"}, "stream", "endingOffsets"),      # a stream has no end
    ({"startingOffsets": "latest"}, "batch", "startingOffsets"),   # Spark: not for batch
    ({"startingOffsets": '{"a": {"0": -1}}'}, "batch", "startingOffsets"),
    ({"endingOffsets": "earliest"}, "batch", "endingOffsets"),
    ({"endingOffsets": '{"a": {"0": -2}}'}, "batch", "endingOffsets"),
    ({"endingOffsets": "soon"}, "batch", "endingOffsets"),
])
def test_offsets_options_are_checked_per_mode_and_named(
        options: dict[str, str], mode: str, key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _Options.parse({**BASE, "subscribe": "a", **options}, mode)  # type: ignore[arg-type]
    assert raised.value.key == key


def test_a_batch_read_defaults_to_earliest_through_latest_and_takes_json_ends() -> None:
    parsed = _Options.parse({**BASE, "subscribe": "a"}, "batch")
    assert (parsed.starting, parsed.ending) == ("earliest", "latest")
    parsed = _Options.parse({**BASE, "subscribe": "a", "startingOffsets": '{"a": {"0": -2}}',
                             "endingOffsets": '{"a": {"0": 7, "1": -1}}'}, "batch")
    assert (parsed.starting, parsed.ending) == ({"a": {"0": -2}}, {"a": {"0": 7, "1": -1}})


def test_assign_and_subscribe_pattern_choose_the_partitions() -> None:
    assign = _Options.parse({**BASE, "assign": '{"b": [1, 0], "a": [2]}'}).subscription
    assert assign.partitions(list, len) == [TopicPartition("a", 2), TopicPartition("b", 0),
                                            TopicPartition("b", 1)]
    pattern = _Options.parse({**BASE, "subscribePattern": "in-.*"}).subscription
    listed = ["in-1", "in-22", "xin-1", "in", "in-3x"]
    assert pattern.partitions(lambda: listed, lambda t: 2) == [
        TopicPartition(t, p) for t in ("in-1", "in-22", "in-3x") for p in (0, 1)]
    # Matched whole, as Java's Pattern.matches: "in-1" does not match "in".
    exact = _Options.parse({**BASE, "subscribePattern": "in"}).subscription
    assert exact.partitions(lambda: listed, lambda t: 1) == [TopicPartition("in", 0)]


@pytest.mark.parametrize(("options", "key"), [
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "assign"),
    ({"subscribe": "a", "subscribePattern": "a.*"}, "subscribePattern"),
    ({"assign": '{"a": [0]}', "subscribePattern": "a.*"}, "subscribePattern"),
    ({"assign": '{"a": 0}'}, "assign"),
    ({"assign": '{"a": []}'}, "assign"),
    ({"assign": '{"a": [-1]}'}, "assign"),
    ({"assign": "{}"}, "assign"),
    ({"assign": "a:0"}, "assign"),
    ({"subscribePattern": "in-(["}, "subscribePattern"),
    ({"subscribe": " , "}, "subscribe"),
])
def test_exactly_one_way_to_choose_partitions_well_formed(options: dict[str, str],
                                                          key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _Options.parse({**BASE, **options})
    assert raised.value.key == key


def test_a_json_start_past_the_lso_is_kept_not_moved_back() -> None:
    # A batch's end used to be the LSO even when the start was past it: the start was lost.
    assert _held({"t": {"0": 500}}, {"t": {"0": 100, "1": 3}}) == {"t": {"0": 500, "1": 3}}


def test_ranges_are_planned_where_there_are_offsets_to_read() -> None:
    options = _Options.parse({**BASE, "subscribe": "t", "timeoutSeconds": "5"})
    ranges = _ranges(options, {"t": {"0": 3, "1": 9}}, {"t": {"0": 8, "1": 9, "2": 4}})
    assert [(r.topic, r.partition, r.start, r.end, r.timeout) for r in ranges] == [  # type: ignore[attr-defined]
        ("t", 0, 3, 8, 5.0), ("t", 2, 0, 4, 5.0)]


class FakeBrokers:
    """The planner's broker questions answered by :func:`ends` (partitions a-0 and a-1)."""

    def __init__(self, options: _Options) -> None:
        self.closed = False

    def partitions(self) -> list[TopicPartition]:
        return TPS[:2]

    def offsets(self, spec: str | dict[str, dict[str, int]], key: str,
                partitions: list[TopicPartition]) -> dict[str, dict[str, int]]:
        return resolve(spec, partitions, key, ends)

    def close(self) -> None:
        self.closed = True


def test_a_batch_read_plans_its_ranges_and_refuses_an_end_before_the_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from eosclient.spark import _source  # noqa: PLC0415 - patched for this test only
    monkeypatch.setattr(_source, "_Brokers", FakeBrokers)
    source = _source.ReadCommittedKafkaSource(
        {**BASE, "subscribe": "a", "endingOffsets": '{"a": {"0": 50, "1": -1}}'})
    ranges = source.reader(None).partitions()
    assert [(r.partition, r.start, r.end) for r in ranges] == [  # type: ignore[attr-defined]
        (0, 5, 50), (1, 5, 100)]
    behind = _source.ReadCommittedKafkaSource(
        {**BASE, "subscribe": "a", "endingOffsets": '{"a": {"0": 3, "1": -1}}'})
    with pytest.raises(ConfigError, match="a-0 ends at 3 before it starts at 5") as raised:
        behind.reader(None).partitions()
    assert raised.value.key == "endingOffsets"
