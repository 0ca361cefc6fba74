"""The cluster nemesis's front targets: a read_committed consumer, and ExactlyOnceProcessor
workers, through a :class:`~eosclient.testing.cluster_front.ClusterFront` over a real broker
while a seeded schedule moves leaders and coordinators and bounces nodes.

Theory of operation. The schedule is :func:`eosclient.testing.cluster_nemesis.make_schedule`'s
with ``target="consumer"`` or ``"processor"``: a fault every 0.3-1.2 s, one of a partition's
leader moving to another node (partition p of every topic of the run), the coordinator of the
transactional ids or of the consumer group moving to another node, or one node down for
0.5-2.5 s (one at a time; moves only to nodes that are up). It is played by the same
``Player`` thread as the producer target's, on the front instead of the mock.

The writer is the producer target's application loop (``Loop``), through the front too:
transactions of 20 records (record i to partition i % 6, value ``b"txn/record"``) into a
6-partition input topic, one every :data:`PACE` seconds, every other one aborted after its
sends. Its own verdict is the producer target's (:func:`~eosclient.testing.cluster_nemesis.judge`
on the input's log, read raw from the broker and decided by the markers), so a run also checks
the producer through the front.

* ``consumer``: one consumer (``ReadCommittedConsumer``, or ``AsyncReadCommittedConsumer`` on
  an event loop of its own thread) in a group (``subscribe``) polls and commits after every
  poll that returned records. It must read exactly the committed records of the log (decided
  by the markers, not by the consumer's code): none lost, none twice, none of an aborted
  transaction, in offset order per partition (``judge_reads``). Liveness: every committed
  transaction read within :data:`READ_LAG_LIMIT` seconds of its commit returning, no poll call
  longer than :data:`POLL_LIMIT`, and no consumer re-created (a fatal error).
* ``processor``: :data:`WORKERS` workers (threads; each its own transactional id and
  ``group.instance.id``, one group; ``AsyncExactlyOnceProcessor`` on an event loop per worker
  with ``asyncio``) copy input to output. :mod:`eosclient.testing.checker` must count 0 lost,
  duplicated, aborted-read, unexpected and out of order; the group's committed offsets must
  reach the end of every input partition within :data:`DRAIN` seconds of the faults' end;
  no ``commit_transaction()`` of a worker may take longer than
  :data:`~eosclient.testing.cluster_nemesis.SLOWEST_COMMIT_LIMIT` (each call is timed: the
  producer classes' method is wrapped for the run); no worker's ``run()`` may raise (the
  worker makes a new processor, counted as re-created) or fail to return within
  :data:`STOP_LIMIT` seconds of ``stop()`` (wedged).

Both start with a warm-up: the writer's first transaction commits before the faults start,
and the consumer must have read it (or the group committed it) within :data:`WARMUP` seconds,
so a join (Tansu holds each for about half the session timeout) is not taken for a stall.

Evidence: the DEBUG lines of every ``eosclient`` logger (the front's moves and refusals
included) on the schedule's clock, printed around the worst window (the slowest read or
commit, or a wedge) with the schedule as drawn and as played, and the replay command.

This module is the run (the front, the writer, the schedule played, the log read); each target
is a module of its own (``_front_consumer``, ``_front_processor``) made to
``_front_target``'s interface, and judged by ``_front_verdict``.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Final

from eosclient.testing.brokers import RunningBroker
from eosclient.testing.cluster_front import ClusterFront
from eosclient.testing.cluster_nemesis._capture import Capture, restamp
from eosclient.testing.cluster_nemesis._front_consumer import ConsumerTarget
from eosclient.testing.cluster_nemesis._front_processor import ProcessorTarget
from eosclient.testing.cluster_nemesis._front_target import READ_TIMEOUT, Target
from eosclient.testing.cluster_nemesis._front_verdict import (
    FRONT_TARGETS,
    FrontNemesisResult,
    FrontTarget,
)
from eosclient.testing.cluster_nemesis._schedule import (
    PARTITIONS,
    CoordinatorKey,
    Player,
    Schedule,
    make_schedule,
)
from eosclient.testing.cluster_nemesis._verdict import ClusterNemesisResult, Txn, judge
from eosclient.testing.cluster_nemesis._writer import (
    CLOSE_TIMEOUT,
    Abort,
    EosClient,
    Fatal,
    Loop,
    Retry,
)
from eosclient.testing.marker_log import PartitionLog, read_logs
from eosclient.testing.topics import create_topic

__all__ = ["PACE", "WARMUP", "WORKERS", "run_front_nemesis"]

log = logging.getLogger("eosclient.testing.cluster_nemesis")

PACE: Final = 0.1  # seconds the writer waits after each transaction
WORKERS: Final = 3
WARMUP: Final = {"noida": 20.0, "tansu": 60.0}
_CAPTURED: Final = ("eosclient",)
_REFUSALS: Final = {6: "NOT_LEADER_OR_FOLLOWER", 16: "NOT_COORDINATOR"}


# -- the cluster: the front --------------------------------------------------------------------

class _Front:
    """A schedule's faults on a front: leaders of every topic of the run, the coordinators of
    every transactional id (``"transaction"``) or of the group."""

    def __init__(self, front: ClusterFront, topics: Sequence[str], txn_ids: Sequence[str],
                 group: str) -> None:
        self._front, self._topics, self._txn_ids, self._group = front, topics, txn_ids, group
        for txn_id in txn_ids:  # where the schedule starts them
            front.move_coordinator("transaction", txn_id, 1)
        front.move_coordinator("group", group, 1)

    def leader(self, partition: int, broker: int) -> None:
        for topic in self._topics:
            self._front.move_leader(topic, partition, broker)

    def coordinator(self, key: CoordinatorKey, broker: int) -> None:
        for txn_id in self._txn_ids if key == "transaction" else ():
            self._front.move_coordinator("transaction", txn_id, broker)
        if key == "group":
            self._front.move_coordinator("group", self._group, broker)

    def down(self, broker: int) -> None:
        self._front.set_node_down(broker)

    def up(self, broker: int) -> None:
        self._front.set_node_up(broker)

    def error(self, api: int, code: int) -> None:
        raise ValueError("the front targets push no errors")


# -- the run -----------------------------------------------------------------------------------

def run_front_nemesis(target: FrontTarget, broker: RunningBroker, *, seed: int = 1,
                      duration: float = 30.0, schedule: Schedule | None = None,
                      asyncio: bool = False, workers: int = WORKERS) -> FrontNemesisResult:
    """One run of ``target`` through a fresh front over ``broker`` (shared is fine: the run's
    topics, group and ids are its own) under ``seed``'s schedule (or ``schedule``).

    Args:
        target: ``"consumer"`` or ``"processor"``.
        broker: The broker.
        seed: Draws the schedule unless ``schedule`` is given.
        duration: Seconds of the writer and the faults.
        schedule: Play this schedule (drawn for a front target) instead of drawing one.
        asyncio: eosclient.aio's consumer or processor instead of the sync one.
        workers: The processor target's workers.

    Returns:
        The result; a run that could not be played or judged has ``error`` set.

    Raises:
        ValueError: an unknown ``target``, or a schedule drawn for another kind of target.
    """
    if target not in FRONT_TARGETS:
        raise ValueError(f"target must be one of {', '.join(FRONT_TARGETS)}, not {target!r}")
    schedule = schedule or make_schedule(seed, duration=duration, target=target)
    if schedule.target == "producer":
        raise ValueError("a producer schedule pushes errors the front cannot: draw one with "
                         "target='consumer' or 'processor'")
    started = time.monotonic()
    tag = f"cn-{target}-{schedule.seed}-{uuid.uuid4().hex[:8]}"
    feed = ClusterNemesisResult("eosclient", schedule)
    result = FrontNemesisResult(target, broker.kind, asyncio, feed)
    result.input_topic = create_topic(broker, f"{tag}-in", PARTITIONS)
    if target == "processor":
        result.output_topic = create_topic(broker, f"{tag}-out", PARTITIONS)
    run = _FrontRun(result, broker, tag, workers)
    with ClusterFront(broker.host, broker.port) as front, \
            Capture(_CAPTURED) as capture:
        try:
            run.play(front, capture)
        except (Retry, Abort, Fatal) as exc:
            result.error = f"the writer's init_transactions(): {exc}"
        except Exception as exc:  # a harness or client bug: the table still gets its row
            log.exception("the %s run of seed %d failed", target, schedule.seed)
            result.error = result.error or f"the run raised {exc!r}"
        finally:
            feed.log_lines = list(capture.lines)
            result.refusals = {f"{_REFUSALS.get(code, code)}": n for code, n in sorted(
                Counter(r.refused for r in front.seen if r.refused is not None).items())}
    result.seconds = round(time.monotonic() - started, 1)
    return result


class _FrontRun:
    """One run in progress (see the module docstring)."""

    def __init__(self, result: FrontNemesisResult, broker: RunningBroker, tag: str,
                 workers: int) -> None:
        self.result, self.broker, self.tag = result, broker, tag
        self.group = f"{tag}-group"
        self.feed_id = f"{tag}-feed"
        self.worker_ids = [f"{tag}-w{n}" for n in range(workers)] \
            if result.target == "processor" else []
        self.topics = [t for t in (result.input_topic, result.output_topic) if t]

    def play(self, front: ClusterFront, capture: Capture) -> None:
        result, feed, schedule = self.result, self.result.feed, self.result.schedule
        cluster = _Front(front, self.topics, [self.feed_id, *self.worker_ids], self.group)
        servers = front.bootstrap_servers
        loop = Loop(feed, lambda: EosClient(servers, topic=result.input_topic,
                                            transactional_id=self.feed_id),
                    schedule.duration, pace=PACE, abort_every=2)
        nemesis: Player | None = None
        try:
            loop.init()
            capture.clock = loop.clock = time.monotonic()
            with self._target(servers) as target:
                first = Txn(0, 0.0)
                feed.txns.append(first)
                loop.transaction(first)
                if not target.warm(WARMUP.get(self.broker.kind, 60.0)):
                    result.liveness.append(f"the first transaction was not "
                                           f"{target.done_word} within "
                                           f"{WARMUP.get(self.broker.kind, 60.0):g} s")
                    return
                restamp(capture, time.monotonic())
                loop.clock = capture.clock
                target.clock(loop.clock)
                nemesis = Player(cluster, schedule, loop.clock, feed.events)
                nemesis.start()
                loop.run()
                feed.loop_seconds = round(loop.now(), 3)
                nemesis.stop()
                loop.close(CLOSE_TIMEOUT)
                logs = _read_raw(self.broker.bootstrap_servers, result.input_topic)
                feed.counts = judge(feed.txns, logs, topic=result.input_topic)
                target.finish(logs)
        finally:
            if nemesis is not None:
                nemesis.stop()
                if nemesis.error is not None:
                    result.error = result.error or f"the nemesis failed: {nemesis.error!r}"
            loop.close(CLOSE_TIMEOUT)

    @contextlib.contextmanager
    def _target(self, servers: str) -> Iterator[Target]:
        target: Target = (ConsumerTarget(self, servers) if self.result.target == "consumer"
                          else ProcessorTarget(self, servers))
        try:
            yield target
        finally:
            target.close()


def _read_raw(servers: str, topic: str) -> dict[int, PartitionLog]:
    """Every partition of ``topic`` read whole and raw, straight from the broker; partitions
    left short are read again (Tansu once answered a Fetch from offset 0 with no records for
    one partition of six, its high watermark at 248, and read_logs takes an empty answer as
    the end)."""
    deadline = time.monotonic() + READ_TIMEOUT
    logs = read_logs(servers, topic, range(PARTITIONS), timeout=READ_TIMEOUT)
    while short := [p for p, raw in logs.items() if not raw.complete]:
        if time.monotonic() > deadline:
            break
        log.info("cluster nemesis: %s partitions %s read short; reading them again", topic,
                 short)
        time.sleep(0.2)
        logs.update(read_logs(servers, topic, short,
                              timeout=max(1.0, deadline - time.monotonic())))
    return logs
