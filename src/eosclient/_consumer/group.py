"""Consumer group membership and offsets on the consumer's I/O thread.

:class:`GroupCoordinator` drives the sans-IO pieces of :mod:`eosclient._consumer` through the
network client, under the consumer's lock, once per loop step:

* the coordinator lookup (FindCoordinator, :mod:`eosclient._consumer.coordinator`), shared by
  everything below;
* the membership (:mod:`eosclient._consumer.membership`): JoinGroup (with KIP-394's member id
  retry), the leader's assignment, SyncGroup, heartbeats, LeaveGroup (a static member,
  ``group.instance.id``, sends none: it keeps its place when it closes);
* offset jobs (:mod:`eosclient._consumer.offsets`): the application's ``commit()`` and
  ``committed()``, and the committed offsets of newly assigned partitions (``require_stable``).

Like Java's consumer, it talks to the coordinator over a connection of its own (node id
``2**31 - 1 - broker id``), so that a JoinGroup the coordinator holds for the whole rebalance
(Tansu: about 23 s) and Fetches the broker holds for ``fetch.max.wait.ms`` never wait behind
each other. Unlike Java's, JoinGroup and SyncGroup have a second one (node id
``-2**30 - broker id``): a broker answers a connection's requests in order, and the coordinator
holds those two until the rebalance completes, up to the rebalance timeout. A LeaveGroup
queued behind a held JoinGroup (a member closed while joining) was never read: the process
exited, the coordinator waited for the departed member to join, and noida-db, which lets no
session expire during a rebalance, held everybody's JoinGroup for the whole
``max.poll.interval.ms`` (5 minutes). On their own connection, LeaveGroup, heartbeats and offset
commits are answered at once, whatever the rebalance is doing.

What it does not do is touch the application: the membership stops in REVOKING and ASSIGNING,
and the consumer's ``poll()`` runs ``on_revoke`` and ``on_assign`` on the application's thread.
Cooperative (KIP-429), ASSIGNING takes two steps: ``on_revoke`` with just the partitions that
move (dropped from the fetcher; the others go on fetching), then ``on_assign`` with just the new
ones (added beside the kept ones, whose positions and fetched data stay).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from functools import partial
from typing import Final, NamedTuple

from eosclient._consumer.loop import UNCHANGED, IoLoop
from eosclient._consumer.membership import Membership, Send, Settings, State
from eosclient._consumer.offsets import OffsetJob
from eosclient._consumer.partitions import Assignment, Phase
from eosclient._consumer.stand_in import KIND as STAND_IN
from eosclient._core.types import TopicPartition
from eosclient._net.backoff import Backoff
from eosclient._net.client import Answer, NetworkClient
from eosclient._net.steps import Steps, wait_until
from eosclient.config import ConsumerConfig
from eosclient.errors import KafkaConnectionError, KafkaTimeoutError, ResponseTooLargeError

__all__ = ["GroupCoordinator", "RebalanceCallback", "RebalanceStep", "step_callback"]

RebalanceCallback = Callable[[list[TopicPartition]], object]
"""``on_assign(partitions)`` / ``on_revoke(partitions)`` / ``on_lost(partitions)``, called on the
application's thread."""

_COORDINATOR_IDS: Final = 2**31 - 1  # Java: Integer.MAX_VALUE - broker id
_JOIN_IDS: Final = -(2**30)  # JoinGroup and SyncGroup, which the coordinator holds (above)
_HELD: Final = frozenset({"join", "sync"})
_STAND_IN_IDS: Final = -(2**29)  # a stand-in's requests (its JoinGroup is held too)


class RebalanceStep(NamedTuple):
    """What the application's thread does next in a rebalance: revoke or assign these.

    ``lost``: revoking after the member lost its generation (a session or poll-interval
    timeout, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID), so the partitions may already be another
    member's: ``on_lost`` runs, not ``on_revoke`` (KIP-429's ``onPartitionsLost``).
    """

    revoking: bool
    partitions: list[TopicPartition]
    lost: bool = False
    confirming: bool = False  # a stopped static member's on_lost before it joins as new
    partial: bool = False  # cooperative: only these partitions go, the others are kept


