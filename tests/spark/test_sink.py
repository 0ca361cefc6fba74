"""ExactlyOnceKafkaSink in real streaming queries, against real brokers, judged by the checker.

The crash tests kill a Spark driver for real: a child process runs the query and ``os._exit``s
inside the sink just before or just after its Kafka commit (``crash_job.py``); the query is then
restarted here, from the same checkpoint. Output is read back with eosclient's read_committed
consumer and compared by the checker (every count must be zero).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from crash_job import CRASH_EXIT
from jobs import spark_env, start_query, write_inputs
from pyspark import TaskContext, cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from eosclient.errors import ConfigError, EosError, RecordTypeError
from eosclient.spark import ExactlyOnceKafkaSink
from eosclient.spark._rows import layout_of
from eosclient.spark._task import PartitionJob, TaskResult
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import CheckReport, Seen, compare, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker]

Names = Callable[[str], str]
CRASH_JOB = Path(__file__).resolve().parent / "crash_job.py"
FILES, LINES = 3, 40
# The tasks' functions defined here must travel to the Python workers by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def check_output(broker: RunningBroker, topic: str, expected: list[str]) -> CheckReport:
    """Compare what read_committed readers see in ``topic`` with ``expected`` (by value).

    An expected ``"f<file>-<line>!"`` counts as offset <line> of input partition <file>: lines
    of one file must stay in order within an output partition.
    """
    inputs = [Seen(int(v[1:v.index("-")]), int(v[v.index("-") + 1:-1]), v) for v in expected]
    outputs = [Seen(r.partition, r.offset, (r.value or b"").decode())
               for r in read_topic(broker.bootstrap_servers, topic)]
    return compare(inputs, outputs, input_topic="expected", output_topic=topic)


def run_query(spark: SparkSession, input_dir: Path, checkpoint: Path,
              batch: Callable[[DataFrame, int], None]) -> None:
    query = start_query(spark, input_dir, checkpoint, batch)
    assert query.awaitTermination(120), "the query did not finish"
    assert query.exception() is None


@pytest.mark.parametrize("crash", ["after_commit", "before_commit"])
def test_a_driver_killed_around_the_commit_writes_each_batch_once(
        spark: SparkSession, broker: RunningBroker, unique_name: Names, tmp_path: Path,
        crash: str) -> None:
    topic = topics.create_topic(broker, unique_name("out"), 2)
    sink_id = unique_name("sink")
    expected = write_inputs(tmp_path / "in", FILES, LINES)
    checkpoint = tmp_path / "checkpoint"
    child = subprocess.run(
        [sys.executable, str(CRASH_JOB), "--bootstrap", broker.bootstrap_servers, "--topic",
         topic, "--sink-id", sink_id, "--input", str(tmp_path / "in"), "--checkpoint",
         str(checkpoint), "--crash-batch", "1", "--crash", crash],
        env={**os.environ, **spark_env()}, capture_output=True, text=True, timeout=150,
        check=False)
    assert child.returncode == CRASH_EXIT, child.stdout + child.stderr[-3000:]

    with ExactlyOnceKafkaSink(bootstrap_servers=broker.bootstrap_servers, topic=topic,
                              sink_id=sink_id) as sink:
        run_query(spark, tmp_path / "in", checkpoint, sink)
        replayed = sink.outcomes[0]
    # Spark replays batch 1: skipped if its commit happened, written again if not.
    assert replayed.batch_id == 1
    assert (replayed.written, replayed.skipped) == ((0, 1) if crash == "after_commit" else (1, 0))
    assert [o.batch_id for o in sink.outcomes] == [1, 2]
    report = check_output(broker, topic, expected)
    assert report.ok, str(report)


def _first_attempt() -> bool:
    context = TaskContext.get()
    return context is not None and context.attemptNumber() == 0


def _raise_midway(rows: Iterable[Any]) -> Iterator[Any]:
    """The rows, but a first attempt fails after five of them (upstream, mid-transaction)."""
    for i, row in enumerate(rows):
        if i == 5 and _first_attempt():
            raise RuntimeError("task killed mid-transaction")
        yield row


def _end_midway(rows: Iterable[Any]) -> Iterator[Any]:
    """The rows, but a first attempt's stop after five, silently: what a PySpark worker sees
    when the JVM side of its input fails (the stream just ends)."""
    for i, row in enumerate(rows):
        if i == 5 and _first_attempt():
            return
        yield row


class _FailingFirstAttempts(ExactlyOnceKafkaSink):
    """Each task's first attempt fails: after its commit, mid-transaction, or with its rows cut
    short (``failure``); a retry runs the sink's task as it is."""

    failure = "after_commit"

    def _task(self, layout: Any, batch_id: int, counts: dict[int, int],
              ) -> Callable[[int, Iterable[Any]], Iterator[TaskResult]]:
        task, failure = super()._task(layout, batch_id, counts), self.failure

        def first_attempt_fails(index: int, rows: Iterable[Any]) -> Iterator[TaskResult]:
            if failure == "mid_transaction":
                return task(index, _raise_midway(rows))
            if failure == "truncated":
                return task(index, _end_midway(rows))
            if failure != "after_commit":
                return task(index, rows)
            results = list(task(index, rows))  # the transaction committed
            if _first_attempt():
                raise RuntimeError("task killed after its commit")
            return iter(results)

        return first_attempt_fails


