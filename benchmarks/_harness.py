"""What the benchmarks need around the clients: topics, a check of what landed, a proxy, a watchdog.

Everything here talks to the broker directly (never through the proxy) with eosclient's
`BlockingConnection` and kafka-python's generated protocol classes, so the check does not depend
on the producer it checks. Nothing here is timed.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Final

from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.record import MemoryRecords

from eosclient._net.blocking import BlockingConnection

_FETCH_MAX_BYTES: Final = 64 * 1024 * 1024
_PARTITION_MAX_BYTES: Final = 16 * 1024 * 1024
_READ_UNCOMMITTED: Final = 0
_READ_COMMITTED: Final = 1
_BATCH_PREFIX: Final = struct.Struct(">qi")
_LAST_DELTA: Final = struct.Struct(">i")
_SETTLE_TIMEOUT: Final = 10.0
_PROXY_SCRIPT: Final = Path(__file__).with_name("_proxy_process.py")


class BenchmarkError(Exception):
    """A run could not be measured or its result did not check out."""


class RunTimeoutError(BenchmarkError):
    """A run passed its watchdog deadline (a hung client)."""


# --- topics -----------------------------------------------------------------------------------


# --- what landed ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Landed:
    """What a topic's log holds, read batch header by batch header up to the high watermark."""

    records: int  # data records in transactional batches
    untransactional: int  # data records outside any transaction (a transactional run has none)
    commits: int  # COMMIT control markers (one per partition per transaction)
    aborts: int  # ABORT control markers
    high_watermarks: int  # the sum over partitions (data records + markers)

    def problem(self, expected: int, transactions: int, partitions: int) -> str | None:
        """Say what is wrong for a run of `transactions` committed transactions, or None."""
        if self.untransactional or self.aborts:
            return f"{self.untransactional} records outside transactions, {self.aborts} aborts"
        if self.records != expected:
            return f"{self.records} records landed, expected {expected}"
        if not transactions <= self.commits <= transactions * partitions:
            return f"{self.commits} commit markers for {transactions} transactions"
        if self.high_watermarks != self.records + self.commits:
            return f"high watermarks sum to {self.high_watermarks}, log holds more or less"
        return None


def check_landed(
    host: str, port: int, topic: str, partitions: int, *, expected: int, transactions: int
) -> Landed:
    """Wait until `topic` holds `expected` committed records in `transactions` transactions.

    Markers may be written just after EndTxn is answered, so the log is read again until it
    settles or `_SETTLE_TIMEOUT` passes.

    Raises:
        BenchmarkError: what landed is not what a correct transactional producer writes.
    """
    deadline = time.monotonic() + _SETTLE_TIMEOUT
    while True:
        landed = read_log(host, port, topic, partitions)
        problem = landed.problem(expected, transactions, partitions)
        if problem is None:
            return landed
        if time.monotonic() > deadline:
            raise BenchmarkError(f"check failed on {topic}: {problem}")
        time.sleep(0.1)


def read_log(host: str, port: int, topic: str, partitions: int) -> Landed:
    """Walk every batch of `topic` (read_uncommitted) and count what it holds."""
    counts = [0, 0, 0, 0]  # records, untransactional, commits, aborts
    high_watermarks = 0
    with BlockingConnection(host, port, timeout=10) as conn:
        for partition in range(partitions):
            high_watermarks += _walk_partition(conn, topic, partition, counts)
    records, untransactional, commits, aborts = counts
    return Landed(records, untransactional, commits, aborts, high_watermarks)


def _walk_partition(conn: BlockingConnection, topic: str, partition: int, counts: list[int]) -> int:
    offset, high_watermark = 0, 1
    while offset < high_watermark:
        data = _fetch(conn, topic, partition, offset)
        if data.error_code != 0:
            raise BenchmarkError(f"Fetch {topic}/{partition}: error {data.error_code}")
        high_watermark = data.high_watermark
        next_offset = _count_batches(data.records or b"", counts)
        if next_offset is None:
            break  # nothing more to read below the high watermark
        offset = next_offset
    return high_watermark


