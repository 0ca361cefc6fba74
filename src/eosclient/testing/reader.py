"""Read one partition to its end, blocking: for tests and the exactly-once checker.

``read_partition`` fetches from ``start`` up to the end the broker reports (the last stable offset
under read_committed, the high watermark under read_uncommitted) and runs every response through
eosclient's decoder and read_committed filter, so it is right on brokers that send no
aborted-transactions index (Tansu) as well as on those that do::

    from eosclient.testing.reader import read_partition

    records = read_partition(broker.bootstrap_servers, "orders", 0)
    assert [r.value for r in records] == expected_committed_values

``read_raw_batches`` returns the batches as the broker sent them, control batches included, for
tests that assert the ABORT and COMMIT markers themselves.

This is a one-connection, one-partition helper that stops at the end it sees. Applications use
``ReadCommittedConsumer``, which supersedes it: it pipelines fetches, follows leaders, keeps
positions and bounds its buffers. Note that on a broker without the index, committed records whose
COMMIT marker lies past the last stable offset (another transaction is still open) are not yet
known committed and are not returned; a read after that transaction ends returns them.
"""

from __future__ import annotations

import time
from typing import Any, Final, Literal

from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest

from eosclient._core.decode import ConsumerRecord, DecodedBatches, RecordBatch, decode_batches
from eosclient._core.isolation import Isolation, PartitionFilter
from eosclient._core.types import TopicPartition
from eosclient._net.blocking import BlockingConnection
from eosclient.errors import ApiKey, KafkaTimeoutError, ProtocolError, error_for

__all__ = ["read_partition", "read_raw_batches"]

IsolationName = Literal["read_committed", "read_uncommitted"]
Address = str | tuple[str, int]

_MAX_WAIT_MS: Final = 10
_FIRST_MAX_BYTES: Final = 4 * 1024 * 1024
_LARGEST_MAX_BYTES: Final = 256 * 1024 * 1024


def read_partition(bootstrap_servers: Address, topic: str, partition: int, *,
                   isolation: IsolationName = "read_committed", start: int = 0,
                   timeout: float = 10.0, check_crcs: bool = True) -> list[ConsumerRecord]:
    """Every record of a partition from ``start`` to its current end, as a consumer sees them.

    Args:
        bootstrap_servers: ``"host:port[,host:port...]"`` or a ``(host, port)`` pair.
        topic: The topic.
        partition: The partition.
        isolation: ``"read_committed"`` (committed records below the LSO, in offset order) or
            ``"read_uncommitted"`` (every record below the high watermark, markers excluded).
        start: The first offset to read.
        timeout: Seconds for the whole read.
        check_crcs: Whether to check each batch's CRC-32C (the consumer's ``check.crcs``;
            False reads librdkafka's mock, whose control batches carry wrong CRCs).

    Returns:
        The records, in offset order.

    Raises:
        KafkaTimeoutError: the read took longer than ``timeout``.
        CorruptRecordError: a fetched batch failed its CRC-32C check (with ``check_crcs``),
            or its framing or records do not parse.
        EosError: the broker answered Metadata or Fetch with an error.
    """
    level = _isolation(isolation)
    tp = TopicPartition(topic, partition)
    records: list[ConsumerRecord] = []
    filt = PartitionFilter(tp, isolation=level, start=start)
    with _Fetcher(bootstrap_servers, tp, level, timeout, check_crcs) as fetcher:
        while True:
            before = filt.fetch_offset
            decoded, data = fetcher.fetch(before)
            records += filt.feed(decoded.batches, last_stable_offset=data.last_stable_offset,
                                 aborted_transactions=data.aborted_transactions)
            if filt.fetch_offset >= fetcher.end(data) or not fetcher.keep_going(
                    decoded, filt.fetch_offset != before):
                return records


def read_raw_batches(bootstrap_servers: Address, topic: str, partition: int, *,
                     isolation: IsolationName = "read_uncommitted", start: int = 0,
                     timeout: float = 10.0, check_crcs: bool = True) -> list[RecordBatch]:
    """The batches a Fetch returns from ``start`` to the end, control batches included.

    Nothing is filtered: under read_committed a broker may still send aborted batches (Kafka and
    Tansu do; noida-db leaves them out). Arguments, errors: as :func:`read_partition`.

    Returns:
        The decoded batches in offset order (the first may begin before ``start``).
    """
    level = _isolation(isolation)
    tp = TopicPartition(topic, partition)
    batches: list[RecordBatch] = []
    offset = start
    with _Fetcher(bootstrap_servers, tp, level, timeout, check_crcs) as fetcher:
        while True:
            decoded, data = fetcher.fetch(offset)
            fresh = [b for b in decoded.batches if b.last_offset >= offset]
            batches += fresh
            offset = fresh[-1].last_offset + 1 if fresh else offset
            if offset >= fetcher.end(data) or not fetcher.keep_going(decoded, bool(fresh)):
                return batches


