"""eosclient.testing.marker_log: partitions read whole and raw (no CRC check: librdkafka's
mock writes its markers with a CRC of 0), each record decided by its producer's next marker;
and the mock's record deletion and request tracking the reader and the cluster nemesis use.
"""

from __future__ import annotations

import time

import pytest

from eosclient import TransactionalProducer
from eosclient.errors import ApiKey
from eosclient.testing.marker_log import LogBatch, decide, read_log, read_logs
from eosclient.testing.mock import MockCluster

TOPIC = "t"


# -- deciding by the markers, without a broker -----------------------------------------------------

def data(offset: int, pid: int, *values: bytes) -> LogBatch:
    return LogBatch(offset, pid, 0, records=tuple((offset + i, v) for i, v in enumerate(values)))


def marker(offset: int, pid: int, kind: str) -> LogBatch:
    return LogBatch(offset, pid, 0, control="commit" if kind == "commit" else "abort")


def test_each_producers_next_marker_decides_its_waiting_records() -> None:
    decided = decide([data(0, 7, b"a", b"b"), data(2, 8, b"x"), marker(3, 7, "commit"),
                      data(4, 7, b"c"), marker(5, 8, "abort"), marker(6, 7, "abort"),
                      data(7, 8, b"y")])
    assert [v for _, v in decided.committed] == [b"a", b"b"]
    assert [v for _, v in decided.aborted] == [b"x", b"c"]
    assert decided.open == [(7, b"y")]
    assert decided.markers == 3


def test_a_marker_with_nothing_waiting_decides_nothing() -> None:
    # A marker goes to every partition of its transaction, whether a batch of it got there or not.
    decided = decide([marker(0, 7, "commit"), data(1, 7, b"a"), marker(2, 7, "abort")])
    assert decided.committed == []
    assert decided.aborted == [(1, b"a")]


# -- on the mock -----------------------------------------------------------------------------------

@pytest.mark.mock
def test_a_transactional_topic_on_the_mock_reads_whole() -> None:
    # eosclient's reader with CRCs checked stops at the mock's first marker.
    with MockCluster(3) as cluster:
        cluster.create_topic(TOPIC, 2, replication_factor=3)
        cluster.set_partition_leader(TOPIC, 1, 3)
        with TransactionalProducer(cluster.bootstrap_servers, transactional_id="t") as producer:
            producer.init_transactions(15)
            with producer.transaction():
                producer.send(TOPIC, b"kept", partition=1)
            producer.begin_transaction()
            producer.send(TOPIC, b"dropped", partition=1)
            producer.flush(15)
            producer.abort_transaction(15)
            producer.begin_transaction()
            producer.send(TOPIC, b"open", partition=1)
            producer.flush(15)
            decided = decide(read_log(cluster.bootstrap_servers, TOPIC, 1))
        assert [v for _, v in decided.committed] == [b"kept"]
        assert [v for _, v in decided.aborted] == [b"dropped"]
        assert [v for _, v in decided.open] == [b"open"]
        assert read_log(cluster.bootstrap_servers, TOPIC, 0) == []


@pytest.mark.mock
def test_a_read_that_deletes_what_it_read_keeps_the_mock_log_short() -> None:
    with MockCluster(3) as cluster:
        cluster.create_topic(TOPIC, 2, replication_factor=3)
        cluster.start_request_tracking()
        started = time.monotonic()
        with TransactionalProducer(cluster.bootstrap_servers, transactional_id="t") as producer:
            producer.init_transactions(15)
            for n in range(300):
                with producer.transaction():
                    producer.send(TOPIC, b"%d" % n, partition=n % 2)
        requests = cluster.requests()
        assert {ApiKey.INIT_PRODUCER_ID, ApiKey.END_TXN} <= {r.api_key for r in requests}
        assert all(started <= r.at <= time.monotonic() for r in requests)
        released: list[tuple[int, int]] = []

        def release(partition: int, offset: int) -> None:
            released.append((partition, offset))
            cluster.delete_records(TOPIC, partition, offset)

        logs = read_logs(cluster.bootstrap_servers, TOPIC, [0, 1], release=release,
                         release_every=50)
        assert [len(decide(logs[p].batches).committed) for p in (0, 1)] == [150, 150]
        assert len(released) >= 10
        again = read_logs(cluster.bootstrap_servers, TOPIC, [0, 1])
        assert again[0].start_offset == max(o for p, o in released if p == 0)
        assert again[0].complete


