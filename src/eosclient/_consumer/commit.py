"""The application's offset commit, written once as steps for both fronts.

:func:`commit` is ``commit()`` of :class:`~eosclient.ReadCommittedConsumer` and of
:class:`~eosclient.aio.AsyncReadCommittedConsumer`; :func:`commit_start` and
:func:`commit_finish` are the exactly-once processor's plain commit of a committed
transaction's offsets, begun at once and waited for later. Each sends an
:class:`~eosclient._consumer.offsets.OffsetJob` through the group coordinator and waits for it
(:meth:`GroupCoordinator.wait_for <eosclient._consumer.group.GroupCoordinator.wait_for>`).

A rebalance does not make a commit fail by itself. A subscribed member's commit is first tried
under its current generation (the coordinator accepts it until the rebalance completes); if the
coordinator has moved on (22 ILLEGAL_GENERATION, 25 UNKNOWN_MEMBER_ID, 27 REBALANCE_IN_PROGRESS),
the rebalance is finished here, its callbacks run as a poll would run them
(:meth:`ConsumerSession.rebalance <eosclient._consumer.session.ConsumerSession.rebalance>`),
and the offsets of the partitions the member still owns are committed and its positions moved
there, so none of those records is delivered again. The others went to another member:
:class:`~eosclient.errors.CommitFailedError` names them. Inside ``on_revoke`` after the
generation was lost it is too late to commit anything, and a commit there cannot rebalance
again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from eosclient._consumer import args
from eosclient._consumer.group import GroupCoordinator
from eosclient._consumer.membership import MOVED_ON
from eosclient._consumer.offsets import OffsetJob
from eosclient._core.types import TopicPartition
from eosclient._net.steps import Block, Steps
from eosclient.errors import (
    AbortableError,
    ApiKey,
    CommitFailedError,
    EosError,
    KafkaTimeoutError,
    RetriableError,
)

if TYPE_CHECKING:
    from eosclient._consumer.session import ConsumerSession

__all__ = ["commit", "commit_finish", "commit_start", "finish_rebalance"]


def commit(session: ConsumerSession, offsets: dict[TopicPartition, int] | None,
           timeout: float | None, *,
           unseen: Mapping[TopicPartition, int] | None = None) -> Steps[None]:
    """Commit ``offsets`` (checked; None: every assigned partition's position, where
    ``unseen`` names an earlier offset, that one) for the group (the module docstring).

    Raises:
        CommitFailedError: some partitions went to another member before their offsets could
            be committed (named in ``.partitions``); the others were committed.
        KafkaTimeoutError: not answered (or the rebalance not finished) by ``timeout``; it may
            still be committed.
        IllegalStateError: no ``group_id``, or closed.
        FencedError, FatalError: the group failed.
    """
    group = session.need_group("commit()")
    deadline = session.deadline(timeout)
    session.check_open()
    checked = offsets if offsets is not None else {**session.positions(), **(unseen or {})}
    if not checked:
        return
    if _commit_now(session, group, checked):
        try:
            yield from group.wait_for(group.commit(checked), session.loop, deadline,
                                      "commit()", session.check_open)
            return
        except (AbortableError, RetriableError) as exc:
            if not _moved_on(session, group, exc):
                raise
    yield from finish_rebalance(session, group, deadline)
    session.check_open()
    kept = {tp: offset for tp, offset in checked.items() if tp in session.assignment.states}
    if kept:
        yield from group.wait_for(group.commit(kept), session.loop, deadline, "commit()",
                                  session.check_open)
        _skip_committed(session, kept)
    lost = sorted(set(checked) - set(kept))
    if lost:
        raise _commit_failed(lost, kept=bool(kept))


def commit_start(session: ConsumerSession, offsets: Mapping[TopicPartition, int],
                 ) -> OffsetJob | None:
    """Start committing ``offsets`` under the current generation and return at once (takes
    the lock): the processor's second, plain commit of a committed transaction's offsets,
    waited for (:func:`commit_finish`) only before it writes offsets again. No rebalance is
    finished: a subscribed member out of its generation sends nothing (None).

    Raises:
        IllegalStateError: no ``group_id``, or closed.
        TypeError, ValueError: bad offsets; nothing was sent.
    """
    group = session.need_group("commit()")
    with session.lock:
        session.check_open()
        if session.subscribed and not group.membership.has_generation():
            return None
        job = group.commit(args.offsets_of(offsets))
    session.loop.wake()
    return job


def commit_finish(session: ConsumerSession, job: OffsetJob, timeout: float | None,
                  ) -> Steps[None]:
    """Wait for a commit :func:`commit_start` began.

    Raises:
        KafkaTimeoutError: not answered by ``timeout``; it may still land.
        EosError: the coordinator refused it (classified as :func:`commit` raises).
    """
    group = session.need_group("commit()")
    deadline = session.deadline(timeout)
    session.check_open()
    yield from group.wait_for(job, session.loop, deadline, "commit()", session.check_open)


def finish_rebalance(session: ConsumerSession, group: GroupCoordinator,
                     deadline: float) -> Steps[None]:
    """Run the rebalance steps (revoke, then assign, callbacks included) until the member is
    STABLE again, as a poll would.

    Raises:
        KafkaTimeoutError: the group did not finish rebalancing by ``deadline``.
        FencedError, FatalError: the membership failed.
        Whatever a rebalance callback raised.
    """
    while True:
        yield from session.rebalance()
        if session.rebalanced(group):
            return
        if session.rebalance_due():
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KafkaTimeoutError(f"commit(): group {group.group_id!r} still rebalancing "
                                    f"({group.membership.state.name}) when the timeout passed",
                                    api=ApiKey.OFFSET_COMMIT)
        yield Block(remaining)


def _commit_now(session: ConsumerSession, group: GroupCoordinator,
                offsets: Mapping[TopicPartition, int]) -> bool:
    """Whether the commit is tried under the current generation first (else the rebalance is
    finished first).

    Raises:
        CommitFailedError: inside ``on_revoke`` after the generation was lost: too late.
    """
    grouped = session.subscribed
    if grouped and group.in_callback and not group.membership.has_generation():
        raise _commit_failed(sorted(offsets), kept=False)  # on_revoke: too late
    return not grouped or group.membership.has_generation()


def _moved_on(session: ConsumerSession, group: GroupCoordinator, exc: EosError) -> bool:
    """Whether a commit that failed with ``exc`` is retried after finishing the rebalance:
    22 ILLEGAL_GENERATION, 25 UNKNOWN_MEMBER_ID, 27 REBALANCE_IN_PROGRESS mean the group moved
    on; anything else (or a commit from inside on_revoke, which cannot rebalance again) is the
    caller's."""
    return session.subscribed and exc.code in MOVED_ON and not group.in_callback


def _skip_committed(session: ConsumerSession, kept: Mapping[TopicPartition, int]) -> None:
    """After the rebalance's commit: the committed records are not delivered again."""
    for tp, offset in kept.items():
        state = session.assignment.states.get(tp)
        if state is not None and (state.position or 0) < offset:
            state.seek(offset)  # processed already: not delivered again
    session.loop.wake()


def _commit_failed(lost: list[TopicPartition], *, kept: bool) -> CommitFailedError:
    names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in lost)
    return CommitFailedError(
        f"a rebalance gave {names} to another member (or is giving them) before their offsets "
        "were committed; their next owner reads them again from the last commit"
        + (" (the offsets of the partitions this member kept were committed)" if kept else ""),
        partitions=lost)
