"""The producer target: one client's transactional producer on a fresh librdkafka mock of three
brokers, the schedule played on the mock, the log read raw and judged
(:mod:`eosclient.testing.cluster_nemesis` has the theory of operation).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import Counter
from typing import Final

from eosclient.errors import ApiKey, EosError
from eosclient.testing.cluster_nemesis._capture import Capture
from eosclient.testing.cluster_nemesis._schedule import (
    BROKERS,
    PARTITIONS,
    TOPIC,
    TRANSACTIONAL_ID,
    CoordinatorKey,
    Player,
    Schedule,
    make_schedule,
)
from eosclient.testing.cluster_nemesis._verdict import (
    CALL_TIMEOUT,
    GIVE_UP,
    ClusterNemesisResult,
    judge,
)
from eosclient.testing.cluster_nemesis._writer import (
    CK_LOGGER,
    CLIENTS,
    CLOSE_TIMEOUT,
    Abort,
    AsyncLoop,
    Fatal,
    Loop,
    Retry,
    open_loop,
)
from eosclient.testing.marker_log import read_logs
from eosclient.testing.mock import MockCluster, MockClusterError

__all__ = ["run_cluster_nemesis"]

log = logging.getLogger("eosclient.testing.cluster_nemesis")

_READ_TIMEOUT: Final = 120.0
_CAPTURED: Final = ("eosclient.net", "eosclient.producer")
_REQUESTS_AROUND: Final = 0.3  # seconds of mock requests kept either side of a window
_MAX_REQUEST_LINES: Final = 20_000


class _MockCluster:
    """The producer target's cluster: the mock, its one topic and transactional id."""

    def __init__(self, mock: MockCluster) -> None:
        self._mock = mock

    def leader(self, partition: int, broker: int) -> None:
        self._mock.set_partition_leader(TOPIC, partition, broker)

    def coordinator(self, key: CoordinatorKey, broker: int) -> None:
        self._mock.set_coordinator("transaction", TRANSACTIONAL_ID, broker)

    def down(self, broker: int) -> None:
        self._mock.set_broker_down(broker)

    def up(self, broker: int) -> None:
        self._mock.set_broker_up(broker)

    def error(self, api: int, code: int) -> None:
        self._mock.push_request_errors(api, code)


