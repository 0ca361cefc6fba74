"""A streaming query that dies with the process inside the sink, as a crashed driver would.

Run by the tests as a child process (its own Spark driver): it streams the text files of
``--input`` one file per micro-batch into ``ExactlyOnceKafkaSink``, and at batch ``--crash-batch``
calls ``os._exit`` just before or just after the sink's Kafka commit. Nothing is cleaned up: the
checkpoint has the batch's offsets but not its commit, and before the commit the transaction is
left open in the broker with its records sent.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from jobs import build_session, start_query

from eosclient.producer import TransactionalProducer
from eosclient.spark import ExactlyOnceKafkaSink, _task

CRASH_EXIT = 17


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--sink-id", "--input", "--checkpoint"):
        parser.add_argument(name, required=True)
    parser.add_argument("--crash-batch", type=int, required=True)
    parser.add_argument("--crash", choices=["before_commit", "after_commit"], required=True)
    opts = parser.parse_args()
    current: list[int] = []
    original = _task.commit

    def commit(producer: TransactionalProducer, timeout: float) -> None:
        if current[-1] == opts.crash_batch:
            if opts.crash == "before_commit":
                producer.flush(timeout)  # the records are in the broker, in an open transaction
            else:
                original(producer, timeout)
            os._exit(CRASH_EXIT)
        original(producer, timeout)

    _task.commit = commit  # type: ignore[assignment]
    sink = ExactlyOnceKafkaSink(bootstrap_servers=opts.bootstrap, topic=opts.topic,
                                sink_id=opts.sink_id)

    def batch(df: Any, batch_id: int) -> None:
        current.append(batch_id)
        sink(df, batch_id)

    spark = build_session("eosclient-crash-job")
    start_query(spark, opts.input, opts.checkpoint, batch).awaitTermination(120)
    sys.exit(1)  # the crash did not happen


if __name__ == "__main__":
    main()
