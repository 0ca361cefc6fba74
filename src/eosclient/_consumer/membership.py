"""Consumer group membership as a state machine: responses and time in, requests out. No I/O.

Theory of operation
-------------------
The classic (eager) group protocol, as Java's ``AbstractCoordinator`` runs it. A member finds the
group's coordinator (FindCoordinator), joins (JoinGroup: its subscription, the assignors it
offers), and waits until every member has joined; the coordinator names a leader, and the leader
runs the chosen assignor over everybody's subscriptions and sends the result with its SyncGroup;
every member's SyncGroup answer carries its own partitions. Then the member heartbeats. When a
member joins or leaves, the coordinator answers heartbeats with REBALANCE_IN_PROGRESS and every
member must join again, giving up *all* its partitions first (eager: no partition is ever owned
by two members, at the price of a pause).

Giving up and taking partitions involve the application: it revokes (``on_revoke``, commit
what it processed) before the member joins again, and installs the new assignment (fetch the
committed offsets, ``on_assign``) after SyncGroup. Both run on the application's thread inside
``poll()``, never on the I/O thread, so the machine has two states that wait for it: REVOKING
and ASSIGNING. Every change of state goes through :meth:`Membership._transition` and the table
:data:`TABLE`; an application call the table does not list is a bug (``IllegalStateError``), a
broker answer it does not list is stale and ignored (answers carry the join attempt they belong
to, so an answer from before a rejoin never moves the machine).

Error codes are classified by :func:`eosclient.errors.error_for` only; a retriable code then picks
the way to retry: the coordinator moved (15, 16: find it again), the group moved on (27
REBALANCE_IN_PROGRESS: join again; 22 ILLEGAL_GENERATION: with a new generation; 25
UNKNOWN_MEMBER_ID: with a new member id), KIP-394's MEMBER_ID_REQUIRED (79: join again at once
with the member id the answer gives), or anything else (after the retry backoff). A fatal code
(23 INCONSISTENT_GROUP_PROTOCOL, 24 INVALID_GROUP_ID, 26 INVALID_SESSION_TIMEOUT, 30, 81, ...)
puts the machine in FAILED, and the consumer raises it.

Cooperative rebalancing (KIP-429) is the same conversation with a different contract about
what a member holds, as Java's ``ConsumerCoordinator`` runs it for the COOPERATIVE protocol. A
member follows it when every assignor it offers supports it (only ``cooperative-sticky`` does:
:data:`~eosclient._consumer.assignors.COOPERATIVE`); offering an eager one beside it keeps the
member eager, which is the first step of KIP-429's rolling upgrade (docs/consumer.md). The
transitions that differ are the rows of :data:`COOPERATIVE_TABLE`:

* asked to rejoin, a member joins *keeping* its partitions (no REVOKING): its subscription (v3)
  says what it owns and in which generation, and the application goes on fetching and
  committing them while the rebalance runs (the JoinGroup or SyncGroup in flight keeps its
  session, so commits under its generation go on too: :meth:`Membership.in_generation`);
* the leader runs ``cooperative-sticky``: the sticky target, less every partition that another
  member still claims (:func:`~eosclient._consumer.assignors.cooperative_handover`);
* after SyncGroup (ASSIGNING) the application first revokes only what it holds and the new
  assignment no longer lists (:meth:`Membership.to_revoke`, ``on_revoke``), then installs the
  assignment and is told only what is new (``on_assign``, called even with nothing new, as
  KIP-429 says); if it revoked anything it joins again at once (CALL_HANDED_OVER), and that
  second rebalance, finding those partitions claimed by nobody, hands them to their new owners;
* a member that lost its generation (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, its session or poll
  interval ran out, a stopped process) may already have been replaced: its partitions are lost,
  not revoked (REVOKING with ``on_lost``, whatever state it was in), and it joins owning none.

Members of both protocols may share a group once ``cooperative-sticky`` is what the group
chose: an eager member revokes everything before joining, claims nothing, and its former
partitions move at once.

Three broker facts bend it (each explained where it is handled): noida-db refuses a commit
under the old generation as soon as a member joins (a cooperative member then rejoins keeping
its partitions: :meth:`Membership.refused`); noida-db never answers the followers' JoinGroup if
the leader's next one comes first (a leader's second rejoin waits a heartbeat interval:
:meth:`Membership.take_assignment`); Tansu answers a static member's second rejoin with the
generation it was in (the member leaves and joins anew: ``_on_joined``).

Liveness: a member whose heartbeats have gone unanswered for ``session.timeout.ms`` gives up its
generation and joins again, with the member id it had (the coordinator says 25
UNKNOWN_MEMBER_ID if it did drop the member); one whose application has not called ``poll()``
for ``max.poll.interval.ms`` leaves the group (KIP-62), and joins again at its next ``poll()``.
The generation and member id are what KIP-447 fencing needs
(``send_offsets_to_transaction(..., consumer.group_metadata())``).

Static membership (KIP-345, ``group.instance.id``): every JoinGroup, SyncGroup and Heartbeat
carries the instance id, and the coordinator keeps the member's place (and its partitions) for
``session.timeout.ms`` across a restart: a new member with the same instance id takes over at
once, and the one it replaced is answered 82 FENCED_INSTANCE_ID (a :class:`FencedError`:
FAILED). So a static member never sends LeaveGroup, neither on close nor when the poll interval
runs out, as Java's ``AbstractCoordinator.maybeLeaveGroup`` does not: leaving would hand its
partitions to the others just before it comes back. Nor does a static member ever forget its
member id while the process lives (Java does, after the poll interval): a process paused past
the session timeout (GC, a stopped VM) may have been replaced meanwhile, and a JoinGroup with an
empty member id and the instance id would fence the live replacement. With the old member id it
is the paused process that the coordinator fences.

A static member that is told it was replaced (a processor whose producer was fenced: a newer
instance took its ``transactional.id``) or that is closed for good (``close(leave_group=True)``)
does leave, under its member id alone, without the instance id: the coordinator removes that
member id if the group still holds it, and nothing else (Kafka; noida-db and Tansu alike, which
look at the member id only). Tansu does not always expire a static member that stopped
heartbeating, and kept a replaced one's partitions assigned to it for good (nemesis Tansu
seed 2, asyncio); on Tansu a replacement may share the member id of the one it replaced, and
the live one then joins again (UNKNOWN_MEMBER_ID): one rebalance.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Final

from eosclient._consumer import protocol as wire
from eosclient._consumer.assignors import (
    ASSIGNORS,
    COOPERATIVE,
    COOPERATIVE_STICKY,
    STICKY,
    Claim,
)
from eosclient._consumer.coordinator import CoordinatorLookup
from eosclient._consumer.group_table import (
    _HEARTBEATING,
    _MEMBER,
    COOPERATIVE_TABLE,
    TABLE,
    Input,
    Send,
    Settings,
    State,
)
from eosclient._consumer.stand_in import KIND as STAND_IN
from eosclient._consumer.stand_in import StandIn
from eosclient._core.types import TopicPartition
from eosclient._net.backoff import Backoff
from eosclient.errors import (
    ApiKey,
    EosError,
    IllegalStateError,
    ProtocolError,
    RetriableError,
    error_for,
)

__all__ = ["COOPERATIVE_TABLE", "MOVED_ON", "TABLE", "Input", "Membership", "Send", "Settings",
           "State"]

Counts = Callable[[Collection[str]], Mapping[str, int] | None]
"""Partition counts of the topics asked for; None while the metadata is not there yet."""

_NOT_COORDINATOR: Final = frozenset({15, 16})  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
_ILLEGAL_GENERATION: Final = 22
_UNKNOWN_MEMBER_ID: Final = 25
_REBALANCE_IN_PROGRESS: Final = 27
_MEMBER_ID_REQUIRED: Final = 79
MOVED_ON: Final = frozenset({_ILLEGAL_GENERATION, _UNKNOWN_MEMBER_ID, _REBALANCE_IN_PROGRESS})
"""The codes that say the group moved on without this member's generation: join again."""
log = logging.getLogger("eosclient.consumer")