def run_cluster_nemesis(client: str, *, seed: int = 1, duration: float = 30.0,
                        schedule: Schedule | None = None,
                        give_up: float = GIVE_UP,
                        call_timeout: float = CALL_TIMEOUT) -> ClusterNemesisResult:
    """One run of ``client`` (one of :data:`CLIENTS`) on a fresh mock cluster under ``seed``'s
    schedule (or ``schedule``), judged from the log.

    Args:
        client: ``"eosclient"``, ``"eosclient-asyncio"`` or ``"confluent-kafka"``.
        seed: Draws the schedule (:func:`make_schedule`) unless ``schedule`` is given.
        duration: Seconds of the loop (and of the schedule drawn).
        schedule: Play this schedule instead of drawing one.
        give_up: Seconds of retrying one commit, abort or init before it counts as wedged.
        call_timeout: The timeout of each ``commit_transaction`` and ``abort_transaction``
            call; one that times out is called again until ``give_up``.

    Returns:
        The result; a run that could not be played or read has ``error`` set.

    Raises:
        ValueError: an unknown ``client``, or a schedule drawn for another target.
    """
    if client not in CLIENTS:
        raise ValueError(f"client must be one of {', '.join(CLIENTS)}, not {client!r}")
    schedule = schedule or make_schedule(seed, duration=duration)
    if schedule.target != "producer":
        raise ValueError(f"a schedule drawn for the {schedule.target} target has no errors to "
                         "push and moves a group's coordinator: draw one for 'producer'")
    result = ClusterNemesisResult(client, schedule, give_up=give_up, call_timeout=call_timeout)
    started = time.monotonic()
    with MockCluster(BROKERS) as cluster, Capture([*_CAPTURED, CK_LOGGER]) as capture:
        cluster.create_topic(TOPIC, PARTITIONS, replication_factor=BROKERS)
        for partition in range(PARTITIONS):
            cluster.set_partition_leader(TOPIC, partition, partition % BROKERS + 1)
        cluster.set_coordinator("transaction", TRANSACTIONAL_ID, 1)
        servers = cluster.bootstrap_servers
        loop: Loop | AsyncLoop | None = None
        nemesis: Player | None = None
        try:
            loop = open_loop(client, servers, result, schedule.duration)
            loop.init()
            capture.clock = loop.clock = time.monotonic()
            nemesis = Player(_MockCluster(cluster), schedule, loop.clock, result.events)
            cluster.start_request_tracking()
            nemesis.start()
            loop.run()
        except (Retry, Abort, Fatal) as exc:
            result.error = f"init_transactions(): {exc}"
        except Exception as exc:  # a harness or client bug: the table still gets its row
            log.exception("the %s run of seed %d failed", client, schedule.seed)
            result.error = f"the loop raised {exc!r}"
        finally:
            if loop is not None and nemesis is not None:
                result.loop_seconds = round(loop.now(), 3)
            if nemesis is not None:
                nemesis.stop()
                if nemesis.error is not None:
                    result.error = result.error or f"the nemesis failed: {nemesis.error!r}"
            if loop is not None:
                loop.close(CLOSE_TIMEOUT)
                _take_requests(cluster, result, loop.clock)
        try:
            for partition in range(PARTITIONS):  # one Fetch reads all six (see marker_log)
                cluster.set_partition_leader(TOPIC, partition, 1)
            with _Deleter(cluster) as deleter:
                logs = read_logs(servers, TOPIC, range(PARTITIONS), timeout=_READ_TIMEOUT,
                                 release=deleter.delete)
            result.counts = judge(result.txns, logs)
        except EosError as exc:
            result.error = result.error or f"reading the log: {exc!r}"
        result.log_lines = list(capture.lines)
    result.seconds = round(time.monotonic() - started, 1)
    return result


class _Deleter(threading.Thread):
    """Deletes what the reader has read, beside it: a mock control call waits for the mock's
    thread, which an idle cluster may leave asleep for up to a second (its wake-up can be
    lost), while the reader's next Fetch, sent meanwhile, wakes it at once."""

    def __init__(self, cluster: MockCluster) -> None:
        super().__init__(name="cluster-nemesis-deleter", daemon=True)
        self._cluster = cluster
        self._todo: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()

    def delete(self, partition: int, offset: int) -> None:
        self._todo.put((partition, offset))

    def run(self) -> None:
        while (item := self._todo.get()) is not None:
            with contextlib.suppress(MockClusterError):  # a read that failed says why
                self._cluster.delete_records(TOPIC, *item)

    def __enter__(self) -> _Deleter:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._todo.put(None)
        self.join()  # before the cluster is closed: a call racing close() reaches freed memory


def _api_name(key: int) -> str:
    try:
        return ApiKey(key).label
    except ValueError:
        return f"API {key}"


def _take_requests(cluster: MockCluster, result: ClusterNemesisResult, clock: float) -> None:
    """Count the requests the brokers read during the loop, by API, and keep those read during
    ``result``'s windows (and just around them) as lines on the schedule's clock."""
    windows = [(low - _REQUESTS_AROUND, high + _REQUESTS_AROUND)
               for low, high in result.windows()]
    counts: Counter[int] = Counter()
    lines = []
    for request in cluster.requests():
        counts[request.api_key] += 1
        t = request.at - clock
        if any(low <= t <= high for low, high in windows):
            lines.append(f"t={t:.3f}s mock broker {request.broker_id} read "
                         f"{_api_name(request.api_key)}")
    cluster.stop_request_tracking()
    result.request_lines = lines[-_MAX_REQUEST_LINES:]
    result.requests_by_api = {_api_name(key): n for key, n in sorted(counts.items())}
