"""Finish a forming generation in the name of a leader that left it (sans-IO).

Tansu (0.6) names the first member to join a forming generation its leader and keeps that
name when the member leaves before it assigns (its LeaveGroup removes the member, not the name;
a formed group's leave clears it). Nobody else is given the member list, every follower's
SyncGroup is answered REBALANCE_IN_PROGRESS (after 0.8 of the session timeout), the next
JoinGroup the same generation and the same leader, for good. The simplest rolling restart
does it: a new member joins, and the group's leader closes before it has rejoined.

A follower that sees that loop (the same generation and leader after a SyncGroup refused so)
stands in for the leader, on a connection of its own, as any member could:

1. Heartbeat under the leader's member id. UNKNOWN_MEMBER_ID means the coordinator holds no
   such member: a live leader is never stood in for (any other answer ends it here).
2. JoinGroup under that member id and no instance id: a coordinator that names it leader
   answers with the member list.
3. SyncGroup assigning every member nothing: the generation forms, the coordinator clears its
   leader name at the next leave.
4. LeaveGroup under that member id: a new generation begins, with no leader named, which
   every member joins; its first JoinGroup leads.

Nothing is ever assigned to anyone in the stand-in's generation, so at most a few seconds pass
with no partitions owned; the stand-in never reads or commits. Any other answer, or a failure,
ends the stand-in, with its LeaveGroup if its JoinGroup may have been taken in. Kafka and
noida-db never answer a JoinGroup after a refused SyncGroup with the same generation, so the
stand-in starts only on Tansu.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Final

from eosclient._consumer import protocol as wire
from eosclient._consumer.group_table import Send

log = logging.getLogger("eosclient.consumer")

KIND: Final = "stand-in"
"""The kind of every request a stand-in sends (its own connection: the JoinGroup is held)."""

_UNKNOWN_MEMBER_ID: Final = 25


class StandIn:
    """One stand-in's conversation: :meth:`start`, then :meth:`on_response` or
    :meth:`on_failure` for each answer, each returning the next request (None: done)."""

    def __init__(self, group_id: str, leader: str, generation: int, *,
                 session_timeout_ms: int, rebalance_timeout_ms: int,
                 protocols: Iterable[tuple[str, bytes]], join_timeout: float,
                 attempt: int) -> None:
        self.group_id, self.leader, self.generation = group_id, leader, generation
        self._join = wire.join_group(group_id, leader, session_timeout_ms=session_timeout_ms,
                                     rebalance_timeout_ms=rebalance_timeout_ms,
                                     protocols=protocols)
        self._join_timeout = join_timeout
        self._attempt = attempt
        self._step = "probe"

    def start(self) -> Send:
        log.debug("group %r: generation %d does not form under leader %r: is it a member? "
                  "(a Heartbeat in its name)", self.group_id, self.generation, self.leader)
        return self._send(wire.heartbeat(self.group_id, self.generation, self.leader))

    def on_response(self, response: Any) -> Send | None:
        code = response.error_code
        step = self._step
        log.debug("group %r: stand-in for %r: %s answered %d", self.group_id, self.leader,
                  step, code)
        if step == "probe":
            if code != _UNKNOWN_MEMBER_ID:
                self._end("the leader is a member")
                return None
            log.warning("group %r: generation %d cannot form: the coordinator names as its "
                        "leader %r, which left the group; standing in for it, to start a new "
                        "generation", self.group_id, self.generation, self.leader)
            self._step = "join"
            return self._send(self._join, self._join_timeout)
        if step == "join":
            if code:
                self._end(f"JoinGroup answered {code}")
                return None
            if response.leader != response.member_id:
                return self._leave()  # taken in, not as leader: out again
            self.generation = response.generation_id
            self._step = "sync"
            nothing = wire.assignment_bytes([])
            return self._send(wire.sync_group(
                self.group_id, self.generation, self.leader, response.protocol_name or "",
                {member.member_id: nothing for member in response.members or ()}))
        if step == "sync":
            return self._leave()
        self._end(f"LeaveGroup answered {code}; a new generation begins")
        return None

    def on_failure(self) -> Send | None:
        """No answer (a cut connection): out again if the JoinGroup may have been taken in."""
        if self._step in ("join", "sync"):
            return self._leave()
        self._end(f"no answer to its {self._step}")
        return None

    def _leave(self) -> Send:
        self._step = "leave"
        return self._send(wire.leave_group(self.group_id, self.leader,
                                           reason="stood in for a departed leader"))

    def _end(self, why: str) -> None:
        log.debug("group %r: stand-in for leader %r of generation %d ends: %s", self.group_id,
                  self.leader, self.generation, why)

    def _send(self, request: Any, timeout: float | None = None) -> Send:
        return Send(request, KIND, self._attempt, timeout)