def _fetch(conn: BlockingConnection, topic: str, partition: int, offset: int) -> Any:
    wanted = FetchRequest.FetchTopic.FetchPartition(
        partition=partition,
        fetch_offset=offset,
        log_start_offset=-1,
        partition_max_bytes=_PARTITION_MAX_BYTES,
    )
    # max_wait_ms 0 would answer at once, but Tansu then answers with no topics at all.
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=10,
        min_bytes=0,
        max_bytes=_FETCH_MAX_BYTES,
        isolation_level=_READ_UNCOMMITTED,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[wanted])],
        forgotten_topics_data=[],
        rack_id="",
    )
    [answer] = conn.request(request, timeout=30).responses
    [data] = answer.partitions
    return data


def fetch_floor(host: str, port: int, topic: str, partitions: int) -> tuple[int, float]:
    """The broker's part of reading ``topic`` read_committed from offset 0: one connection,
    every partition in each Fetch, nothing decoded (the batches are walked header by header
    for the next offset). Returns the bytes fetched and the seconds it took, a floor that no
    client asking for every partition in each Fetch (all measured here do) can go below: what
    is above it is the client's own."""
    offsets, ends = [0] * partitions, [1] * partitions
    fetched = 0
    with BlockingConnection(host, port, timeout=30) as conn:
        start = time.perf_counter()
        while any(o < e for o, e in zip(offsets, ends, strict=True)):
            request = FetchRequest(
                replica_id=-1, max_wait_ms=10, min_bytes=0, max_bytes=_FETCH_MAX_BYTES,
                isolation_level=_READ_COMMITTED, session_id=0, session_epoch=-1,
                topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=p, fetch_offset=offsets[p], log_start_offset=-1,
                        partition_max_bytes=_PARTITION_MAX_BYTES)
                    for p in range(partitions) if offsets[p] < ends[p]])],
                forgotten_topics_data=[], rack_id="")
            [answer] = conn.request(request, timeout=30).responses
            for data in answer.partitions:
                raw = data.records or b""
                fetched += len(raw)
                ends[data.partition_index] = data.last_stable_offset
                pos = 0
                while pos + 27 <= len(raw):  # base offset, length, ..., last offset delta
                    base, length = _BATCH_PREFIX.unpack_from(raw, pos)
                    if pos + 12 + length > len(raw):
                        break
                    (delta,) = _LAST_DELTA.unpack_from(raw, pos + 23)
                    offsets[data.partition_index] = base + delta + 1
                    pos += 12 + length
        return fetched, time.perf_counter() - start


def _count_batches(raw: bytes, counts: list[int]) -> int | None:
    """Add what the batches in `raw` hold to `counts`; return the offset after the last one."""
    records = MemoryRecords(raw)
    next_offset = None
    while (batch := records.next_batch()) is not None:
        next_offset = batch.next_offset
        if batch.is_control_batch:
            for marker in batch:
                counts[2 if marker.commit else 3] += 1
        elif batch.is_transactional:
            counts[0] += batch.records_count
        else:
            counts[1] += batch.records_count
    return next_offset


# --- round trip through the proxy --------------------------------------------------------------


def measured_round_trip(host: str, port: int, samples: int = 50) -> float:
    """Median seconds for one ApiVersions exchange on an open connection to `host:port`."""
    times = []
    with BlockingConnection(host, port, timeout=10) as conn:
        for _ in range(samples):
            start = time.perf_counter()
            conn.request(ApiVersionsRequest(client_software_name="bench",
                                            client_software_version="0"))
            times.append(time.perf_counter() - start)
    return statistics.median(times)


# --- the proxy, in a process of its own --------------------------------------------------------


