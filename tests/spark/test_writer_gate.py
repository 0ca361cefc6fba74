"""Each batch of the data source writer becomes readable at once, on both brokers.

A streaming query writes three batches (three tasks each, three transactions on the one output
partition) while a read_committed reader polls the topic. Batch 1's commit dies after its first
EndTxn (``testing.crashAt``, mid_commit: the process running it exits), which leaves one task's
transaction committed and two open until Spark's ``abort`` (a new process) rolls the decided
batch forward; the query is restarted and finishes. The reader must never see a batch in part.
With the gate switched off (``testing.gate=off``, a test hook) the same run must show a batch
in part: the check can fail.
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
    topic = topics.create_topic(broker, unique_name("out"), 1)
    sink_id = unique_name("sink")
    expected = write_inputs(tmp_path / "in", FILES, LINES)
    in_order(tmp_path / "in")
    servers, checkpoint = broker.bootstrap_servers, tmp_path / "checkpoint"
    options = {"testing.gate": gate}
    poller = Poller(servers, topic)
    poller.start()
    try:
        failed = start_writer_query(spark, tmp_path / "in", checkpoint, servers=servers,
                                    topic=topic, sink_id=sink_id, tasks=3,
                                    options={**options, "testing.crashAt": "mid_commit:1"})
        with pytest.raises(Exception, match="Python worker exited unexpectedly"):
            failed.awaitTermination(120)
        again = start_writer_query(spark, tmp_path / "in", checkpoint, servers=servers,
                                   topic=topic, sink_id=sink_id, tasks=3, options=options)
        assert again.awaitTermination(120), "the restarted query did not finish"
        assert again.exception() is None
        visible(servers, topic, len(expected))
    finally:
        poller.stop.set()
        poller.join(30)
    totals = check_output(broker, topic, expected).totals  # no order: repartition() shuffles
    assert (totals.lost, totals.duplicated, totals.unexpected) == (0, 0, 0), str(totals)
    assert poller.views and poller.views[-1] == dict.fromkeys(range(FILES), LINES)
    partial = poller.partial_views()
    if gate == "on":
        assert partial == []
    else:  # batch 1 in part, between the dead commit's first EndTxn and Spark's abort
        assert any(0 < v.get(1, 0) < LINES for v in partial), poller.views
