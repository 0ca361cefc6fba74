"""Each batch of the data source writer becomes readable at once, on both brokers.

A streaming query writes three batches while a read_committed reader polls the topic. Each batch
has three tasks: task 0 writes to partition 0, tasks 1 and 2 to partition 1. Batch 1's commit
pauses for two seconds after its first EndTxn (``testing.crashAt``, ``mid_commit:1:pause=2``),
with task 0's transaction committed and the others still open.

The reader must never see a batch in part on a partition, nor across partitions in two polls
running: the gate's release is one EndTxn, whose markers land a partition at a time, so one poll
can fall in those milliseconds (seen on both brokers, rarely). With the gate switched off
(``gate=off``, a test hook) the same run must show batch 1 in part (task 0's partition
without the others) for the whole pause: the check can fail.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from jobs import start_writer_query, write_inputs
from pyspark.sql import SparkSession
from test_sink import check_output
from test_writer_crash_points import LINES, in_order, visible
from test_writer_kills import FILES, Poller

from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker

pytestmark = [pytest.mark.spark, pytest.mark.broker]

Names = Callable[[str], str]


@pytest.mark.parametrize("gate", ["on", "off"])
def test_a_reader_polling_during_the_run_sees_each_batch_all_at_once(
        spark: SparkSession, broker: RunningBroker, unique_name: Names, tmp_path: Path,
        gate: str) -> None:
    topic = topics.create_topic(broker, unique_name("out"), 2)
    expected = write_inputs(tmp_path / "in", FILES, LINES)
    in_order(tmp_path / "in")
    servers = broker.bootstrap_servers
    poller = Poller(servers, topic)
    poller.start()
    try:
        query = start_writer_query(
            spark, tmp_path / "in", tmp_path / "checkpoint", servers=servers, topic=topic,
            sink_id=unique_name("sink"), tasks=3, partitions=2,
            options={"gate": gate, "testing.crashAt": "mid_commit:1:pause=2"})
        assert query.awaitTermination(120), "the query did not finish"
        assert query.exception() is None
        visible(servers, topic, len(expected))
    finally:
        poller.stop.set()
        poller.join(30)
    totals = check_output(broker, topic, expected).totals  # no order: repartition() shuffles
    assert (totals.lost, totals.duplicated, totals.unexpected) == (0, 0, 0), str(totals)
    assert poller.views and poller.views[-1] == dict.fromkeys(range(FILES), LINES)
    on_a_partition, running = poller.partial_on_a_partition(), poller.partial_twice_running()
    print(f"{len(poller.views)} polls; in part: {len(poller.partial_views())} across "
          f"partitions, {running} of them running, {len(on_a_partition)} on a partition")
    if gate == "on":
        assert on_a_partition == [] and running == 0, poller.views
    else:  # batch 1 in part, during the pause between its first EndTxn and the others
        assert running and any(0 < v.get(1, 0) < LINES for v in poller.views), poller.views