def _fail_upstream_first(rows: Iterable[Any]) -> Iterator[Any]:
    yield from _raise_midway(rows)


@pytest.mark.parametrize("failure", ["after_commit", "mid_transaction", "truncated",
                                     "upstream"])
def test_partitioned_retried_tasks_write_once(  # noqa: PLR0917 - fixtures
        spark: SparkSession, broker: RunningBroker, unique_name: Names, tmp_path: Path,
        failure: str, request: pytest.FixtureRequest) -> None:
    if broker.kind == "tansu" and not request.config.getoption("--long"):
        # A Tansu bug these tasks race into (docs/spark.md, "Tansu and concurrent tasks"): when
        # one task's EndTxn completes another's while that one is still writing its commit
        # markers, the markers written after leave a produce range on the completed
        # transaction, and every later transaction on that partition keeps its offsets
        # pending for good. The next batch's ledger entries never show, its tasks time out,
        # and the query does not finish (CI, on a loaded machine: the after_commit and
        # truncated variants). The long run keeps them.
        pytest.skip("Tansu strands offsets after concurrent commits (docs/spark.md)")
    topic = topics.create_topic(broker, unique_name("out"), 3)
    expected = write_inputs(tmp_path / "in", 2, LINES)
    sink = _FailingFirstAttempts(bootstrap_servers=broker.bootstrap_servers, topic=topic,
                                 mode="partitioned", sink_id=unique_name("sink"), chunk_size=2)
    sink.failure = failure

    def batch(df: DataFrame, batch_id: int) -> None:
        df = df.repartition(2, "key")
        if failure == "upstream":  # fails while the sink caches the batch, before any task
            df = df.rdd.mapPartitions(_fail_upstream_first).toDF(df.schema)
        sink(df, batch_id)

    with sink:
        run_query(spark, tmp_path / "in", tmp_path / "checkpoint", batch)
    # Every task committed once: a retry after the commit found it in the ledger (so the
    # retry's result says skipped); after any other failure the retry wrote the partition.
    assert [(o.written, o.skipped) for o in sink.outcomes] == (
        [(0, 2)] * 2 if failure == "after_commit" else [(2, 0)] * 2)
    report = check_output(broker, topic, expected)
    totals = report.totals  # no order to check: repartition() shuffles the lines of a file
    assert (totals.lost, totals.duplicated, totals.unexpected) == (0, 0, 0), str(report)


def test_rows_with_topic_partition_and_headers(spark: SparkSession, broker: RunningBroker,
                                               unique_name: Names) -> None:
    first, second = (topics.create_topic(broker, unique_name("out"), 2) for _ in range(2))
    df = spark.createDataFrame(
        [(first, 1, b"k1", "v1", [("h", b"x")]), (second, 0, None, "v2", None),
         (second, None, b"k3", None, [])],
        "topic string, partition int, key binary, value string, "
        "headers array<struct<key: string, value: binary>>")
    with ExactlyOnceKafkaSink(bootstrap_servers=broker.bootstrap_servers, ledger_topic=first,
                              sink_id=unique_name("sink")) as sink:
        sink(df, 0)
    [one] = read_topic(broker.bootstrap_servers, first)
    assert (one.partition, one.key, one.value, list(one.headers)) == (1, b"k1", b"v1",
                                                                      [("h", b"x")])
    two = sorted(read_topic(broker.bootstrap_servers, second), key=lambda r: r.key or b"")
    assert [(r.key, r.value) for r in two] == [(None, b"v2"), (b"k3", None)]
    assert two[0].partition == 0