def _isolation(name: str) -> Isolation:
    if name not in ("read_committed", "read_uncommitted"):
        raise ValueError(f"isolation must be 'read_committed' or 'read_uncommitted', not {name!r}")
    return Isolation[name.upper()]


class _Fetcher:
    """One connection to the partition's leader, fetching it one request at a time."""

    def __init__(self, bootstrap: Address, tp: TopicPartition, isolation: Isolation,
                 timeout: float, check_crcs: bool) -> None:
        self._deadline = time.monotonic() + timeout
        self._tp = tp
        self._isolation = isolation
        self._check_crcs = check_crcs
        self._max_bytes = _FIRST_MAX_BYTES
        self._conn = _connect_to_leader(_addresses(bootstrap), tp, self._remaining())

    def __enter__(self) -> _Fetcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._conn.close()

    def fetch(self, offset: int) -> tuple[DecodedBatches, Any]:
        """One Fetch from ``offset``: the decoded batches and the partition's response."""
        topic, partition = self._tp
        # min_bytes 0 answers at once; max_wait_ms 0 would too, but Tansu then answers with no
        # topics at all (0.6.0), so it gets a few milliseconds.
        request = FetchRequest(
            replica_id=-1, max_wait_ms=_MAX_WAIT_MS, min_bytes=0, max_bytes=self._max_bytes,
            isolation_level=int(self._isolation), session_id=0, session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                FetchRequest.FetchTopic.FetchPartition(
                    partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                    log_start_offset=-1, partition_max_bytes=self._max_bytes)])],
            forgotten_topics_data=[], rack_id="")
        response = self._conn.request(request, timeout=self._remaining())
        if response.error_code:
            raise error_for(ApiKey.FETCH, response.error_code)
        data = _partition_of(response, self._tp)
        if data.error_code:
            raise error_for(ApiKey.FETCH, data.error_code)
        return decode_batches(data.records, self._tp, check_crcs=self._check_crcs), data

    def end(self, data: Any) -> int:
        """Where this read stops: the LSO under read_committed, else the high watermark."""
        if self._isolation is Isolation.READ_COMMITTED and data.last_stable_offset >= 0:
            return int(data.last_stable_offset)
        return int(data.high_watermark)

    def keep_going(self, decoded: DecodedBatches, moved: bool) -> bool:
        """Whether to fetch again: the position moved, or one batch outgrew the byte limit."""
        if moved:
            return True
        if decoded.truncated_bytes and not decoded.batches and self._max_bytes < _LARGEST_MAX_BYTES:
            self._max_bytes *= 2  # a batch larger than the limit: ask for more (KIP-74 aside)
            return True
        return False  # nothing more below the end now (noida-db leaves out aborted data)

    def _remaining(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise KafkaTimeoutError(f"reading {self._tp.topic}-{self._tp.partition} timed out")
        return left


def _addresses(bootstrap: Address) -> list[tuple[str, int]]:
    if isinstance(bootstrap, tuple):
        return [bootstrap]
    out = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return out


def _connect_to_leader(addresses: list[tuple[str, int]], tp: TopicPartition,
                       timeout: float) -> BlockingConnection:
    conn = _connect_any(addresses, timeout)
    try:
        leader = _leader_address(conn, tp, timeout)
    except BaseException:
        conn.close()
        raise
    if leader == conn.address:
        return conn
    conn.close()
    return BlockingConnection(*leader, timeout=timeout)


def _connect_any(addresses: list[tuple[str, int]], timeout: float) -> BlockingConnection:
    error: Exception | None = None
    for host, port in addresses:
        try:
            return BlockingConnection(host, port, timeout=timeout)
        except Exception as exc:  # try the next bootstrap server; the last error is raised
            error = exc
    assert error is not None
    raise error


def _leader_address(conn: BlockingConnection, tp: TopicPartition,
                    timeout: float) -> tuple[str, int]:
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=tp.topic)],
                              allow_auto_topic_creation=False)
    response = conn.request(request, timeout=timeout)
    topics = [t for t in response.topics if t.name == tp.topic]
    if not topics:
        raise ProtocolError(f"the Metadata response does not mention {tp.topic!r}")
    topic = topics[0]
    if topic.error_code:
        raise error_for(ApiKey.METADATA, topic.error_code, f"topic {tp.topic!r}")
    leaders = [p.leader_id for p in topic.partitions if p.partition_index == tp.partition]
    if not leaders:
        raise error_for(ApiKey.METADATA, 3, f"{tp.topic} has no partition {tp.partition}")
    brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
    if leaders[0] not in brokers:
        raise error_for(ApiKey.METADATA, 5, f"{tp.topic}-{tp.partition} has no leader now")
    return brokers[leaders[0]]


def _partition_of(response: Any, tp: TopicPartition) -> Any:
    for topic in response.responses:
        if topic.topic == tp.topic:
            for data in topic.partitions:
                if data.partition_index == tp.partition:
                    return data
    raise ProtocolError(f"the Fetch response has no {tp.topic}-{tp.partition}")
