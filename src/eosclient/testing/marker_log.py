"""Read partitions whole and raw, and decide each record by its producer's control markers.

:func:`eosclient.testing.reader.read_raw_batches` reads one partition batch by batch; this
module is for a whole topic on librdkafka's mock cluster, where three things differ. The mock
writes its COMMIT and ABORT batches with a CRC of 0, so nothing here checks CRCs (the decoder's
``check_crcs=False``; the framing is still checked). Its Fetch answers one batch a partition, and
finds it by walking the partition's log from the start, so :func:`read_logs` asks each leader
for all of its partitions in every Fetch, and can hand back what it has read (``release``) for
the caller to delete: each walk then stays short, and a read's time grows with the log rather
than with its square (tens of thousands of batches a partition read in seconds, not minutes).
And the mock drops a partition's oldest batches past 5 MiB or 100,000 batches: a read starts at
the log start offset and says where that was (:class:`PartitionLog`).

:func:`decide` then says what each record became, the way a reader trusting only the markers
would (KIP-98): a producer's records wait until its next marker in the partition, which commits
or aborts them all; records with no marker after them are still open. It needs no
aborted-transactions index and no last stable offset, so it is right on a broker whose LSO is
the high watermark (the mock) as on one that sends no index (Tansu)::

    from eosclient.testing.marker_log import decide, read_log

    log = decide(read_log(cluster.bootstrap_servers, "orders", 0))
    assert [value for _, value in log.committed] == expected_committed_values

Being raw, this is for tests of what reached the log, not a consumer: read_uncommitted, no
CRC, and only what lies below the high watermark when it is read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from kafka.protocol.consumer import FetchRequest

from eosclient._core.decode import ControlType, RecordBatch, decode_batches
from eosclient._core.types import TopicPartition
from eosclient._net.blocking import BlockingConnection
from eosclient.errors import ApiKey, KafkaTimeoutError, ProtocolError, error_for
from eosclient.testing.reader import Address, _addresses, _connect_any, _leader_address

__all__ = ["Decided", "LogBatch", "PartitionLog", "decide", "read_log", "read_logs"]

_MAX_BYTES: Final = 64 << 20
_OFFSET_OUT_OF_RANGE: Final = 1

Marker = Literal["commit", "abort"]
_MARKERS: Final[dict[ControlType | None, Marker]] = {ControlType.COMMIT: "commit",
                                                      ControlType.ABORT: "abort"}


@dataclass(frozen=True)
class LogBatch:
    """One batch as it lies in the log.

    Attributes:
        base_offset: The offset of its first record.
        producer_id: Its producer id (-1 without one).
        producer_epoch: Its producer epoch.
        control: ``"commit"`` or ``"abort"`` for a control batch, else None.
        records: ``(offset, value)`` per record (none for a control batch); a null value is
            ``b""``.
    """

    base_offset: int
    producer_id: int
    producer_epoch: int
    control: Marker | None = None
    records: tuple[tuple[int, bytes], ...] = ()


@dataclass
class Decided:
    """A partition's records, each ``(offset, value)``, by what the markers made of them; each
    list in offset order."""

    committed: list[tuple[int, bytes]] = field(default_factory=list)
    aborted: list[tuple[int, bytes]] = field(default_factory=list)
    open: list[tuple[int, bytes]] = field(default_factory=list)  # no marker of theirs yet
    markers: int = 0  # control batches seen


def decide(batches: Iterable[LogBatch]) -> Decided:
    """What each record of ``batches`` (one partition, in offset order) became.

    A data batch waits with its producer id; that producer's next control batch commits or
    aborts everything waiting. A marker with nothing waiting decides nothing (a transaction's
    marker goes to every partition added to it, whether a batch of it got there or not).
    """
    pending: dict[int, list[tuple[int, bytes]]] = {}
    out = Decided()
    for batch in batches:
        if batch.control is None:
            pending.setdefault(batch.producer_id, []).extend(batch.records)
            continue
        out.markers += 1
        records = pending.pop(batch.producer_id, [])
        (out.committed if batch.control == "commit" else out.aborted).extend(records)
    for records in pending.values():
        out.open.extend(records)
    for kept in (out.committed, out.aborted, out.open):
        kept.sort()
    return out


@dataclass
class PartitionLog:
    """One partition as read.

    Attributes:
        partition: The partition.
        start_offset: Where its log began (above 0: the broker had dropped the head, as
            librdkafka's mock does past 5 MiB or 100,000 batches a partition).
        end_offset: Its high watermark when read.
        read_to: The offset after the last batch read (below ``end_offset``: the read stopped
            short, the broker sending nothing more).
        batches: Every batch from ``start_offset``, in offset order, control batches included.
    """

    partition: int
    start_offset: int = 0
    end_offset: int = 0
    read_to: int = 0
    batches: list[LogBatch] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether everything up to the high watermark was read."""
        return self.read_to >= self.end_offset


def read_log(bootstrap_servers: Address, topic: str, partition: int, *,
             timeout: float = 30.0) -> list[LogBatch]:
    """Every batch of one partition, from its start to the high watermark, read_uncommitted.

    Args:
        bootstrap_servers: ``"host:port[,host:port...]"`` or a ``(host, port)`` pair; the
            partition's leader is found through Metadata.
        topic: The topic.
        partition: The partition.
        timeout: Seconds for the whole read.

    Returns:
        The batches in offset order, control batches included.

    Raises:
        KafkaTimeoutError: the read took longer than ``timeout``.
        EosError: the broker answered Metadata or Fetch with an error.
    """
    return read_logs(bootstrap_servers, topic, [partition], timeout=timeout)[partition].batches


def read_logs(bootstrap_servers: Address, topic: str, partitions: Iterable[int], *,
              timeout: float = 60.0, release: Callable[[int, int], object] | None = None,
              release_every: int = 256) -> dict[int, PartitionLog]:
    """Several partitions of one topic read whole, each Fetch asking a leader for every
    partition of its own not yet read.

    Args:
        bootstrap_servers: As :func:`read_log`.
        topic: The topic.
        partitions: The partitions.
        timeout: Seconds for the whole read.
        release: Called as ``release(partition, offset)`` every ``release_every`` batches of a
            partition, once everything below ``offset`` is read: the caller may delete it.
            librdkafka's mock answers a Fetch with one batch a partition, found by walking
            its log from the start, so a long log reads in quadratic time unless what was
            read is deleted (:meth:`~eosclient.testing.mock.MockCluster.delete_records`).
        release_every: See ``release``.

    Returns:
        Partition -> what was read.

    Raises:
        KafkaTimeoutError: the read took longer than ``timeout``.
        EosError: the broker answered Metadata or Fetch with an error (e.g. a leader moved
            during the read: read again).
    """
    deadline = time.monotonic() + timeout
    logs = {p: PartitionLog(p) for p in partitions}
    by_leader: dict[tuple[str, int], list[int]] = {}
    with _connect_any(_addresses(bootstrap_servers), timeout) as conn:
        for p in logs:
            leader = _leader_address(conn, TopicPartition(topic, p), _left(deadline, topic))
            by_leader.setdefault(leader, []).append(p)
    for (host, port), led in by_leader.items():
        with BlockingConnection(host, port, timeout=_left(deadline, topic)) as conn:
            _read_from(conn, topic, {p: logs[p] for p in led}, deadline=deadline,
                       release=release, every=release_every)
    return logs


def _read_from(conn: BlockingConnection, topic: str, logs: dict[int, PartitionLog], *,
               deadline: float, release: Callable[[int, int], object] | None,
               every: int) -> None:
    """Fetch ``logs``' partitions from one leader until each is read to its end."""
    todo = dict.fromkeys(logs, 0)  # partition -> the next offset to fetch
    since = dict.fromkeys(logs, 0)  # batches since the last release
    while todo:
        response = conn.request(_fetch(topic, todo), timeout=_left(deadline, topic))
        for data in _partitions_of(response, topic, todo):
            p, log = data.partition_index, logs[data.partition_index]
            if data.error_code == _OFFSET_OUT_OF_RANGE and todo[p] < data.log_start_offset:
                todo[p] = log.start_offset = log.read_to = data.log_start_offset  # head gone
                continue
            if data.error_code:
                raise error_for(ApiKey.FETCH, data.error_code, f"{topic}-{p} at {todo[p]}")
            log.end_offset = data.high_watermark
            fresh = 0
            for batch in decode_batches(data.records, TopicPartition(topic, p),
                                        check_crcs=False).batches:
                if batch.last_offset < todo[p]:
                    continue  # a batch before the fetch offset (a broker may start earlier)
                kept = _batch(batch)
                if kept is not None:
                    log.batches.append(kept)
                todo[p] = log.read_to = batch.last_offset + 1
                fresh += 1
            since[p] += fresh
            if release is not None and since[p] >= every:
                release(p, todo[p])
                since[p] = 0
            if todo[p] >= data.high_watermark or not fresh:
                del todo[p]


def _left(deadline: float, topic: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise KafkaTimeoutError(f"reading {topic} timed out")
    return left


def _batch(batch: RecordBatch) -> LogBatch | None:
    """A decoded batch as a :class:`LogBatch`; None for a marker of a type that decides
    nothing (KRaft's internal control types)."""
    head = (batch.base_offset, batch.producer_id, batch.producer_epoch)
    if batch.is_control:
        marker = _MARKERS.get(batch.control_type)
        return None if marker is None else LogBatch(*head, control=marker)
    return LogBatch(*head, records=tuple((r.offset, r.value or b"") for r in batch.records()))


def _fetch(topic: str, offsets: dict[int, int]) -> FetchRequest:
    topic_cls = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1, max_wait_ms=10, min_bytes=0, max_bytes=_MAX_BYTES, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[topic_cls(topic=topic, partitions=[topic_cls.FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=_MAX_BYTES) for p, offset in offsets.items()])])


def _partitions_of(response: Any, topic: str, asked: dict[int, int]) -> list[Any]:
    if getattr(response, "error_code", 0):
        raise error_for(ApiKey.FETCH, response.error_code)
    found = [data for t in response.responses if t.topic == topic for data in t.partitions
             if data.partition_index in asked]
    if len(found) != len(asked):
        raise ProtocolError(f"the Fetch response for {topic} has partitions "
                            f"{sorted(d.partition_index for d in found)}, not {sorted(asked)}")
    return found