_JOIN_GRACE: Final = 5.0  # beyond the coordinator's own timer (Java's margin)
_SLOW_REBALANCE: Final = 30.0  # seconds (at least the session timeout) before a WARNING
_UNSETTLED: Final = frozenset({State.REVOKING, State.JOINING, State.SYNCING})
_UNNAMED_REFORMS: Final = 3  # generations in a row that may leave this member out (then: none)
_IN_REBALANCE: Final = (State.JOINING, State.SYNCING, State.ASSIGNING)  # cooperative: still
# holding partitions, and the generation they were given in



class Membership:
    """One consumer's membership of its group. No I/O; the driver sends what :meth:`poll` says.

    Args:
        settings: Group id, assignors and timers.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # KIP-429: cooperative only if every assignor offered supports it (Java's rule)
        self.cooperative = bool(settings.assignors) and set(settings.assignors) <= COOPERATIVE
        self._table = COOPERATIVE_TABLE if self.cooperative else TABLE
        self.state = State.UNJOINED
        self.error: EosError | None = None
        self.member_id = ""
        self.generation = -1
        # (generation, member id) of the last JoinGroup that succeeded, never reset locally:
        # what group_metadata() hands to send_offsets_to_transaction. After the member lost its
        # generation (session or poll-interval timeout, a refused heartbeat), the coordinator
        # must refuse a transactional commit made with it (KIP-447); generation -1 and no member
        # id would skip that check.
        self.last_joined: tuple[int, str] | None = None
        self.topics: frozenset[str] = frozenset()
        self.assignment: list[TopicPartition] = []  # from SyncGroup, until installed
        # What this member was last given and in which generation: the claim a sticky leader
        # reads (sent when ``sticky`` is offered; eager, so it is the previous assignment).
        # Cooperative: what the application holds now, claimed under ``cooperative-sticky``.
        self._owned: list[TopicPartition] = []
        self._owned_generation = -1
        self._gave_up = False  # cooperative: revoked partitions since the last JoinGroup went
        self._handing_over = False  # cooperative: the next JoinGroup answer must bring a new
        # generation (see _on_joined)
        self._sent_at = 0.0  # when the JoinGroup or SyncGroup in flight went
        self.attempt = 0
        backoff = Backoff(settings.retry_backoff, settings.retry_backoff_max)
        self.lookup = CoordinatorLookup(settings.group_id, backoff)
        self._backoff = backoff
        self._failures = 0
        self._outbox: list[Send] = []
        self._step_at = float("inf")  # when the next JoinGroup or SyncGroup may go out
        self._waiting = False  # a JoinGroup or SyncGroup is in flight
        self._join_sent: Send | None = None  # the JoinGroup in flight, even of an old attempt
        self._reform_leave: Send | None = None  # the LeaveGroup the next JoinGroup waits for
        self._same_generation = False  # the last JoinGroup answer kept the generation we were in
        # (after the coordinator asked for a rebalance: see _reform)
        self._asked = False  # REBALANCE_IN_PROGRESS since the last JoinGroup answer
        self._synced = -1  # the last generation whose SyncGroup gave this member its assignment
        self._held = False  # a stopped static member's join as new waits for the application
        self._leave_static = False  # leave() sends LeaveGroup for a static member too
        self._own_share: bytes | None = None  # what this leader assigned itself (to check)
        self._unnamed = 0  # SyncGroup answers in a row that had no assignment for this member
        self._leader = ""  # the leader the last JoinGroup answer named
        self._refused: tuple[int, str] | None = None  # (generation, leader) of a SyncGroup
        # answered REBALANCE_IN_PROGRESS, until the next answer
        self._stand_in: StandIn | None = None  # for a leader gone from its generation
        self._joined: Any = None  # the leader's JoinGroup answer, kept while it assigns
        self._protocol = ""
        self._assigned_from: dict[str, int] = {}  # the leader's partition counts
        self._heartbeat_at = float("inf")
        self._heartbeat_in_flight = False
        self._heard_at = 0.0  # the last heartbeat answer (or sync) that kept the session alive
        self._polled_at = 0.0
        self._ran_at: float | None = None  # the driver's last call: a gap means a stopped process
        self._unsettled_since: float | None = None  # when the member last left its generation
        self._warn_at = float("inf")  # the next WARNING that no generation has formed

    # -- the application (under the consumer's lock) ----------------------------------------------

    def subscribe(self, topics: Iterable[str], now: float) -> None:
        """Join with ``topics`` (again, if they changed)."""
        wanted = frozenset(topics)
        if wanted != self.topics or self.state is State.UNJOINED:
            self.topics = wanted
            self._transition(Input.CALL_SUBSCRIBE, now)

    def polled(self, now: float) -> None:
        """The application called ``poll()`` (the KIP-62 poll interval restarts)."""
        self._polled_at = now

    def revoked(self, now: float) -> None:
        """The application gave up its partitions; join again."""
        self._transition(Input.CALL_REVOKED, now)

    def take_assignment(self, now: float) -> list[TopicPartition]:
        """The partitions SyncGroup gave, for the application to install; now STABLE, or
        (cooperative, after :meth:`gave_up`) JOINING again at once: KIP-429's second
        rebalance, which hands the revoked partitions over."""
        assignment, generation = self.assignment, self.generation
        handed_over = self.cooperative and self._gave_up and self.state is State.ASSIGNING
        self._transition(Input.CALL_HANDED_OVER if handed_over else Input.CALL_ASSIGNED, now)
        self.assignment = []
        self._owned, self._owned_generation = list(assignment), generation
        self._handing_over = handed_over
        if handed_over and self._leader == self.member_id:
            # noida-db answers the followers' JoinGroup some milliseconds after the leader's,
            # and never, if the leader's next JoinGroup comes first: the followers then wait
            # for their request timeout (11 s), and the group with them. So the leader, whose
            # SyncGroup is answered at once, joins again a heartbeat interval later, by when
            # the others have had their answers (and learn of the rebalance by heartbeat).
            self._step_at = now + self.settings.heartbeat_interval
        return assignment

    def to_revoke(self) -> list[TopicPartition]:
        """Cooperative, in ASSIGNING: what the application holds that the new assignment no
        longer lists, to revoke before installing it; else nothing (eager: everything was
        revoked before the join)."""
        if not self.cooperative or self.state is not State.ASSIGNING:
            return []
        given = set(self.assignment)
        return [tp for tp in self._owned if tp not in given]

    def gave_up(self, partitions: Iterable[TopicPartition]) -> None:
        """The application revoked ``partitions`` (:meth:`to_revoke`'s): no longer claimed,
        and the member joins again once it has installed the assignment. Also if the member
        meanwhile went on to join again claiming them (the I/O thread does not wait for the
        application): the leader then withheld them from their new owner, and only another
        rebalance hands them over."""
        gone = set(partitions)
        self._owned = [tp for tp in self._owned if tp not in gone]
        self._gave_up = self._gave_up or bool(gone)

    def leave(self, now: float, *, static_too: bool = False) -> None:
        """Leave the group (LeaveGroup if a member id was given, and the member is not static
        or ``static_too``: see the module docstring); idempotent."""
        if self.state is not State.FAILED:
            self._leave_static = static_too
            self._transition(Input.CALL_LEAVE, now)

    @property
    def held(self) -> bool:
        """Whether the next JoinGroup waits for :meth:`confirmed` (see :meth:`_check_stopped`)."""
        return self._held and self.state is State.JOINING

    def confirmed(self, now: float) -> None:
        """The application has run its ``on_lost`` after a stop (a processor proved with its
        producer that it was not replaced): the held JoinGroup may go."""
        if self._held:
            self._held = False
            self._step_at = min(self._step_at, now)

    def has_generation(self) -> bool:
        """Whether commits can carry a live generation (STABLE, or REVOKING before rejoin;
        cooperative, also while rebalancing: the partitions are still held, see above)."""
        return self.generation >= 0 and (
            self.state in (State.STABLE, State.REVOKING)
            or (self.cooperative and self.state in _IN_REBALANCE))

    def in_generation(self, now: float) -> bool:
        """Whether the member still holds its generation *now*: :meth:`has_generation`, and
        neither the session nor the poll interval has run out, even if the I/O thread has not
        noticed yet (a process resumed after a long pause reads its clock before its I/O thread
        gets to check it)."""
        session = self.settings.session_timeout
        heard = self._heard_at
        if self.cooperative and self._waiting and self.state in _IN_REBALANCE:
            # A joining member sends no heartbeats; the JoinGroup or SyncGroup in flight
            # proves it alive as one would (the coordinator restarts its session timer on it).
            # Not longer: a coordinator that holds it past the session may not count it.
            heard = max(heard, self._sent_at)
        return (self.has_generation() and now < heard + session
                and self._ran_at is not None and now < self._ran_at + session
                and now < self._polled_at + self.settings.rebalance_timeout)

    # -- the driver -----------------------------------------------------------------------------

    def poll(self, now: float, counts: Counts) -> list[Send]:
        """The requests due now, after checking the timers (FindCoordinator is the driver's:
        :attr:`lookup`)."""
        self._check_stopped(now)
        self._check_timers(now, counts)
        self._check_unsettled(now)
        if self.state is State.JOINING and not self._waiting and now >= self._step_at \
                and self.lookup.node is not None and not self.held:
            self._send_join()
            self._sent_at = now
        elif self.state is State.SYNCING and not self._waiting and self._joined is not None:
            self._send_sync(counts)
            self._sent_at = now
        if self._heartbeat_due(now):
            self._heartbeat_in_flight = True
            self._outbox.append(Send(wire.heartbeat(
                self.settings.group_id, self.generation, self.member_id,
                group_instance_id=self.settings.group_instance_id), "heartbeat", self.attempt,
                at=now))
        out, self._outbox = self._outbox, []
        return out

    @property
    def pending(self) -> bool:
        """Whether requests wait for the next :meth:`poll` (a LeaveGroup after leave()), or a
        dynamic member that left waits for the answer to a JoinGroup it sent before: a
        coordinator that answers it after the LeaveGroup (Tansu) admits the member again, and
        then it leaves again (:meth:`on_response`)."""
        rejoined = (self.state is State.UNJOINED and self._join_sent is not None
                    and (self.settings.group_instance_id is None or self._leave_static))
        return bool(self._outbox) or rejoined or self._stand_in is not None

    def wants_coordinator(self) -> bool:
        """Whether the membership needs the coordinator (it is in the group or joining)."""
        return self.state not in (State.UNJOINED, State.FAILED)

    def next_timer(self) -> float:
        """The nearest time :meth:`poll` has something to do."""
        timers = [float("inf")]
        if self.state is State.JOINING and not self._waiting and self.lookup.node is not None:
            timers.append(self._step_at)  # (SYNCING waits for metadata: its answer wakes us)
        if self.generation >= 0 and self.state in (State.ASSIGNING, State.STABLE):
            timers += [self._heard_at + self.settings.session_timeout,
                       self._polled_at + self.settings.rebalance_timeout]
        if self.generation >= 0 and self.state in _HEARTBEATING:
            timers.append(self._heartbeat_at)
        if self.state in _UNSETTLED:
            timers.append(self._warn_at)
        return min(timers)

    def on_response(self, sent: Send, response: Any, now: float) -> None:
        """Read the answer to ``sent``."""
        self._check_stopped(now)
        self._answered(sent, now)
        if sent.kind == STAND_IN:
            self._stood_in(self._stand_in.on_response(response) if self._stand_in else None)
        elif sent.kind == "heartbeat":
            self._on_heartbeat(sent, response.error_code, now)
        elif sent.attempt == self.attempt and sent.kind in ("join", "sync"):
            self._waiting = False
            if sent.kind == "join":
                self._on_joined(response, now)
            else:
                self._on_synced(response, now)
        elif sent.kind == "join" and self.state is State.UNJOINED and not response.error_code:
            # The LeaveGroup overtook a JoinGroup the coordinator held (they go on separate
            # connections, so that a held join cannot hold a leave back) and the join, answered
            # after it, admitted the member again. Out again, or it would keep partitions
            # assigned and never heartbeat, and Tansu does not expire such a member.
            log.debug("group %r: a JoinGroup answered after leaving admitted member %r again: "
                      "leaving again", self.settings.group_id, response.member_id)
            self._send_leave(response.member_id)

    def on_failure(self, sent: Send, error: EosError, now: float) -> None:
        """``sent`` got no answer (connection cut, timeout): find the coordinator again."""
        self._check_stopped(now)
        self.lookup.lost(now)
        self._answered(sent, now)
        if sent.kind == STAND_IN:
            self._stood_in(self._stand_in.on_failure() if self._stand_in else None)
        elif sent.kind == "heartbeat":
            self._heartbeat_in_flight = False
            self._heartbeat_at = now + self.settings.retry_backoff
        elif sent.attempt == self.attempt and sent.kind in ("join", "sync"):
            log.info("group %r: no answer to %s (%s): joining again", self.settings.group_id,
                     "JoinGroup" if sent.kind == "join" else "SyncGroup", error)
            self._waiting = False
            self._rejoin(now, at_once=False)

    # -- answers --------------------------------------------------------------------------------

    def _answered(self, sent: Send, now: float) -> None:
        """Bookkeeping of any answer (or failure): the JoinGroup in flight, and the LeaveGroup
        that a JoinGroup waits for (:meth:`_reform`; sent on separate connections, the join
        could overtake it)."""
        if sent is self._join_sent:
            self._join_sent = None
        if sent is self._reform_leave:
            self._reform_leave = None
            if self.state is State.JOINING:
                self._step_at = now

    def _on_joined(self, response: Any, now: float) -> None:
        code = response.error_code
        log.debug("group %r: JoinGroup answered %d, generation %d, member %r, leader %r, "
                  "%d members", self.settings.group_id, code, response.generation_id,
                  response.member_id, response.leader, len(response.members or ()))
        if response.members:  # the leader: who it assigns to, by member and instance id
            log.debug("group %r: members %s", self.settings.group_id,
                      ", ".join(f"{m.member_id!r} ({getattr(m, 'group_instance_id', None)!r})"
                                for m in response.members))
        if code:
            self._on_error(ApiKey.JOIN_GROUP, code, now, member_id=response.member_id)
            return
        self._failures = 0
        refused, self._refused = self._refused, None
        self._leader = response.leader or ""
        if (self._leader and self._leader != response.member_id and self._stand_in is None
                and (refused == (response.generation_id, self._leader)
                     or self._own_old_id(self._leader))):
            self._stand_in_for(self._leader, response.generation_id)
        asked, self._asked = self._asked, False
        self._same_generation = (asked and 0 <= self._synced == response.generation_id
                                 and self.member_id == response.member_id)
        if self._same_generation and response.leader != response.member_id:
            self._reform(f"answered the rejoin of a follower with the same generation "
                         f"{self.generation}, so it keeps that generation's assignment (the "
                         f"partitions of departed members would be read by nobody)", now)
            return
        handing_over, self._handing_over = self._handing_over, False
        if (handing_over and 0 <= self._synced == response.generation_id
                and self.member_id == response.member_id):
            # KIP-429's second rebalance must form a new generation: in this one the
            # partitions this member gave up are withheld from everybody. Tansu answers a
            # static member's rejoin with the generation it was in and keeps it (the others
            # are never asked to rejoin), so they would be read by nobody for good.
            self._reform(f"answered the second rejoin of a cooperative rebalance with the same "
                         f"generation {self.generation} (the partitions this member gave up "
                         f"would be read by nobody)", now)
            return
        self.member_id, self.generation = response.member_id, response.generation_id
        self.last_joined = (response.generation_id, response.member_id)
        self._protocol = response.protocol_name or ""
        self._joined = response if response.leader == response.member_id else _FOLLOWER
        self._heartbeat_at = now + self.settings.heartbeat_interval
        self._transition(Input.RECV_JOINED, now)

    def _own_old_id(self, leader: str) -> bool:
        """Whether ``leader`` is a member id the coordinator gave this member's own
        ``group.instance.id`` before (static member ids are ``<instance id>-<uuid>``), so
        surely not a live member's: Kafka and noida-db move the leadership to the new member
        id when a static member joins again; Tansu, when the leader's process died and its
        session ran out, went on naming the old id, and nobody assigned (nemesis Tansu seed 9).
        The stand-in need not wait for a refused SyncGroup to see it."""
        instance = self.settings.group_instance_id
        return (instance is not None and leader.startswith(f"{instance}-")
                and _UUID.fullmatch(leader[len(instance) + 1:]) is not None)

    def _reform(self, why: str, now: float) -> None:
        """The coordinator asked this member to rejoin its generation (REBALANCE_IN_PROGRESS,
        or it is the leader and the partition counts changed) and then kept that generation's
        old assignment. Kafka always starts a new generation then. Tansu, for static members,
        may not: it answers the rejoin with the same generation and, if the group had formed,
        hands out the old assignment again, so the partitions of a member that left or whose
        session ran out stay assigned to it, read by nobody, for good. Seen by a follower: the
        same generation in the JoinGroup answer (a follower's SyncGroup cannot tell). Seen by
        the leader: a SyncGroup answer other than the share it assigned itself (the same
        generation alone is not enough: while the group is still forming Tansu applies the
        leader's assignment, and a leader that left then stays named leader, and nobody
        assigns). A LeaveGroup makes the coordinator start a new generation, which every member
        joins; so this member leaves (static or not) and joins again once that is answered, as
        a new member.

        Only a rejoin into a generation this member was synced in is judged so: while a
        generation forms, Tansu answers a follower's SyncGroup REBALANCE_IN_PROGRESS and its
        rejoin with the same generation, and nothing is stale yet. Leaving then made every
        member leave in turn, each start of a generation undone by the next leave, and no
        generation formed for minutes (nemesis Tansu seed 9).

        Only a rejoin the coordinator asked for (REBALANCE_IN_PROGRESS) is judged so. A static
        member that joins again for its own reasons (an answer lost to a cut connection) may
        rightly be given the generation it was in (KIP-345: noida-db does); leaving then would
        start a needless rebalance, and the new member's JoinGroup, with no member id and the
        instance id, would take the instance over from a live replacement if this process is
        a zombie (nemesis noida-db seed 19: both instances died).

        The same mends a generation whose leader was given a stale member list: noida-db,
        when the members rejoin after every connection was cut while a member left, may list
        a static member under a member id it held before; the leader assigns that id its
        share, the member's SyncGroup answer carries no assignment at all (every assignor
        writes one, possibly empty, for each member it knows), and those partitions are read
        by nobody while every member heartbeats in the generation (nemesis noida-db seed 15).
        The member is not a zombie: the coordinator accepted its SyncGroup under its member id
        and generation. After :data:`_UNNAMED_REFORMS` such generations in a row the member
        takes the empty assignment, at WARNING (a leader's assignor that leaves members out
        on purpose)."""
        log.warning("group %r: the coordinator %s: leaving and joining again to start a new "
                    "generation", self.settings.group_id, why)
        if self.state is not State.JOINING:
            self._transition(Input.RECV_REJOIN, now)  # SYNCING: the leader, after SyncGroup
        self._reform_leave = Send(wire.leave_group(
            self.settings.group_id, self.member_id,
            group_instance_id=self.settings.group_instance_id,
            reason="the coordinator did not start a new generation"), "leave", self.attempt)
        self._outbox.append(self._reform_leave)
        self.member_id, self.generation = "", -1
        self._step_at = float("inf")  # until the LeaveGroup is answered (on_response)

    def _on_synced(self, response: Any, now: float) -> None:
        code = response.error_code
        log.debug("group %r: SyncGroup answered %d", self.settings.group_id, code)
        self._refused = (self.generation, self._leader) if code == _REBALANCE_IN_PROGRESS else None
        if code:
            self._on_error(ApiKey.SYNC_GROUP, code, now)
            return
        own, self._own_share = self._own_share, None
        if self._same_generation and own is not None and response.assignment != own:
            self._reform(f"ignored the leader's assignment of generation {self.generation} and "
                         f"kept the old one (the partitions of departed members would be read "
                         f"by nobody)", now)
            return
        # Every assignor writes an assignment for each member it was told of, an empty one
        # included; no bytes at all mean the leader's member list did not name this member.
        self._unnamed = self._unnamed + 1 if not response.assignment else 0
        if 0 < self._unnamed <= _UNNAMED_REFORMS:
            self._reform(f"answered SyncGroup of generation {self.generation} with no "
                         f"assignment for member {self.member_id!r}: the leader's member list "
                         f"did not name it (a stale entry took its place), so the partitions "
                         f"meant for it would be read by nobody", now)
            return
        if self._unnamed:
            log.warning("group %r: generation %d again has no assignment for member %r (%d "
                        "times in a row): taking none; the leader's assignor leaves it out",
                        self.settings.group_id, self.generation, self.member_id, self._unnamed)
        self.assignment = wire.read_assignment(response.assignment)
        self._synced = self.generation
        log.info("group %r: generation %d assigns %s", self.settings.group_id, self.generation,
                 _partitions(self.assignment))
        self._heard_at = self._polled_at = now
        self._heartbeat_at = now + self.settings.heartbeat_interval
        self._transition(Input.RECV_SYNCED, now)

    def _on_heartbeat(self, sent: Send, code: int, now: float) -> None:
        self._heartbeat_in_flight = False
        self._heartbeat_at = now + self.settings.heartbeat_interval
        if sent.attempt != self.attempt:
            return
        if not code:
            # Alive when the heartbeat was sent, not when its answer is read: an answer read
            # by a process resumed from a long pause (it waited in the socket) says nothing of
            # the time the process was stopped, and the session may have run out meanwhile.
            self._heard_at = max(self._heard_at, sent.at)
        elif self.state is State.SYNCING and code == _REBALANCE_IN_PROGRESS:
            pass  # the SyncGroup in flight says so too, or completes the generation: it decides
        elif self.state in _HEARTBEATING:
            log.debug("group %r: Heartbeat answered %d", self.settings.group_id, code)
            self._on_error(ApiKey.HEARTBEAT, code, now)

    def _on_error(self, api: ApiKey, code: int, now: float, *, member_id: str = "") -> None:
        """React to a group API's error code: classify it, then pick the way to retry."""
        error = error_for(api, code)
        if not isinstance(error, RetriableError):
            self._fail(error, now)
        elif code == _MEMBER_ID_REQUIRED:  # KIP-394: join again at once, with this member id
            self.member_id = member_id
            self._step_at = now
        elif code in MOVED_ON:
            self._moved_on(code, now)
        elif api is ApiKey.HEARTBEAT:
            if code in _NOT_COORDINATOR:
                self.lookup.lost(now)
            self._heartbeat_at = now + self.settings.retry_backoff
        else:  # coordinator moving or loading: join again after the backoff
            if code in _NOT_COORDINATOR:
                self.lookup.lost(now)
            self._rejoin(now, at_once=False)

    def _moved_on(self, code: int, now: float) -> None:
        """The group moved on (:data:`MOVED_ON`): join again at once; with a new generation
        (22) or member id (25) too, the partitions lost (RECV_LOST)."""
        if code == _UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if code != _REBALANCE_IN_PROGRESS:
            self.generation = -1
        self._asked |= code == _REBALANCE_IN_PROGRESS
        self._rejoin(now, at_once=True, lost=code != _REBALANCE_IN_PROGRESS)

    def _rejoin(self, now: float, *, at_once: bool, lost: bool = False) -> None:
        """Join again: at once, or after the backoff (a coordinator still loading)."""
        self._transition(Input.RECV_LOST if lost else Input.RECV_REJOIN, now)
        if self.state is State.JOINING:
            self._failures += 1
            self._step_at = now if at_once else now + self._backoff.delay(self._failures)

    def refused(self, code: int, now: float) -> None:
        """A commit under this generation was refused with ``code``: if the group moved on
        (22, 25, 27), join again, as a heartbeat refused so would (Java does likewise)."""
        if self.state not in _MEMBER or code not in MOVED_ON:
            return
        if self.cooperative and code == _ILLEGAL_GENERATION:
            # noida-db bumps the generation as soon as a member joins, and refuses a commit
            # under the old one before this member has even heard of the rebalance (Kafka
            # accepts it until the join phase completes). The partitions are not lost: none
            # moves before this member revokes it. So it joins again keeping them; if the group
            # did drop it, the JoinGroup's answer says so (UNKNOWN_MEMBER_ID: lost).
            self._rejoin(now, at_once=True)
            return
        self._moved_on(code, now)

    def fail(self, error: EosError, now: float) -> None:
        """A fatal error (here, or the coordinator lookup's): FAILED."""
        self._fail(error, now)

    def _fail(self, error: EosError, now: float) -> None:
        self.error = error
        self._transition(Input.RECV_FATAL, now)

    # -- requests -------------------------------------------------------------------------------

    def _send_join(self) -> None:
        settings = self.settings
        metadata = (wire.subscription_bytes(self.topics, owned=self._owned,
                                            generation=self._owned_generation)
                    if STICKY in settings.assignors else wire.subscription_bytes(self.topics))
        # cooperative-sticky's claim is what the member holds now: nothing if it is eager (it
        # revoked everything before joining), so that a leader hands those partitions on at once
        held = self._owned if self.cooperative else []
        cooperative = wire.subscription_bytes(self.topics, owned=held,
                                              generation=self._owned_generation if held else -1)
        request = wire.join_group(
            settings.group_id, self.member_id,
            session_timeout_ms=int(settings.session_timeout * 1000),
            rebalance_timeout_ms=int(settings.rebalance_timeout * 1000),
            protocols=[(name, cooperative if name == COOPERATIVE_STICKY else metadata)
                       for name in settings.assignors],
            group_instance_id=settings.group_instance_id)
        self._waiting = True
        self._gave_up = False  # what is revoked from now on, this join still claims
        log.debug("group %r: JoinGroup, member %r, instance %r", settings.group_id,
                  self.member_id, settings.group_instance_id)
        self._join_sent = Send(request, "join", self.attempt, join_timeout(settings))
        self._outbox.append(self._join_sent)

    def _send_sync(self, counts: Counts) -> None:
        assignments: dict[str, bytes] = {}
        if self._joined is not _FOLLOWER:
            try:
                computed = self._assign(self._joined, counts)
            except EosError as exc:  # a member's subscription does not decode
                self._fail(exc, 0.0)
                return
            if computed is None:
                return  # the leader waits for the metadata of every member's topics
            assignments = computed
            self._own_share = computed.get(self.member_id, b"")
        self._joined = None
        self._waiting = True
        log.debug("group %r: SyncGroup, generation %d, member %r, %d assignments",
                  self.settings.group_id, self.generation, self.member_id, len(assignments))
        self._outbox.append(Send(wire.sync_group(
            self.settings.group_id, self.generation, self.member_id, self._protocol,
            assignments, group_instance_id=self.settings.group_instance_id), "sync",
            self.attempt))

    def _assign(self, joined: Any, counts: Counts) -> dict[str, bytes] | None:
        members = {m.member_id: wire.read_member_subscription(m.metadata)
                   for m in joined.members}
        subscriptions = {member: sub.topics for member, sub in members.items()}
        # JoinGroup v5+ names each static member's group.instance.id; the assignors order by it
        instances = {m.member_id: getattr(m, "group_instance_id", None) for m in joined.members}
        topics = {t for ts in subscriptions.values() for t in ts}
        known = counts(topics)
        if known is None:
            return None
        assignor = ASSIGNORS.get(self._protocol)
        if assignor is None:
            raise ProtocolError(f"the coordinator chose assignor {self._protocol!r}, which "
                                "this member did not offer")
        self._assigned_from = {t: known.get(t, 0) for t in topics}
        claims = {member: Claim(*wire.read_claim(sub, self._protocol))
                  for member, sub in members.items()}
        result = assignor(self._assigned_from, subscriptions, instances, claims)
        return {member: wire.assignment_bytes(tps) for member, tps in result.items()}

    def _send_leave(self, member_id: str | None = None) -> None:
        """LeaveGroup for this member (or ``member_id``), for a dynamic member only (a static
        one keeps its place: see above) unless :meth:`leave` said ``static_too``; by member id
        alone."""
        if self.settings.group_instance_id is None or self._leave_static:
            self._outbox.append(Send(wire.leave_group(self.settings.group_id,
                                                      member_id or self.member_id),
                                     "leave", self.attempt))

    def _stand_in_for(self, leader: str, generation: int) -> None:
        """Start a :class:`StandIn` for ``leader`` (a leader that left a forming generation:
        Tansu keeps naming it, and the generation never forms); this member goes on as
        usual, its SyncGroup held until the stand-in's generation forms."""
        settings = self.settings
        metadata = wire.subscription_bytes(self.topics)
        self._stand_in = StandIn(
            settings.group_id, leader, generation,
            session_timeout_ms=int(settings.session_timeout * 1000),
            rebalance_timeout_ms=int(settings.rebalance_timeout * 1000),
            protocols=[(name, metadata) for name in settings.assignors],
            join_timeout=join_timeout(settings), attempt=self.attempt)
        self._outbox.append(self._stand_in.start())

    def _stood_in(self, following: Send | None) -> None:
        if following is None:
            self._stand_in = None
        else:
            self._outbox.append(following)

    def _heartbeat_due(self, now: float) -> bool:
        return (self.state in _HEARTBEATING and self.generation >= 0
                and self.lookup.node is not None and not self._heartbeat_in_flight
                and now >= self._heartbeat_at)

    def _check_stopped(self, now: float) -> None:
        """A driver that did not run for a whole session was stopped (SIGSTOP, a paused VM, a
        starved machine): every answer read now may be from before, and the coordinator may
        have formed generations without this member meanwhile. A lax one (Tansu) still
        answered a JoinGroup sent before the stop, and then the SyncGroup of that generation
        with its assignment, though the group had moved on: two members owned the same
        partitions. So everything in flight is dropped and the member joins again (keeping
        its member id: the coordinator decides)."""
        ran_at, self._ran_at = self._ran_at, now
        if ran_at is None or now - ran_at < self.settings.session_timeout:
            return
        if self.state in (State.JOINING, State.SYNCING, State.ASSIGNING, State.STABLE,
                          State.REVOKING):
            self.generation = -1
            self.lookup.lost(now)
            self._transition(Input.TIMER_EXPIRED, now)
            # A static member with no member id (an UNKNOWN_MEMBER_ID just before the stop)
            # would join as new, and a JoinGroup with no member id and the instance id takes
            # the instance over from whoever holds it (KIP-345): the live replacement, if this
            # process is a zombie (nemesis noida-db seed 14: the replacement died). So the
            # join waits until the application has run on_lost (:meth:`confirmed`), where a
            # processor proves with its producer's epoch that it was not replaced.
            self._held = self.settings.group_instance_id is not None and not self.member_id

    def _check_timers(self, now: float, counts: Counts) -> None:
        if self.generation < 0 or self.state not in (State.ASSIGNING, State.STABLE):
            return
        if now >= self._polled_at + self.settings.rebalance_timeout:
            # KIP-62: a dynamic member leaves (and joins again at its next poll() as a new
            # member); a static one keeps its member id, for the reason below.
            self._send_leave()
            if self.settings.group_instance_id is None:
                self.member_id = ""
            self.generation = -1
            self._transition(Input.TIMER_EXPIRED, now)
        elif now >= self._heard_at + self.settings.session_timeout:
            # The coordinator has probably dropped us, but only it knows: join again with the
            # same member id (Java keeps it too) and let it answer UNKNOWN_MEMBER_ID if so. A
            # static member must not forget it: joining with no member id and its instance id
            # would *replace* whoever holds that instance id now (KIP-345), so a process
            # resumed after a long pause would fence its own live replacement. With the old
            # member id the coordinator fences the old process instead (82).
            self.generation = -1
            self.lookup.lost(now)
            self._transition(Input.TIMER_EXPIRED, now)
        elif self.state is State.STABLE and self._assigned_from:
            current = counts(self._assigned_from)
            if current is not None and any(current.get(t, 0) != n
                                           for t, n in self._assigned_from.items()):
                self._transition(Input.META_CHANGED, now)

    def _check_unsettled(self, now: float) -> None:
        """A member out of a generation for long says so at WARNING, and what it waits for:
        once the rebalance has lasted the session timeout (30 s at least), then each time it
        has lasted twice as long. A rebalance may rightly take up to the rebalance timeout
        (``max.poll.interval.ms``) while members are slow to join; a group that cannot form
        one at all must not look like an idle one."""
        if self._unsettled_since is None or now < self._warn_at:
            return
        lasted = now - self._unsettled_since
        self._warn_at = self._unsettled_since + 2 * lasted
        log.warning("group %r: no generation for %.0f s (%s; member %r, last generation %d)",
                    self.settings.group_id, lasted, self._waiting_for(), self.member_id,
                    self.generation)

    def _waiting_for(self) -> str:
        """What the rebalance waits for, in words (:meth:`_check_unsettled`)."""
        if self.state is State.REVOKING:
            return "the application has not called poll() to give its partitions up"
        if self.lookup.node is None:
            return "the group coordinator is not known yet"
        if self.state is State.SYNCING:
            return ("SyncGroup in flight: the coordinator holds it until the leader assigns"
                    if self._waiting else "the leader waits for its topics' metadata")
        if self.held:
            return "a stopped static member waits for the application's on_lost to rejoin"
        if self._waiting:
            return ("JoinGroup in flight: the coordinator holds it until every member it "
                    "knows joins, or the rebalance timeout")
        return "JoinGroup to be sent again (after an error, or a LeaveGroup's answer)"

    # -- the one place the state changes --------------------------------------------------------

    def _transition(self, cause: Input, now: float) -> None:
        target = self._table.get((self.state, cause))
        if target is None:
            if not cause.name.startswith("CALL_"):
                return  # a late answer or timer for a state already left: stale, ignored
            raise IllegalStateError(f"group {self.settings.group_id!r}: {cause.name} is not "
                                    f"allowed in {self.state.name}")
        previous, self.state = self.state, target
        if target not in _UNSETTLED:
            self._unsettled_since, self._warn_at = None, float("inf")
        elif self._unsettled_since is None:  # out of its generation from now on
            self._unsettled_since = now
            self._warn_at = now + max(_SLOW_REBALANCE, self.settings.session_timeout)
        log.debug("group %r: %s -> %s (%s), generation %d, member %r", self.settings.group_id,
                  previous.name, target.name, cause.name, self.generation, self.member_id)
        if cause is Input.CALL_LEAVE and previous is not State.UNJOINED and self.member_id:
            self._send_leave()
        fresh = (target is State.UNJOINED or previous is not State.JOINING
                 or cause in (Input.CALL_SUBSCRIBE, Input.TIMER_EXPIRED))
        if target in (State.JOINING, State.UNJOINED) and fresh:
            self.attempt += 1  # answers to what was sent before are stale from now on
            self._waiting = False
            self._joined = None
            self._assigned_from = {}
            self.assignment = []
            self._step_at = now
        if target is State.UNJOINED or (self.cooperative and cause is Input.CALL_REVOKED):
            # cooperative: on_lost ran, and nothing is held any more
            self._owned, self._owned_generation = [], -1
        if target is State.UNJOINED:
            self.member_id, self.generation = "", -1


def join_timeout(settings: Settings) -> float:
    """How long a JoinGroup may go unanswered before it is sent again: the session timeout
    (or the rebalance timeout, if shorter), plus a margin.

    A coordinator holds a JoinGroup until every member it knows has joined, up to the
    rebalance timeout (``max.poll.interval.ms``, 5 minutes by default), and Java waits that
    long plus 5 s. A join the coordinator lost is then a 5-minute stall of the whole group:
    noida-db 0.2.3 formed a generation naming a member its leader without ever answering that
    member's JoinGroup, then began the next one, waiting for that same member to join again
    (the cluster nemesis, a broker stalled past the session timeout). The request timing out
    closes its connection, and the join is sent again on a new one: Kafka replaces a member's
    held join with the newer, so a join held for good reason is only renewed, and a lost one
    is found within the session timeout.
    """
    return min(settings.session_timeout, settings.rebalance_timeout) + _JOIN_GRACE


_FOLLOWER: Final = object()  # _joined for a member that is not the leader
# the tail of a static member id, "<group.instance.id>-<uuid>" (Kafka's form, and Tansu's)
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _partitions(partitions: Iterable[TopicPartition]) -> str:
    """``topic[0,2,5]``, topic by topic, for a log line; ``nothing`` for none."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return " ".join(f"{t}{sorted(ps)}" for t, ps in sorted(by_topic.items())) or "nothing"
