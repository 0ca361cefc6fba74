"""The Spark sink benchmark: eosclient's exactly-once sink beside an at-least-once one, one run.

Run: ``.venv/bin/python benchmarks/spark_sink.py [--quick] [--repeat 3] [--json out.json]
[--master spark://host:port | --standalone]``.

Method
------
One Spark session (shuffles of 2 partitions) and one noida-db broker, both started here. The
session is local (``local[2]``) by default; ``--master spark://...`` runs it on a standalone
cluster (executors of one core each, this interpreter as their Python: it must be installed at
this path on every host), and ``--standalone`` starts one here for the run
(:mod:`eosclient.testing.spark_cluster`: a master and two workers of one core each on
loopback): the executors are other JVMs, and partitioned mode's and the data source writer's
tasks run in their Python workers. The input is ``--batches`` text files of ``--rows`` lines
each, a key of about 8 bytes and a value of 100; a streaming query reads them one file per
micro-batch (``maxFilesPerTrigger=1``, ``trigger(availableNow=True)``), repartitions each batch
to 4 partitions and hands it to the sink under test through ``foreachBatch``. Rows/s = rows
written / seconds from ``start()`` to the end of the query (Spark's own work per batch is in
both).

The sinks, each on a fresh topic of 4 partitions and a fresh checkpoint:

* ``eos atomic``: ``ExactlyOnceKafkaSink`` (default mode): one transaction per batch, rows
  streamed to the driver with ``toLocalIterator``.
* ``ck driver``: the at-least-once peer of that: confluent-kafka ``produce()`` of every row of
  ``toLocalIterator`` on the driver (``poll(0)`` every 1,000), ``flush()`` at the end of the
  batch; what a user writes when the Spark Kafka connector is not there.
* ``eos partitioned``: ``ExactlyOnceKafkaSink(mode="partitioned")``: one transaction per Spark
  partition, written by the executors.
* ``ck partitioned``: ``foreachPartition`` with a confluent-kafka producer per task, the same
  ``produce``/``flush``.
* ``eos datasource``: ``writeStream.format("eosclient-kafka")`` (the data source writer): each
  task writes its partition in a transaction from its executor, the driver commits the batch as
  one decision; no ``foreachBatch``, one Spark job per batch. Compared with ``ck partitioned``.

Every producer uses ``linger.ms`` 5, acks=all and no compression. After each run the topic is
read back batch header by batch header: exactly the rows written, transactional for eosclient
(no abort marker), plain for confluent-kafka; a run that does not check out is reported as
failed. Every variant runs once first, unmeasured (the data source writer's first batch starts
Spark's Python planner workers and imports pyarrow there: ~10 s of first use). Runs are then
interleaved over ``--repeat``; the median is the headline.

Caveats: two cores shared by the Spark JVM, its Python workers, the broker and the driver; the
ratio within one run is what to compare. The at-least-once sinks promise less: a replayed batch
is written twice by them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import _harness as harness
import _report as report
import confluent_kafka
from pyspark.sql import SparkSession

from eosclient.spark import ExactlyOnceKafkaDataSource, ExactlyOnceKafkaSink
from eosclient.testing.brokers import RunningBroker, start_broker
from eosclient.testing.spark_cluster import start_spark_cluster
from eosclient.testing.topics import create_topic

PARTITIONS = 4
SCENARIO = "throughput"
Sink = Callable[[Any, int], None]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=50_000, help="rows per micro-batch")
    parser.add_argument("--batches", type=int, default=4, help="micro-batches per run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 repeat, small")
    parser.add_argument("--json", help="write every number here")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--master", default="local[2]",
                       help="local[N] (default local[2]) or a standalone spark://host:port")
    where.add_argument("--standalone", action="store_true",
                       help="start a standalone master and two one-core workers for the run")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.batches, args.repeat = 10_000, 2, 1
    return args


def write_input(directory: Path, batches: int, rows: int) -> None:
    directory.mkdir(parents=True)
    for b in range(batches):
        lines = (f"k{b}-{i % 1000:03d}\t{b:02d}-{i:09d}-" + "v" * 86 for i in range(rows))
        (directory / f"batch-{b:04d}.txt").write_text("\n".join(lines) + "\n")


def session(master: str) -> Any:
    os.environ.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                      SPARK_LOCAL_IP="127.0.0.1")
    builder = SparkSession.builder.master(master).appName("eosclient-spark-benchmark")
    if master.startswith("spark://"):  # one core per executor: two workers, two executors
        builder = builder.config("spark.executor.cores", "1").config("spark.executor.memory",
                                                                     "768m")
    spark = (builder.config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# --- the sinks ----------------------------------------------------------------------------------

def eos_sink(broker: RunningBroker, topic: str, mode: str, name: str) -> Sink:
    return ExactlyOnceKafkaSink(bootstrap_servers=broker.bootstrap_servers, topic=topic,
                                sink_id=name, mode=mode,  # type: ignore[arg-type]
                                producer_config={"linger.ms": 5})


def _ck_producer(bootstrap: str) -> Any:
    return confluent_kafka.Producer(  # the module: workers import it, the class won't pickle
       {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                     "enable.idempotence": False})


def _ck_write(producer: Any, topic: str, rows: Iterable[Any]) -> None:
    produce, poll = producer.produce, producer.poll
    for i, row in enumerate(rows):
        while True:
            try:
                produce(topic, value=row[0], key=row[1])
                break
            except BufferError:  # the local queue is full: let librdkafka send
                poll(0.05)
        if i % 1000 == 0:
            poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("confluent-kafka: records not delivered in 60 s")  # on executors too


def ck_driver_sink(broker: RunningBroker, topic: str) -> Sink:
    producer = _ck_producer(broker.bootstrap_servers)

    def sink(df: Any, batch_id: int) -> None:
        _ck_write(producer, topic, df.select("value", "key").toLocalIterator(True))

    return sink


def _ck_partition(bootstrap: str, topic: str) -> Callable[[Iterable[Any]], None]:
    def task(rows: Iterable[Any]) -> None:
        _ck_write(_ck_producer(bootstrap), topic, rows)

    return task


def ck_partitioned_sink(broker: RunningBroker, topic: str) -> Sink:
    def sink(df: Any, batch_id: int) -> None:
        df.select("value", "key").foreachPartition(_ck_partition(broker.bootstrap_servers, topic))

    return sink


# --- one run ------------------------------------------------------------------------------------

def run_once(spark: Any, broker: RunningBroker, variant: str, *, work: Path,
             args: argparse.Namespace) -> float:
    """Rows/s of one sink over the whole input (checked afterwards)."""
    name = f"bench-{variant.replace(' ', '-')}-{time.time_ns()}"
    topic = create_topic(broker, name, PARTITIONS)
    sinks: dict[str, Callable[[], Sink | None]] = {
        "eos atomic": lambda: eos_sink(broker, topic, "atomic", name),
        "ck driver": lambda: ck_driver_sink(broker, topic),
        "eos partitioned": lambda: eos_sink(broker, topic, "partitioned", name),
        "ck partitioned": lambda: ck_partitioned_sink(broker, topic),
        "eos datasource": lambda: None,
    }
    sink = sinks[variant]()

    def batch(df: Any, batch_id: int) -> None:
        assert sink is not None
        sink(df.repartition(PARTITIONS), batch_id)

    lines = (spark.readStream.format("text").option("maxFilesPerTrigger", 1)
             .load(str(work / "input")))
    rows = lines.selectExpr("split(value, '\t')[0] as key", "split(value, '\t')[1] as value")
    started = time.monotonic()
    if variant == "eos datasource":
        spark.dataSource.register(ExactlyOnceKafkaDataSource)
        writer = (rows.repartition(PARTITIONS).writeStream.format("eosclient-kafka")
                  .option("bootstrap.servers", broker.bootstrap_servers).option("topic", topic)
                  .option("sinkId", name).option("kafka.linger.ms", "5"))
    else:
        writer = rows.writeStream.foreachBatch(batch)
    query = (writer.trigger(availableNow=True)
             .option("checkpointLocation", str(work / name)).start())
    if not query.awaitTermination(600):
        query.stop()
        raise harness.RunTimeoutError("the query did not finish in 600 s")
    seconds = time.monotonic() - started
    if query.exception() is not None:
        raise harness.BenchmarkError(f"the query failed: {query.exception()}")
    with contextlib.suppress(AttributeError):
        sink.close()  # type: ignore[attr-defined]
    gates = args.batches * PARTITIONS if variant == "eos datasource" else 0
    check(broker, topic, variant, args.rows * args.batches, gates)
    return args.rows * args.batches / seconds


def check(broker: RunningBroker, topic: str, variant: str, expected: int, gates: int = 0,
          ) -> None:
    """``gates``: the data source writer's gate records, one per partition and batch, each
    aborted (docs/spark.md)."""
    landed = harness.read_log(broker.host, broker.port, topic, PARTITIONS)
    if variant.startswith("eos"):
        if landed.records != expected + gates or landed.untransactional or \
                landed.aborts != gates:
            raise harness.BenchmarkError(f"{landed.records} transactional records of {expected}, "
                                         f"{landed.untransactional} plain, {landed.aborts} aborts")
    elif landed.untransactional != expected:
        raise harness.BenchmarkError(f"{landed.untransactional} records of {expected}")


# --- the report ---------------------------------------------------------------------------------

VARIANTS = [("eos atomic", "eos", "eosclient ExactlyOnceKafkaSink atomic"),
            ("ck driver", "ck", "confluent-kafka produce() on the driver (at-least-once)"),
            ("eos partitioned", "eos", "eosclient ExactlyOnceKafkaSink partitioned"),
            ("ck partitioned", "ck", "confluent-kafka produce() per task (at-least-once)"),
            ("eos datasource", "eos", "eosclient eosclient-kafka data source writer")]
RATIOS = [report.RatioSpec(SCENARIO, "eos atomic", "ck driver", 0.9),
          report.RatioSpec(SCENARIO, "eos partitioned", "ck partitioned", 0.9),
          report.RatioSpec(SCENARIO, "eos datasource", "ck partitioned", 1.0)]


def run(args: argparse.Namespace) -> list[report.Outcome]:
    outcomes = {key: report.Outcome(SCENARIO, report.THROUGHPUT, "rows/s", key, family, label)
                for key, family, label in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="eosclient-spark-bench-") as tmp:
        work = Path(tmp)
        write_input(work / "input", args.batches, args.rows)
        with contextlib.ExitStack() as stack:
            broker = stack.enter_context(start_broker("noida", data_dir=work / "noida",
                                                      log_dir=work))
            if args.standalone:
                cluster = stack.enter_context(start_spark_cluster(log_dir=work / "spark"))
                args.master = cluster.master_url
            spark = session(args.master)
            try:
                for key, _, _ in VARIANTS:  # warm-up: each path's first use (Python workers
                    run_once(spark, broker, key, work=work, args=args)  # and imports) once
                for repeat in range(args.repeat):
                    for key, _, _ in VARIANTS:
                        outcome = outcomes[key]
                        print(f"repeat {repeat + 1}/{args.repeat}: {key}", file=sys.stderr)
                        try:
                            outcome.runs.append(run_once(spark, broker, key, work=work,
                                                         args=args))
                        except harness.BenchmarkError as exc:
                            outcome.errors.append(f"failed: {exc}")
            finally:
                spark.stop()
    return list(outcomes.values())


def render(outcomes: list[report.Outcome], ratios: list[report.Ratio],
           args: argparse.Namespace) -> str:
    where = "a standalone cluster (two one-core workers)" if args.standalone else args.master
    head = (f"Spark sink: {args.batches} micro-batches of {args.rows:,} rows, {PARTITIONS} "
            f"Spark partitions and topic partitions, {args.repeat} repeat(s), noida-db, Spark "
            f"on {where}; load average {os.getloadavg()[0]:.2f}")
    rows = [[o.label, report.format_outcome(o, 1.0)] for o in outcomes]
    return "\n\n".join([head, report.table(rows, ["sink", "rows/s"]),
                        report.table([report.format_ratio(r) for r in ratios],
                                     ["scenario", "ratio", "value", "target", "verdict"])])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    outcomes = run(args)
    ratios = report.compute_ratios(outcomes, RATIOS, {})
    print(render(outcomes, ratios, args))
    print(f"(whole run: {time.monotonic() - started:.0f} s)")
    if args.json:
        report.write_json(Path(args.json), {
            "throughput": [report.outcome_json(o, 1.0) for o in outcomes],
            "ratios": [report.ratio_json(r) for r in ratios]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