def step_callback(step: RebalanceStep, on_assign: RebalanceCallback | None,
                  on_revoke: RebalanceCallback | None,
                  on_lost: RebalanceCallback | None) -> RebalanceCallback | None:
    """The callback ``step`` runs, if any: ``on_lost`` (else ``on_revoke``) for partitions lost
    with the generation, ``on_revoke`` for revoked ones (not for none), ``on_assign`` always."""
    if step.revoking and not step.partitions and not step.confirming:
        return None
    return (on_lost or on_revoke) if step.lost else on_revoke if step.revoking else on_assign


class GroupCoordinator:
    """The group side of one consumer: membership, commits, committed offsets.

    Args:
        config: The consumer's settings (``group.id`` set).
        client: The I/O thread's network client.
        assignment: The partitions (shared under the consumer's lock).
    """

    def __init__(self, config: ConsumerConfig, client: NetworkClient,
                 assignment: Assignment) -> None:
        assert config.group_id is not None
        self.group_id = config.group_id
        self.membership = Membership(Settings(
            group_id=config.group_id, assignors=config.partition_assignment_strategy,
            session_timeout=config.session_timeout_ms / 1000,
            rebalance_timeout=config.max_poll_interval_ms / 1000,
            heartbeat_interval=config.heartbeat_interval_ms / 1000,
            retry_backoff=config.retry_backoff_ms / 1000,
            retry_backoff_max=config.retry_backoff_max_ms / 1000,
            group_instance_id=config.group_instance_id))
        self.lookup = self.membership.lookup
        self.backoff = Backoff(config.retry_backoff_ms / 1000, config.retry_backoff_max_ms / 1000)
        self.jobs: list[OffsetJob] = []  # the application's; it removes them
        self.leaving = False  # a LeaveGroup is in flight
        self.in_callback = False  # the application's thread runs on_assign or on_revoke
        self._client = client
        self._metadata = client.metadata
        self._assignment = assignment
        self._positioning: list[tuple[OffsetJob, dict[TopicPartition, int]]] = []
        self._asked: tuple[frozenset[str], int] | None = None
        self.assignments = 0  # assignments taken (stats())

    # -- the application (under the lock) -------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int]) -> OffsetJob:
        """Start committing ``offsets`` under the current generation."""
        membership = self.membership
        subscribed = membership.has_generation()
        instance_id = membership.settings.group_instance_id
        job = OffsetJob(self.group_id, self.backoff, offsets=offsets,
                        generation=membership.generation if subscribed else -1,
                        member_id=membership.member_id if subscribed else "",
                        group_instance_id=instance_id if subscribed else None)
        self.jobs.append(job)
        return job

    def committed(self, partitions: Iterable[TopicPartition]) -> OffsetJob:
        """Start reading the committed offsets of ``partitions`` (``require_stable``)."""
        job = OffsetJob(self.group_id, self.backoff, partitions=partitions)
        self.jobs.append(job)
        return job

    @property
    def rebalance_due(self) -> bool:
        """Whether the application's thread has a rebalance step to run (revoke or assign),
        outside a callback (a poll() inside ``on_revoke`` does not rebalance again)."""
        return not self.in_callback and (self.membership.state in (State.REVOKING,
                                                                    State.ASSIGNING)
                                         or self.membership.held)

    def start_step(self, assignment: Assignment) -> RebalanceStep | None:
        """The step whose callback the application's thread (or the asyncio front's task) runs
        next, under the lock; None if none is due. :meth:`finish_step` must follow, whatever
        the callback did (:meth:`ConsumerSession.rebalance
        <eosclient._consumer.session.ConsumerSession.rebalance>` runs the two)."""
        if not self.rebalance_due:
            return None
        step = self.rebalance(assignment, time.monotonic())
        self.in_callback = True
        return step

    def finish_step(self, loop: IoLoop, assignment: Assignment, step: RebalanceStep, *,
                    completed: bool = True) -> None:
        """After :meth:`start_step`'s callback, under the lock: revoked partitions are dropped
        and the member joins again; after a confirming step only if its callback returned
        (``completed``): one that raised (a processor found it was replaced) keeps the join
        held."""
        self.in_callback = False
        if step.confirming:
            if completed:
                self.membership.confirmed(time.monotonic())
        elif step.revoking:
            self.revoked(assignment, step, time.monotonic())
        loop.wake()

    def rebalance(self, assignment: Assignment, now: float) -> RebalanceStep:
        """The step to run: the partitions to revoke (still assigned, so that ``on_revoke``
        can commit their positions; cooperative, just those the new assignment moves), or the
        new assignment, installed now (ASSIGNING -> STABLE), each new partition to start from
        its committed offset; the step names only those that are new (eager: all of them)."""
        membership = self.membership
        if membership.held:  # (no partitions: they went with the generation)
            return RebalanceStep(True, list(assignment.states), lost=True, confirming=True)
        if membership.state is State.REVOKING:
            return RebalanceStep(True, list(assignment.states), lost=membership.generation < 0)
        moving = membership.to_revoke()
        if moving:
            return RebalanceStep(True, moving, partial=True)
        partitions = membership.take_assignment(now)
        self.assignments += 1
        new = [tp for tp in partitions if tp not in assignment.states]
        assignment.replace(partitions, committed=True)  # kept partitions keep their state
        self._metadata.want({tp.topic for tp in partitions})
        return RebalanceStep(False, new)

    def revoked(self, assignment: Assignment, step: RebalanceStep, now: float) -> None:
        """``on_revoke`` (or ``on_lost``) has run: drop the step's partitions (cooperative) or
        every partition, and join again (cooperative: after installing the assignment)."""
        if step.partial:
            gone = set(step.partitions)
            assignment.replace([tp for tp in assignment.states if tp not in gone],
                               committed=True)
            self.membership.gave_up(step.partitions)
            return
        assignment.replace([], committed=True)
        if self.membership.state is State.REVOKING:
            self.membership.revoked(now)

    def wait_for(self, job: OffsetJob, loop: IoLoop, deadline: float, what: str,
                 check: Callable[[], None]) -> Steps[dict[TopicPartition, int | None]]:
        """Wait (steps run under the lock) for ``job``; its offsets.

        Raises:
            KafkaTimeoutError: not done by ``deadline`` (a commit may still land).
            EosError: the job's error, classified (``offsets`` module docstring).
        """
        try:
            yield from wait_until(loop, lambda: job.done, deadline, what, check,
                                  cause=lambda: job.last_error, unchanged=UNCHANGED)
        finally:
            self.forget(job)
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def leave(self, loop: IoLoop, deadline: float, *, static_too: bool = False) -> Steps[None]:
        """Leave the group (a static member too if ``static_too``); wait (steps run under the
        lock) until LeaveGroup is answered or ``deadline``."""
        self.membership.leave(time.monotonic(), static_too=static_too)
        with contextlib.suppress(KafkaTimeoutError, ResponseTooLargeError):  # closing closes
            yield from wait_until(loop, lambda: self.left, deadline, "LeaveGroup",
                                  loop.check_alive, unchanged=UNCHANGED)

    @property
    def left(self) -> bool:
        """Whether a LeaveGroup asked for is answered (or was never needed)."""
        return not (self.leaving or self.membership.pending)

    def forget(self, job: OffsetJob) -> None:
        """The application stopped waiting for ``job``."""
        job.cancelled = True
        if job in self.jobs:
            self.jobs.remove(job)

    # -- the I/O thread (under the lock) --------------------------------------------------------

    def step(self, now: float) -> float:
        """Send what is due; return when to be called again at the latest."""
        self._start_positioning()
        self._apply_positioning()
        self._find_coordinator(now)
        for send in self.membership.poll(now, self._counts):
            self._send(send, now)
        timers = [self.membership.next_timer()]
        if self._wants_coordinator():
            timers.append(self.lookup.next_timer())
        for job in self._all_jobs():
            if job.due(now) and self.lookup.node is not None:
                self._send_job(job)
            elif not job.done and not job.in_flight and job.retry_at > now:
                timers.append(job.retry_at)
        return min(timers)

    def _wants_coordinator(self) -> bool:
        return self.membership.wants_coordinator() or any(not j.done for j in self._all_jobs())

    def _all_jobs(self) -> list[OffsetJob]:
        return [*self.jobs, *(job for job, _ in self._positioning)]

    def _find_coordinator(self, now: float) -> None:
        lookup = self.lookup
        if lookup.error is not None:
            self._fail_all()
            return
        if self._wants_coordinator() and lookup.due(now):
            self._client.send(None, lookup.request(), self._on_coordinator)

    def _on_coordinator(self, answer: Answer) -> None:
        now = time.monotonic()
        if answer.error is not None:
            self.lookup.on_failure(now)
            return
        self.lookup.on_response(answer.response, now)
        node = self.lookup.node
        if node is not None:
            self._client.add_node(_COORDINATOR_IDS - node.node_id, node.host, node.port)
            self._client.add_node(_JOIN_IDS - node.node_id, node.host, node.port)
            self._client.add_node(_STAND_IN_IDS - node.node_id, node.host, node.port)

    def _fail_all(self) -> None:
        error = self.lookup.error
        assert error is not None
        if self.membership.error is None:
            self.membership.fail(error, time.monotonic())
        for job in self._all_jobs():
            if not job.done:
                job.error = error

    def _coordinator_id(self) -> int | None:
        node = self.lookup.node
        return None if node is None else _COORDINATOR_IDS - node.node_id

    def _send(self, send: Send, now: float) -> None:
        node = self._coordinator_id()
        if node is None:
            self.membership.on_failure(send, KafkaConnectionError("no coordinator"), now)
            return
        if send.kind in _HELD:
            node += _JOIN_IDS - _COORDINATOR_IDS
        elif send.kind == STAND_IN:
            node += _STAND_IN_IDS - _COORDINATOR_IDS
        if send.kind == "leave":
            self.leaving = True
        self._client.send(node, send.request, partial(self._on_membership, send),
                          timeout=send.timeout)

    def _on_membership(self, send: Send, answer: Answer) -> None:
        now = time.monotonic()
        if send.kind == "leave":
            self.leaving = False
        if answer.error is not None:
            self.membership.on_failure(send, answer.error, now)
        else:
            self.membership.on_response(send, answer.response, now)

    def _send_job(self, job: OffsetJob) -> None:
        node = self._coordinator_id()
        assert node is not None
        self._client.send(node, job.request(), partial(self._on_job, job))

    def _on_job(self, job: OffsetJob, answer: Answer) -> None:
        now = time.monotonic()
        if answer.error is not None:
            job.on_failure(answer.error, now)
            self.lookup.lost(now)
        elif job.on_response(answer.response, now):
            self.lookup.lost(now)
        elif job.commit and job.error is not None and job.error.code is not None \
                and job.generation == self.membership.generation >= 0:
            self.membership.refused(job.error.code, now)

    # -- committed offsets of new partitions ----------------------------------------------------

    def _start_positioning(self) -> None:
        busy = {tp for _, tokens in self._positioning for tp in tokens}
        tokens = {state.tp: state.token for state in self._assignment
                  if state.phase is Phase.COMMITTED and state.tp not in busy}
        if tokens:
            job = OffsetJob(self.group_id, self.backoff, partitions=tokens)
            self._positioning.append((job, tokens))

    def _apply_positioning(self) -> None:
        left = []
        for job, tokens in self._positioning:
            if not job.done:
                left.append((job, tokens))
                continue
            for tp, token in tokens.items():
                state = self._assignment.states.get(tp)
                if state is None or state.token != token or state.phase is not Phase.COMMITTED:
                    continue
                if job.error is not None:
                    state.fail(job.error)
                elif job.result is not None and job.result.get(tp) is not None:
                    state.seek(job.result[tp] or 0)
                else:
                    self._assignment.no_offset(state)
        self._positioning = left

    # -- metadata for the leader ----------------------------------------------------------------

    def _counts(self, topics: Collection[str]) -> Mapping[str, int] | None:
        """Partition counts of ``topics``; None until the metadata has answered for them (a
        topic it then still lacks counts as having no partitions)."""
        metadata = self._metadata
        counts = {t: metadata.partition_count(t) for t in topics}
        known = {t: n for t, n in counts.items() if n is not None}
        if len(known) == len(counts):
            return known
        wanted = frozenset(topics)
        if self._asked is None or self._asked[0] != wanted:
            metadata.want(wanted)
            # An answer already on its way may not list them: wait for the one after it.
            self._asked = (wanted, metadata.version + (1 if metadata.in_flight else 0))
            return None
        return known if metadata.version > self._asked[1] else None
