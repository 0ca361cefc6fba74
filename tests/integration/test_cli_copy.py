"""``eosclient copy`` as a process: progress lines, a graceful stop on SIGTERM, then a resume."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
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


@pytest.mark.parametrize("front", [[], ["--asyncio"]], ids=["sync", "asyncio"])
def test_copy_stops_on_sigterm_and_resumes(noida_broker: RunningBroker,
                                           unique_name: Callable[[str], str],
                                           front: list[str]) -> None:
    source, sink = fill(noida_broker, unique_name, 2000)
    args = ["copy", "--input", source, "--output", sink, "--group", unique_name("g"),
            "--transactional-id", unique_name("t"), "--bootstrap-servers",
            noida_broker.bootstrap_servers, *front]
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
    base = ["copy", "--input", "a", "--output", "b", "--group", "g", "--transactional-id", "t",
            "--bootstrap-servers", "127.0.0.1:1"]
    for bad in (["--max-records-per-transaction", "0"], ["--max-consecutive-aborts", "-1"]):
        with pytest.raises(SystemExit) as exited:  # refused by argparse now, still exit 2
            main([*base, *bad])
        assert exited.value.code == 2
    assert main(["copy", "--input", "a", "--output", "b", "--group", "g", "--transactional-id",
                 "t", "--bootstrap-servers", "127.0.0.1:1", "--consumer-property", "nokey"]) == 2


Ran = tuple[subprocess.CompletedProcess[str], float]


def _copy_process(bootstrap: str, source: str, unique_name: Callable[[str], str],
                  *extra: str, timeout: float = 60) -> Ran:
    args = ["copy", "--input", source, "--output", unique_name("out"), "--group",
            unique_name("g"), "--transactional-id", unique_name("t"), "--bootstrap-servers",
            bootstrap, "--progress-interval", "30", *extra]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "eosclient.cli", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)
    return done, time.monotonic() - started


def test_copy_from_a_missing_topic_warns_and_fails_after_idle_timeout(
        noida_broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    # A missing input topic made copy run silently for ever; --idle-timeout did not stop it.
    missing = unique_name("missing")
    done, took = _copy_process(noida_broker.bootstrap_servers, missing, unique_name,
                               "--idle-timeout", "3")
    assert done.returncode == 1, done.stderr
    assert f"topic '{missing}' does not exist" in done.stderr  # the WARNING, at once
    assert "KafkaTimeoutError" in done.stderr and "do not exist" in done.stderr
    assert took < 30


def test_copy_to_a_closed_port_names_the_cause_and_fails_after_idle_timeout(
        unique_name: Callable[[str], str]) -> None:
    # A closed bootstrap port: copy said nothing for a minute, then a timeout naming no cause;
    # then it said so only when --idle-timeout passed. Now it fails once every connect has
    # failed for a second (AllBrokersDownError), whatever the idle timeout.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens there
    done, took = _copy_process(f"127.0.0.1:{port}", unique_name("in"), unique_name,
                               "--idle-timeout", "60")
    assert done.returncode == 1, done.stderr
    assert f"WARNING eosclient.net: cannot connect to 127.0.0.1:{port}" in done.stderr
    assert "AllBrokersDownError" in done.stderr and "ECONNREFUSED" in done.stderr
    assert took < 10  # about 2 s, the interpreter's start included


@pytest.mark.parametrize(("option", "value"), [("--max-records", "-5"),
                                               ("--max-records-per-transaction", "0"),
                                               ("--idle-timeout", "-1"),
                                               ("--progress-interval", "nan")])
def test_copy_refuses_bad_numbers(option: str, value: str,
                                  unique_name: Callable[[str], str]) -> None:
    # --max-records -5 was accepted (and the copy then ran).
    done, _ = _copy_process("127.0.0.1:9", unique_name("in"), unique_name, option, value,
                            timeout=30)
    assert done.returncode == 2
    assert f"argument {option}:" in done.stderr
