"""The group membership's states, inputs and transition table, and the values it passes out.

Private to :mod:`eosclient._consumer.membership` (its module docstring explains the protocol);
kept apart so that the one table every transition goes through reads on its own, as the
producer's ``_txn_table`` does. Inputs are named by who causes them: ``CALL_`` the application,
``RECV_`` the coordinator's answers, ``TIMER_`` and ``META_`` the clock and the metadata.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["COOPERATIVE_TABLE", "TABLE", "Input", "Send", "Settings", "State"]


class State(enum.Enum):
    """Where the member is in the group protocol."""

    UNJOINED = "not a member: no subscription yet, or left"
    JOINING = "JoinGroup to send or in flight"
    SYNCING = "SyncGroup to send or in flight (the leader assigns first)"
    ASSIGNING = ("assignment received; the application installs it in its next poll() "
                 "(cooperative: after revoking what it no longer lists)")
    STABLE = "a member of the generation, heartbeating"
    REVOKING = ("a rebalance is due; the application revokes in its next poll() (cooperative: "
                "the member lost its generation, and the application is told so)")
    FAILED = "a fatal error; the consumer raises it"


class Input(enum.Enum):
    """What moves the machine, named by who caused it."""

    CALL_SUBSCRIBE = "the application subscribed to a new set of topics"
    CALL_ASSIGNED = "the application installed the assignment"
    CALL_HANDED_OVER = ("the application installed a cooperative assignment after revoking "
                        "partitions: join again at once, so they are handed over (KIP-429)")
    CALL_REVOKED = "the application gave up its partitions"
    CALL_LEAVE = "the application closes (LeaveGroup, unless the member is static)"
    RECV_JOINED = "JoinGroup answered"
    RECV_SYNCED = "SyncGroup answered with the assignment"
    RECV_REJOIN = "join again (REBALANCE_IN_PROGRESS; no answer; the coordinator moved, ...)"
    RECV_LOST = ("the group moved on without this member's generation (ILLEGAL_GENERATION, "
                 "UNKNOWN_MEMBER_ID): its partitions are lost, not revoked")
    RECV_FATAL = "a fatal error code"
    TIMER_EXPIRED = "the session or the poll interval ran out, or the process was stopped for a "\
        "session"
    META_CHANGED = "a partition count the leader assigned from has changed"


S, In = State, Input
_LIVE: Final = (S.UNJOINED, S.JOINING, S.SYNCING, S.ASSIGNING, S.STABLE, S.REVOKING)
TABLE: Final[Mapping[tuple[State, Input], State]] = {
    (S.UNJOINED, In.CALL_SUBSCRIBE): S.JOINING,
    (S.JOINING, In.CALL_SUBSCRIBE): S.JOINING,
    (S.SYNCING, In.CALL_SUBSCRIBE): S.JOINING,
    (S.ASSIGNING, In.CALL_SUBSCRIBE): S.JOINING,
    (S.STABLE, In.CALL_SUBSCRIBE): S.REVOKING,
    (S.REVOKING, In.CALL_SUBSCRIBE): S.REVOKING,
    (S.JOINING, In.RECV_JOINED): S.SYNCING,
    (S.JOINING, In.RECV_REJOIN): S.JOINING,
    (S.JOINING, In.TIMER_EXPIRED): S.JOINING,
    (S.SYNCING, In.RECV_SYNCED): S.ASSIGNING,
    (S.SYNCING, In.RECV_REJOIN): S.JOINING,
    (S.SYNCING, In.TIMER_EXPIRED): S.JOINING,
    (S.ASSIGNING, In.CALL_ASSIGNED): S.STABLE,
    (S.ASSIGNING, In.RECV_REJOIN): S.JOINING,
    (S.ASSIGNING, In.TIMER_EXPIRED): S.JOINING,
    (S.STABLE, In.RECV_REJOIN): S.REVOKING,
    (S.STABLE, In.TIMER_EXPIRED): S.REVOKING,
    (S.STABLE, In.META_CHANGED): S.REVOKING,
    (S.REVOKING, In.RECV_REJOIN): S.REVOKING,
    (S.REVOKING, In.TIMER_EXPIRED): S.REVOKING,
    (S.REVOKING, In.CALL_REVOKED): S.JOINING,
    (S.JOINING, In.RECV_LOST): S.JOINING,
    (S.SYNCING, In.RECV_LOST): S.JOINING,
    (S.ASSIGNING, In.RECV_LOST): S.JOINING,
    (S.STABLE, In.RECV_LOST): S.REVOKING,
    (S.REVOKING, In.RECV_LOST): S.REVOKING,
    **{(state, In.CALL_LEAVE): S.UNJOINED for state in _LIVE},
    **{(state, In.RECV_FATAL): S.FAILED for state in _LIVE},
}
"""Every allowed (state, input) -> next state of the eager protocol; the one place its
transitions are written. Eager, a member holds nothing outside ASSIGNING, STABLE and REVOKING:
whatever moves the group on, it revokes everything (REVOKING) before it joins again."""

_HOLDING: Final = (S.JOINING, S.SYNCING, S.ASSIGNING, S.STABLE)
COOPERATIVE_TABLE: Final[Mapping[tuple[State, Input], State]] = {
    **TABLE,
    # KIP-429: a member keeps its partitions through the rejoin (nothing revoked first) ...
    (S.STABLE, In.CALL_SUBSCRIBE): S.JOINING,
    (S.STABLE, In.RECV_REJOIN): S.JOINING,
    (S.STABLE, In.META_CHANGED): S.JOINING,
    # ... revokes after SyncGroup only what the assignment no longer lists (in ASSIGNING), and
    # if that was anything, joins again at once: the second rebalance hands it over;
    (S.ASSIGNING, In.CALL_HANDED_OVER): S.JOINING,
    # and having lost its generation, wherever it was, it is told so (on_lost) before it joins.
    **{(state, cause): S.REVOKING for state in _HOLDING
       for cause in (In.RECV_LOST, In.TIMER_EXPIRED)},
}
"""The cooperative protocol's table (KIP-429): :data:`TABLE` but for the rows above. A member
holds partitions in every live state but UNJOINED, so only a lost generation (REVOKING) or
leaving takes them all away."""
_MEMBER: Final = (S.ASSIGNING, S.STABLE, S.REVOKING)
"""Holding a generation: its commits count, and a refusal of one means the group moved on."""
_HEARTBEATING: Final = (S.SYNCING, *_MEMBER)
"""Heartbeating: from the JoinGroup answer on, as Java does, so a session survives a SyncGroup
the coordinator holds (Tansu takes 3 s to answer one, and counts only heartbeats as alive)."""
del S, In


@dataclass(frozen=True, slots=True)
class Send:
    """A request for the driver to send: to the coordinator, or (FindCoordinator) to any node.

    Attributes:
        request: The kafka-python request object.
        kind: ``"find"``, ``"join"``, ``"sync"``, ``"heartbeat"``, ``"leave"``, or
            ``"stand-in"`` (any request of a :class:`~eosclient._consumer.stand_in.StandIn`).
        attempt: The join attempt it belongs to; answers to an older one are ignored.
        timeout: Its request timeout in seconds, or None for ``request.timeout.ms``.
        at: When it was made (what a heartbeat's answer proves the session alive since).
    """

    request: Any
    kind: str
    attempt: int
    timeout: float | None = None
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Settings:
    """What the membership needs of the consumer's configuration (times in seconds)."""

    group_id: str
    assignors: tuple[str, ...]
    session_timeout: float
    rebalance_timeout: float  # max.poll.interval.ms
    heartbeat_interval: float
    retry_backoff: float
    retry_backoff_max: float
    group_instance_id: str | None = None  # KIP-345: a static member never sends LeaveGroup
