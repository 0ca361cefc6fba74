"""A streaming query written by the ``eosclient-kafka`` data source, whose driver is SIGKILLed
at a crash point of the commit (``EOSCLIENT_SPARK_CRASH=<point>:<batch>:kill=<own group>``):
the commit step kills this process's group, so the JVM, this Python driver and the workers
all die at once, with nothing cleaned up. Run by ``test_writer_kills.py`` in a session of
its own."""

from __future__ import annotations

import argparse
import os
import sys

from jobs import build_session, start_writer_query

from eosclient.spark._driver import CRASH_ENV


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--sink-id", "--input", "--checkpoint"):
        parser.add_argument(name, required=True)
    parser.add_argument("--tasks", type=int, default=3)
    opts = parser.parse_args()
    setting = os.environ.get(CRASH_ENV, "")  # name this process group, which the JVM joins
    os.environ[CRASH_ENV] = setting.replace("<own group>", str(os.getpgrp()))
    spark = build_session("eosclient-writer-kill-job")
    query = start_writer_query(spark, opts.input, opts.checkpoint, servers=opts.bootstrap,
                               topic=opts.topic, sink_id=opts.sink_id, tasks=opts.tasks)
    query.awaitTermination(120)
    sys.exit(1)  # the kill did not happen


if __name__ == "__main__":
    main()
