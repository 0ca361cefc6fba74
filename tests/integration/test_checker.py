"""The checker against real brokers: it flags exactly the anomalies a test wrote on purpose."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from eosclient import TransactionalProducer
from eosclient.cli import main
from eosclient.testing import topics
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.checker import SOURCE_HEADER, check, source_id

pytestmark = pytest.mark.broker

PARTITIONS = 3
RECORDS = 30


def create_topic(broker: RunningBroker, name: str, partitions: int = PARTITIONS) -> str:
    return topics.create_topic(broker, name, partitions)


def write(producer: TransactionalProducer, topic: str, ids: Sequence[str], *,
          abort: bool = False) -> None:
    producer.begin_transaction()
    for i, rid in enumerate(ids):
        producer.send(topic, b"v", partition=i % PARTITIONS,
                      headers=[(SOURCE_HEADER, rid.encode())])
    if abort:
        producer.abort_transaction(15)
    else:
        producer.commit_transaction(15)


def setup(broker: RunningBroker, unique_name: Callable[[str], str],
          ) -> tuple[TransactionalProducer, str, list[str]]:
    source = create_topic(broker, unique_name("in"))
    producer = TransactionalProducer(broker.bootstrap_servers, transactional_id=unique_name("t"),
                                     linger_ms=0)
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(RECORDS):
        producer.send(source, str(i).encode(), partition=i % PARTITIONS)
    producer.commit_transaction(15)
    ids = [source_id(source, i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS)]
    return producer, source, ids


def test_the_checker_flags_exactly_what_was_written(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    producer, source, ids = setup(broker, unique_name)
    with producer:
        good, lossy, dup = (create_topic(broker, unique_name(n)) for n in ("good", "loss", "dup"))
        write(producer, good, ids)
        write(producer, good, ["in/0/999"], abort=True)  # read_committed never sees it
        write(producer, lossy, ids[:-2])
        write(producer, dup, ids + ids[:4])
    assert check(broker.bootstrap_servers, source, good, aborted=["in/0/999"]).ok
    lost = check(broker.bootstrap_servers, source, lossy)
    assert (lost.totals.lost, lost.totals.total()) == (2, 2), str(lost)
    doubled = check(broker.bootstrap_servers, source, dup)
    assert (doubled.totals.duplicated, doubled.totals.total()) == (4, 4), str(doubled)


def test_verify_command_exit_status(noida_broker: RunningBroker,
                                    unique_name: Callable[[str], str],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    producer, source, ids = setup(noida_broker, unique_name)
    with producer:
        good, bad = (create_topic(noida_broker, unique_name(n)) for n in ("good", "bad"))
        write(producer, good, ids)
        write(producer, bad, [*ids[1:], "leaked"])  # one lost, one aborted-but-read
    common = ["verify", "--input", source, "--bootstrap-servers", noida_broker.bootstrap_servers]
    assert main([*common, "--output", good]) == 0
    assert "OK" in capsys.readouterr().out
    leaked = noida_broker.log_path.parent / "aborted.txt"
    leaked.write_text("leaked\n")
    assert main([*common, "--output", bad, "--aborted-ids", str(leaked)]) == 1
    out = capsys.readouterr().out
    assert "lost: 1" in out and "aborted-read: 1" in out, out
    assert main([*common, "--output", unique_name("missing"), "--timeout", "5"]) == 1
