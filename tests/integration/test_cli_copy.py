"""``eosclient copy`` as a process: progress lines, a graceful stop on SIGTERM, then a resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable

import pytest

from eosclient import TransactionalProducer
from eosclient.cli import main
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import check

pytestmark = pytest.mark.broker


def create_topic(broker: RunningBroker, name: str, partitions: int = 3) -> str:
    return topics.create_topic(broker, name, partitions)


def fill(broker: RunningBroker, unique_name: Callable[[str], str], count: int) -> tuple[str, str]:
    source, sink = create_topic(broker, unique_name("in")), create_topic(broker, unique_name("out"))
    with TransactionalProducer(broker.bootstrap_servers, transactional_id=unique_name("fill"),
                               linger_ms=5) as producer:
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.send_batch(source, [str(i).encode() for i in range(count)])
        producer.commit_transaction(15)
    return source, sink


def test_copy_stops_on_sigterm_and_resumes(noida_broker: RunningBroker,
                                           unique_name: Callable[[str], str]) -> None:
    source, sink = fill(noida_broker, unique_name, 2000)
    args = ["copy", "--input", source, "--output", sink, "--group", unique_name("g"),
            "--transactional-id", unique_name("t"), "--bootstrap-servers",
            noida_broker.bootstrap_servers]
    child = subprocess.Popen([sys.executable, "-m", "eosclient.cli", *args,
                              "--max-records-per-transaction", "10", "--progress-interval", "0.1"],
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("records in") and not line.startswith("records in 0,"):
                break
        child.send_signal(signal.SIGTERM)
        rest, _ = child.communicate(timeout=20)
    finally:
        child.kill()
        child.wait(10)
    assert child.returncode == 0
    assert "done: records in" in rest
    partial = check(noida_broker.bootstrap_servers, source, sink)
    assert partial.totals.total() == partial.totals.lost, str(partial)  # only not yet copied
    assert main([*args, "--idle-timeout", "2"]) == 0
    report = check(noida_broker.bootstrap_servers, source, sink)
    assert report.ok, str(report)


def test_copy_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["copy", "--input", "a"])
    assert exited.value.code == 2
    assert main(["copy", "--input", "a", "--output", "b", "--group", "g", "--transactional-id",
                 "t", "--bootstrap-servers", "127.0.0.1:1", "--max-records-per-transaction",
                 "0"]) == 2
    assert main(["copy", "--input", "a", "--output", "b", "--group", "g", "--transactional-id",
                 "t", "--bootstrap-servers", "127.0.0.1:1", "--max-consecutive-aborts",
                 "-1"]) == 2
    assert main(["copy", "--input", "a", "--output", "b", "--group", "g", "--transactional-id",
                 "t", "--bootstrap-servers", "127.0.0.1:1", "--consumer-property", "nokey"]) == 2
