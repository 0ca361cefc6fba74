"""stats(): the request-latency recorder, the snapshot's plain form, and the stats_cb settings."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from eosclient import ClientStats, ConfigError, ConsumerConfig, ProducerConfig, RequestStats
from eosclient._net.latency import Latencies
from eosclient.errors import ApiKey


def test_latencies_are_kept_per_api_with_failures_and_the_slowest() -> None:
    clock = [10.0]
    latencies = Latencies(lambda: clock[0])
    answered: list[object] = []
    done = latencies.timed(ApiKey.PRODUCE, 10.0, answered.append)
    clock[0] = 10.25
    answer = SimpleNamespace(error=None)
    done(answer)
    assert answered == [answer]  # the caller's on_done still runs, with the same answer
    latencies.observe(ApiKey.PRODUCE, 0.75, True)
    latencies.observe(ApiKey.END_TXN, 0.5, False)
    latencies.observe(999, 0.1, False)  # an API this client does not name
    snapshot = latencies.snapshot()
    assert snapshot["Produce"] == RequestStats(count=2, errors=1, total_seconds=1.0,
                                               max_seconds=0.75)
    assert snapshot["Produce"].mean_seconds == 0.5
    assert snapshot["EndTxn"].count == 1 and snapshot["api-999"].count == 1


def test_a_snapshot_is_plain_data() -> None:
    stats = ClientStats("producer", "p1", records=3, requests={"Produce": RequestStats(
        count=2, errors=0, total_seconds=0.5, max_seconds=0.3)})
    plain = stats.as_dict()
    assert plain["records"] == 3 and plain["client_id"] == "p1"
    assert plain["requests"]["Produce"]["mean_seconds"] == 0.25
    json.dumps(plain)  # forwardable as it is
    assert RequestStats().mean_seconds == 0.0


@pytest.mark.parametrize("cls", [ProducerConfig, ConsumerConfig])
def test_stats_cb_and_its_interval_go_together(cls: type[ProducerConfig | ConsumerConfig],
                                              ) -> None:
    servers = {"bootstrap.servers": "h:1"}
    cfg = cls.from_kafka({**servers, "statistics.interval.ms": 500, "stats_cb": print})
    assert cfg.statistics_interval_ms == 500 and cfg.stats_cb is print
    with pytest.raises(ConfigError) as caught:
        cls.from_kafka({**servers, "stats_cb": print})  # would never be called
    assert caught.value.key == "stats_cb"
    with pytest.raises(ConfigError) as caught:
        cls.from_kafka({**servers, "statistics.interval.ms": 500})
    assert caught.value.key == "statistics.interval.ms"