def test_a_bad_schema_fails_before_any_transaction(spark: SparkSession,
                                                  noida_broker: RunningBroker,
                                                  unique_name: Names) -> None:
    topic = topics.create_topic(noida_broker, unique_name("out"), 1)
    sink = ExactlyOnceKafkaSink(bootstrap_servers=noida_broker.bootstrap_servers, topic=topic,
                                sink_id=unique_name("sink"))
    with sink, pytest.raises(RecordTypeError, match="'key' must be string or binary"):
        sink(spark.createDataFrame([(1, "v")], "key int, value string"), 0)
    assert sink.outcomes == [] and sink._producer is None  # nothing was started


def test_a_null_topic_fails_the_batch_and_leaves_nothing(spark: SparkSession,
                                                         noida_broker: RunningBroker,
                                                         unique_name: Names) -> None:
    topic = topics.create_topic(noida_broker, unique_name("out"), 1)
    df = spark.createDataFrame([(topic, "a"), (None, "b")], "topic string, value string")
    with ExactlyOnceKafkaSink(bootstrap_servers=noida_broker.bootstrap_servers,
                              ledger_topic=topic, sink_id=unique_name("sink"),
                              chunk_size=1) as sink:
        with pytest.raises(RecordTypeError, match="null topic"):
            sink(df, 0)
        assert read_topic(noida_broker.bootstrap_servers, topic) == []  # "a" was aborted
        sink(df.where("topic is not null"), 0)  # the batch again, fixed: written
    assert [r.value for r in read_topic(noida_broker.bootstrap_servers, topic)] == [b"a"]


def test_a_reused_sink_id_with_a_new_checkpoint_is_refused(spark: SparkSession,
                                                           noida_broker: RunningBroker,
                                                           unique_name: Names) -> None:
    topic = topics.create_topic(noida_broker, unique_name("out"), 1)
    sink_id = unique_name("sink")
    df = spark.createDataFrame([("a",)], "value string")
    with ExactlyOnceKafkaSink(bootstrap_servers=noida_broker.bootstrap_servers, topic=topic,
                              sink_id=sink_id) as sink:
        sink(df, 5)
    with ExactlyOnceKafkaSink(bootstrap_servers=noida_broker.bootstrap_servers, topic=topic,
                              sink_id=sink_id) as again, pytest.raises(ConfigError) as caught:
        again(df, 0)  # batch ids start over: a new checkpoint
    assert caught.value.key == "sink_id"
    assert len(read_topic(noida_broker.bootstrap_servers, topic)) == 1


def test_a_zombie_task_cannot_commit_after_its_retry(broker: RunningBroker,
                                                     unique_name: Names) -> None:
    topic = topics.create_topic(broker, unique_name("out"), 1)
    sink = ExactlyOnceKafkaSink(bootstrap_servers=broker.bootstrap_servers, topic=topic,
                                mode="partitioned", sink_id=unique_name("sink"), chunk_size=1)
    layout = layout_of(StructType([StructField("value", StringType())]), topic)
    job = PartitionJob(sink._spec, layout, 0, {0: 4})
    rows = [("a",), ("b",), ("c",), ("d",)]
    retry: list[TaskResult] = []

    def zombie_rows() -> Iterator[tuple[str]]:
        yield from rows[:2]
        # The zombie's requests reach the broker before the retry begins. Tansu takes a fenced
        # epoch's AddPartitionsToTxn; one that lands after the retry's InitProducerId leaves a
        # transaction open on the partition, and Tansu shows the retry's offsets only once it
        # ends: on this one thread, never (once in CI: "the group does not show the offsets a
        # committed transaction wrote", then the retry failed). Apart, the zombie ends.
        time.sleep(0.5)
        retry.extend(job(0, iter(rows)))  # the retry fences this attempt and commits
        yield from rows[2:]

    with pytest.raises(EosError):
        list(job(0, zombie_rows()))
    assert retry == [TaskResult(0, 4)]
    assert [r.value for r in read_topic(broker.bootstrap_servers, topic)] == [b"a", b"b", b"c",
                                                                             b"d"]