class ProxyProcess:
    """`KafkaProxy` run in a child process, so its event loop does not share the client's GIL.

    Stopped by closing its stdin (it exits), then SIGKILL to its pid if it lingers.
    """

    def __init__(self, upstream_host: str, upstream_port: int, latency: float,
                 tls: Tls | None = None, *, precise: bool = False) -> None:
        front = [str(tls.certs.server_cert), str(tls.certs.server_key)] if tls else []
        flags = ["--precise"] if precise else []
        self._proc = subprocess.Popen(
            [sys.executable, str(_PROXY_SCRIPT), *flags, upstream_host, str(upstream_port),
             str(latency), *front],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            self.port = self._read_port(timeout=15)
        except BaseException:
            self.stop()
            raise
        self.host = "127.0.0.1"

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the proxy's listener."""
        return f"{self.host}:{self.port}"

    def take_timings(self, timeout: float = 15.0) -> list[list[Any]]:
        """The proxy's `Timing` rows since the last call (fields: `_proxy_process.FIELDS`).

        Raises:
            BenchmarkError: the proxy process did not answer in time, or answered nonsense.
        """
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(b"timings\n")
        self._proc.stdin.flush()
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        line = self._proc.stdout.readline() if ready else b""
        try:
            rows: list[list[Any]] = json.loads(line)["timings"]
        except (ValueError, KeyError, TypeError) as exc:
            raise BenchmarkError(f"the proxy process answered {line[:200]!r}") from exc
        return rows

    def stop(self) -> None:
        """Stop the proxy process; idempotent."""
        if self._proc.poll() is not None:
            return
        assert self._proc.stdin is not None
        with contextlib.suppress(OSError):
            self._proc.stdin.close()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGKILL)
            self._proc.wait(5)

    def _read_port(self, timeout: float) -> int:
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        line = self._proc.stdout.readline() if ready else b""
        if not line.strip().isdigit():
            raise BenchmarkError(f"the proxy process did not start (said {line!r})")
        return int(line)


# --- TLS: one front, the same settings for every client ---------------------------------------


@dataclass(frozen=True, slots=True)
class Tls:
    """A throwaway CA and the TLS front's certificate (``--tls``), and how clients trust it.

    Every client verifies the front's certificate against the CA and checks its host name
    (127.0.0.1): librdkafka's settings for eosclient and confluent-kafka, their equivalent for
    kafka-python.
    """

    certs: Any  # eosclient.testing.security.Certificates

    @property
    def settings(self) -> dict[str, str]:
        """eosclient's and confluent-kafka's settings (the same dict)."""
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.certs.ca)}

    @property
    def kafka_python(self) -> dict[str, Any]:
        """kafka-python's keywords for the same."""
        return {"security_protocol": "SSL", "ssl_cafile": str(self.certs.ca),
                "ssl_check_hostname": True}


def make_tls(directory: Path) -> Tls:
    """Certificates for a TLS front in ``directory`` (needs the ``test`` extra)."""
    from eosclient.testing.security import make_certificates  # noqa: PLC0415 - --tls only

    return Tls(make_certificates(directory))


def tls_front(stack: contextlib.ExitStack, host: str, port: int) -> tuple[str, Tls]:
    """A TLS front before ``host:port`` for the length of ``stack``: its bootstrap servers and
    the settings every client is given."""
    progress("starting the TLS front")
    tls = make_tls(Path(stack.enter_context(tempfile.TemporaryDirectory())))
    front = ProxyProcess(host, port, 0.0, tls)
    stack.callback(front.stop)
    return front.bootstrap_servers, tls


# --- command lines ------------------------------------------------------------------------------


def fill_defaults(args: Any, defaults: dict[str, Any]) -> None:
    """Give every option in ``defaults`` that the command line left at None its default."""
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def progress(message: str) -> None:
    """One progress line on stderr (the results go to stdout)."""
    print(f"... {message}", file=sys.stderr, flush=True)


# --- a watchdog for hung clients ----------------------------------------------------------------


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise `RunTimeoutError` in the main thread if the block runs longer than `seconds`.

    A client that waits without a deadline would otherwise hang the whole benchmark. The signal
    interrupts Python-level waits; a wait inside C code ends when that code returns.
    """

    def expire(signum: int, frame: FrameType | None) -> None:
        raise RunTimeoutError(f"run took longer than {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
