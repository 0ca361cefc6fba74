"""The shell tools on both brokers: ``eosclient topics``, ``produce``, ``consume``, ``groups``
and ``txn``, run in-process through ``main(argv)`` (and once as a pipeline of processes)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from eosclient import Admin, TopicPartition, TransactionalProducer
from eosclient.cli import main
from eosclient.testing.brokers import RunningBroker

pytestmark = pytest.mark.broker

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(broker: RunningBroker, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> Run:
    """``main(argv)`` against the broker: (exit status, stdout, stderr); ``stdin`` bytes."""
    monkeypatch.setenv("EOSCLIENT_BOOTSTRAP_SERVERS", broker.bootstrap_servers)

    def call(*argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        status = main([*argv])
        out, err = capsys.readouterr()
        return status, out, err

    return call


def hang(broker: RunningBroker, topic: str, txn_id: str) -> TransactionalProducer:
    """A record committed in partition 0, then a transaction left open there."""
    producer = TransactionalProducer(broker.bootstrap_servers, transactional_id=txn_id)
    producer.init_transactions(15)
    with producer.transaction(timeout=15):
        producer.send(topic, b"committed", partition=0)
    producer.begin_transaction()
    producer.send(topic, b"open", partition=0)
    producer.flush(15)
    return producer


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == "eosclient 0.1.0.dev0"


def test_topics(run: Run, topic_name: str) -> None:
    assert run("topics", "create", topic_name, "-p", "3")[0] == 0
    status, _, err = run("topics", "create", topic_name)
    assert status == 1 and "TOPIC_ALREADY_EXISTS" in err and len(err.splitlines()) == 1
    assert run("topics", "create", topic_name, "--if-not-exists")[0] == 0
    status, out, _ = run("topics", "list")
    assert status == 0 and topic_name in out.split()
    status, out, _ = run("topics", "describe", topic_name, "--format", "json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["partition"] for r in rows] == [0, 1, 2] and all(r["leader"] for r in rows)
    assert run("topics", "delete", topic_name)[0] == 0
    status, _, err = run("topics", "describe", topic_name)
    assert status == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err and "Traceback" not in err
    assert run("topics", "delete", topic_name)[0] == 1
    assert run("topics", "delete", topic_name, "--if-exists")[0] == 0


def test_usage_errors_exit_2_in_one_line(run: Run, topic_name: str) -> None:
    assert run("topics", "create", topic_name)[0] == 0
    status, _, err = run("consume", "-t", topic_name, "-g", "g", "-o", "3")
    assert status == 2 and len(err.splitlines()) == 1
    status, _, err = run("produce", "-t", topic_name, "-K", ":", stdin=b"no separator\n")
    assert status == 2 and "key separator" in err
    status, _, err = run("topics", "list", "-X", "no.such.setting=1")
    assert status == 2 and "no.such.setting" in err


def test_produce_in_transactions_then_consume(run: Run, topic_name: str,
                                              tmp_path: Path) -> None:
    assert run("topics", "create", topic_name, "-p", "2")[0] == 0
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(10))
    status, _, err = run("produce", "-t", topic_name, "-K", ":", "-n", "4", "-H", "src=cli",
                         stdin=lines)
    assert status == 0 and "10 records" in err and "3 transactions" in err
    whole = tmp_path / "blob.bin"
    whole.write_bytes(b"\xff\x00binary")
    assert run("produce", "-t", topic_name, "-p", "1", "--whole-file", str(whole))[0] == 0

    status, out, err = run("consume", "-t", topic_name, "-e", "--format", "json")
    assert status == 0 and "consumed 11 records" in err
    records = [json.loads(line) for line in out.splitlines()]
    assert sorted(r["key"] for r in records if r["key"]) == sorted(f"k{i}" for i in range(10))
    assert {(r["key"], r["value"]) for r in records if r["key"]} == {
        (f"k{i}", f"v{i}") for i in range(10)}
    assert all(r["headers"] == [["src", "cli"]] for r in records if r["key"])
    (blob,) = [r for r in records if r["key"] is None]
    assert blob["value"] == {"base64": "/wBiaW5hcnk="} and blob["partition"] == 1

    status, out, _ = run("consume", "-t", topic_name, "-p", "1", "-c", "1", "-K", "=")
    assert status == 0 and len(out.splitlines()) == 1 and "=" in out


def test_consume_starts_where_asked(run: Run, broker: RunningBroker, topic_name: str) -> None:
    assert run("topics", "create", topic_name)[0] == 0
    assert run("produce", "-t", topic_name, stdin=b"a\nb\n")[0] == 0  # offsets 0, 1; marker 2
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    assert run("produce", "-t", topic_name, stdin=b"c\n")[0] == 0  # offset 3; marker 4
    assert run("consume", "-t", topic_name, "-e")[1] == "a\nb\nc\n"
    assert run("consume", "-t", topic_name, "-e", "-o", "1")[1] == "b\nc\n"
    assert run("consume", "-t", topic_name, "-e", "-o", "-2")[1] == "c\n"
    assert run("consume", "-t", topic_name, "-e", "--timestamp", str(middle))[1] == "c\n"
    status, out, _ = run("consume", "-t", topic_name, "--from", "end", "--idle-timeout", "1")
    assert (status, out) == (0, "")


def test_consume_reads_committed_only(run: Run, broker: RunningBroker, topic_name: str,
                                      unique_name: Callable[[str], str]) -> None:
    assert run("topics", "create", topic_name)[0] == 0
    producer = hang(broker, topic_name, unique_name("t"))
    try:
        status, out, _ = run("consume", "-t", topic_name, "-e")
        assert (status, out) == (0, "committed\n")
        status, out, _ = run("consume", "-t", topic_name, "-e", "--isolation-level",
                             "read_uncommitted")
        assert (status, out) == (0, "committed\nopen\n")
    finally:
        producer.abort_transaction(15)
        producer.close()


def test_group_consume_then_lag(run: Run, topic_name: str,
                                unique_name: Callable[[str], str]) -> None:
    assert run("topics", "create", topic_name)[0] == 0
    assert run("produce", "-t", topic_name, stdin=b"1\n2\n3\n")[0] == 0  # 0-2; marker 3
    group = unique_name("g")
    # -X: Tansu holds a JoinGroup for about half the session timeout (~23 s at the default 45 s)
    status, out, _ = run("consume", "-t", topic_name, "-g", group, "-c", "2", "--timeout", "60",
                         "-X", "session.timeout.ms=6000")
    assert (status, out) == (0, "1\n2\n")
    status, out, _ = run("groups", "list", "--format", "json")
    assert group in [json.loads(line)["group"] for line in out.splitlines()]
    status, out, _ = run("groups", "describe", group, "--format", "json")
    described = json.loads(out)
    assert [(o["partition"], o["committed"], o["last_stable_offset"], o["lag"])
            for o in described["offsets"]] == [(0, 2, 4, 2)]
    status, out, _ = run("groups", "describe", group)
    assert status == 0 and "total lag 2" in out


def test_txn_abort_by_transactional_id(run: Run, broker: RunningBroker, topic_name: str,
                                       unique_name: Callable[[str], str]) -> None:
    assert run("topics", "create", topic_name)[0] == 0
    txn_id = unique_name("t")
    producer = hang(broker, topic_name, txn_id)
    try:
        # -e stops at the end measured first: the LSO, held at the open transaction.
        assert run("consume", "-t", topic_name, "-e")[1] == "committed\n"
        status, out, _ = run("txn", "abort", "--transactional-id", txn_id)
        assert status == 0 and "aborted" in out
        status, out, _ = run("consume", "-t", topic_name, "-e", "--format", "json")
        records = [json.loads(line) for line in out.splitlines()]
        # The open record is aborted and never read; the LSO moved past it and its marker.
        assert [(r["value"], r["offset"]) for r in records] == [("committed", 0)]
        status, out, _ = run("consume", "-t", topic_name, "-o", "-1", "-e", "--isolation-level",
                             "read_uncommitted")
        assert out == ""  # the last offset is the ABORT marker, not a record
    finally:
        producer.close()


def test_txn_abort_of_an_unknown_id_says_so(run: Run, broker: RunningBroker,
                                            unique_name: Callable[[str], str]) -> None:
    # It printed "aborted the open transaction of 'NAME' (its producer is fenced)" for an id
    # that never existed, and InitProducerId registered it: `txn list` then showed NAME.
    unknown = unique_name("never")
    status, out, err = run("txn", "abort", "--transactional-id", unknown)
    if broker.kind == "noida":
        assert status == 1 and out == "", out
        assert "nothing to abort" in err and unknown in err, err
        listed = run("txn", "list", "--format", "json")[1]
        assert unknown not in listed  # nothing registered it
        assert "TRANSACTIONAL_ID_NOT_FOUND" in run("txn", "describe", unknown)[2]
    else:  # Tansu lacks DescribeTransactions: it cannot tell, and the message says so
        assert status == 0 and "aborted the open transaction" not in out, out
        assert "cannot say whether the id existed" in out and "registered now" in out, out


def test_txn_abort_of_an_id_with_no_open_transaction(noida_broker: RunningBroker,
                                                     capsys: pytest.CaptureFixture[str],
                                                     unique_name: Callable[[str], str]) -> None:
    # A known id whose last transaction committed: nothing is aborted, and it says so.
    txn_id = unique_name("idle")
    with TransactionalProducer(noida_broker.bootstrap_servers, transactional_id=txn_id) as p:
        p.init_transactions(15)
    capsys.readouterr()
    status = main(["txn", "abort", "--transactional-id", txn_id, "-b",
                   noida_broker.bootstrap_servers])
    out = capsys.readouterr().out
    assert status == 0 and "had no open transaction" in out and "fenced" in out, out


def test_txn_kip664_on_noida(noida_broker: RunningBroker, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch, topic_name: str,
                             unique_name: Callable[[str], str]) -> None:
    monkeypatch.setenv("EOSCLIENT_BOOTSTRAP_SERVERS", noida_broker.bootstrap_servers)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = main([*argv])
        return (status, *capsys.readouterr())

    assert run("topics", "create", topic_name)[0] == 0
    txn_id = unique_name("t")
    producer = hang(noida_broker, topic_name, txn_id)
    try:
        status, out, _ = run("txn", "list", "--format", "json")
        listed = {r["transactional_id"]: r for r in map(json.loads, out.splitlines())}
        assert status == 0 and listed[txn_id]["state"] == "Ongoing"
        status, out, _ = run("txn", "describe", txn_id, "--format", "json")
        (described,) = map(json.loads, out.splitlines())
        assert (described["state"], described["partitions"]) == ("Ongoing", [f"{topic_name}-0"])
        status, out, _ = run("txn", "hanging", "--max-open", "0.001", "-t", topic_name,
                             "--format", "json")
        assert [r["transactional_id"] for r in map(json.loads, out.splitlines())] == [txn_id]
        status, out, err = run("txn", "hanging", "-t", topic_name)
        assert status == 0 and "0 hanging transactions" in err
        status, _, err = run("txn", "abort", "-t", topic_name, "-p", "0", "--producer-id",
                             str(listed[txn_id]["producer_id"]), "--producer-epoch", "0",
                             "--coordinator-epoch", "0")
        assert status == 3 and "WRITE_TXN_MARKERS" in err  # noida-db lacks WriteTxnMarkers
        assert run("txn", "abort", "--transactional-id", txn_id)[0] == 0
        status, out, _ = run("txn", "hanging", "--max-open", "0.001", "-t", topic_name)
        assert status == 0 and txn_id not in out
        status, out, _ = run("txn", "describe", txn_id, "--format", "json")
        assert json.loads(out)["state"] != "Ongoing"
        status, _, err = run("txn", "describe", unique_name("unknown"))
        assert status == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in err
    finally:
        producer.close()


def test_txn_on_tansu_says_unsupported(tansu_broker: RunningBroker,
                                       capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch, topic_name: str) -> None:
    monkeypatch.setenv("EOSCLIENT_BOOTSTRAP_SERVERS", tansu_broker.bootstrap_servers)
    assert main(["topics", "create", topic_name]) == 0
    for argv, api in ((["txn", "list"], "LIST_TRANSACTIONS"),
                      (["txn", "describe", "x"], "DESCRIBE_TRANSACTIONS"),
                      (["txn", "hanging"], "LIST_TRANSACTIONS"),
                      (["txn", "abort", "-t", topic_name, "-p", "0", "--start-offset", "0"],
                       "DESCRIBE_PRODUCERS"),
                      (["txn", "abort", "-t", topic_name, "-p", "0", "--producer-id", "1",
                        "--producer-epoch", "0", "--coordinator-epoch", "0"],
                       "WRITE_TXN_MARKERS")):
        capsys.readouterr()
        started = time.monotonic()
        assert main(argv) == 3, argv
        err = capsys.readouterr().err
        assert api in err and len(err.splitlines()) == 1
        assert time.monotonic() - started < 10


def test_a_shell_pipeline(broker: RunningBroker, topic_name: str) -> None:
    """As a user types it: produce from a pipe, consume into a pipe, exit codes."""
    env = {**os.environ, "EOSCLIENT_BOOTSTRAP_SERVERS": broker.bootstrap_servers}
    command = [sys.executable, "-m", "eosclient.cli"]

    def shell(*argv: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*command, *argv], input=stdin, capture_output=True, env=env,
                              timeout=120, check=False)

    assert shell("topics", "create", topic_name, "-p", "2").returncode == 0
    lines = b"".join(b"%d\n" % i for i in range(1000))
    produced = shell("produce", "-t", topic_name, "-n", "100", stdin=lines)
    assert produced.returncode == 0 and produced.stdout == b""
    assert b"1,000 records" in produced.stderr and b"10 transactions" in produced.stderr
    consumed = shell("consume", "-t", topic_name, "-e")
    assert consumed.returncode == 0
    assert sorted(int(v) for v in consumed.stdout.split()) == list(range(1000))
    missing = shell("consume", "-t", topic_name + "-missing", "-e", "--timeout", "5")
    assert missing.returncode == 1 and b"Traceback" not in missing.stderr
    assert len(missing.stderr.decode().strip().splitlines()) == 1


def _snippet(language: str) -> str:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    return text.split(f"```{language}\n", 1)[1].split("```", 1)[0]


def test_docs_quick_start_runs(noida_broker: RunningBroker) -> None:
    # docs/cli.md's first shell block, line by line, against a broker already running.
    env = {**os.environ, "EOSCLIENT_BOOTSTRAP_SERVERS": noida_broker.bootstrap_servers}
    lines = [line.split("#")[0].strip() for line in _snippet("sh").splitlines()]
    commands = [line for line in lines
                if line and not line.startswith(("eosclient broker", "export"))]
    assert len(commands) == 8
    for command in commands:
        shell = command.replace("eosclient ", f"{sys.executable} -m eosclient.cli ")
        done = subprocess.run(["bash", "-c", shell], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode == 0, (command, done.stderr)


def test_docs_python_snippet_runs(noida_broker: RunningBroker) -> None:
    # On noida-db: Tansu has no ListTransactions, which find_hanging_transactions needs.
    code = _snippet("python").replace("127.0.0.1:9092", noida_broker.bootstrap_servers)
    exec(compile(code, "docs/cli.md", "exec"), {})


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_produce_interrupted_aborts_the_open_transaction(broker: RunningBroker,
                                                         topic_name: str) -> None:
    env = {**os.environ, "EOSCLIENT_BOOTSTRAP_SERVERS": broker.bootstrap_servers}
    command = [sys.executable, "-m", "eosclient.cli"]
    assert subprocess.run([*command, "topics", "create", topic_name], env=env, timeout=60,
                          check=False).returncode == 0
    # SIGINT as a terminal gives it: a test run started in the background by a shell without
    # job control ignores SIGINT, and an ignored signal stays ignored in every child
    child = subprocess.Popen([*command, "produce", "-t", topic_name, "-n", "3"],
                             stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             preexec_fn=_default_sigint)  # noqa: PLW1509 - one signal() call
    try:
        assert child.stdin is not None
        child.stdin.write(b"1\n2\n3\n4\n5\n")  # a transaction of 3 commits; 4 and 5 stay open
        child.stdin.flush()
        seen = b""
        deadline = time.monotonic() + 30
        while seen != b"1\n2\n3\n" and time.monotonic() < deadline:
            seen = subprocess.run([*command, "consume", "-t", topic_name, "-e"], env=env,
                                  capture_output=True, timeout=60, check=False).stdout
        assert seen == b"1\n2\n3\n"
        time.sleep(0.5)  # 4 and 5 reach the broker (the linger is 5 ms)
        child.send_signal(signal.SIGINT)
        # wait() rather than communicate(): communicate closes stdin, an end of input that
        # raced the signal (the child then committed 4 and 5 and exited 0 on a loaded machine)
        child.wait(timeout=30)
        assert child.stderr is not None
        err = child.stderr.read()
    finally:
        child.kill()
        child.wait(10)
    assert child.returncode == 130 and b"interrupted" in err
    # Nothing holds the LSO back any more, and 4 and 5 are never read by read_committed readers.
    with Admin(broker.bootstrap_servers) as admin:
        tp = TopicPartition(topic_name, 0)
        committed = admin.list_offsets([tp])
        assert committed == admin.list_offsets([tp], isolation_level="read_uncommitted")
    final = subprocess.run([*command, "consume", "-t", topic_name, "-e"], env=env,
                           capture_output=True, timeout=60, check=False)
    assert final.stdout == b"1\n2\n3\n"
