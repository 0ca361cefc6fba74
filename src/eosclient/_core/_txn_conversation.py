"""The coordinator requests in progress: jobs, requests in flight, coordinators known, backoff.

Private to :mod:`eosclient._core.txn`, which decides *what* to ask; this module only keeps track
of asking. A :class:`~eosclient._core._txn_values.Job` is one request to get answered. It is
emitted (as a ``SendRequest``) when its coordinator is known, a FindCoordinator job being added
first when it is not; it is re-emitted after a retriable failure, with exponential backoff
expressed as ``not_before`` (no sleeping). Every request object in flight maps back to its job,
so an answer for a job that was cancelled meanwhile is recognised and dropped.

It also remembers, per coordinator, whether that broker rejected InitProducerId's KIP-360 form
(Tansu answers it with UNKNOWN_SERVER_ERROR): a bump to such a broker goes out in the plain form.
The choice is per broker, never for the producer's life: a coordinator that moves to a broker
that accepts the form gets it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from eosclient._core._txn_values import Destination, InitForm, Job, Output, SendRequest, Step
from eosclient._core._txn_wire import Node
from eosclient._core.types import NO_IDENTITY, ProducerIdentity
from eosclient.errors import EosError

__all__ = ["QUICK_RETRY", "Conversation"]

QUICK_RETRY = 0.020
"""Seconds before retrying CONCURRENT_TRANSACTIONS right after a transaction ended (KAFKA-5482)."""

_REDISCOVER = frozenset({15, 16})  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: look it up again
_KIP360_VERSION = 3  # InitProducerId's first version with producer id and epoch in the request


class Conversation:
    """Jobs, flights and coordinators of one producer.

    Args:
        backoff: Seconds before the first retry; doubled per attempt.
        backoff_max: The cap on a retry's wait.
    """

    def __init__(self, *, backoff: float, backoff_max: float) -> None:
        self.jobs: list[Job] = []
        self.outbox: list[Output] = []
        self.last_retriable: EosError | None = None
        self.retries = 0  # requests sent again (stats())
        self._backoff = backoff
        self._backoff_max = backoff_max
        self._flights: dict[int, Job] = {}
        self._coordinators: dict[tuple[Destination, str], Node] = {}
        self._plain_only: set[Node] = set()  # coordinators that rejected the KIP-360 form

    def add(self, job: Job) -> None:
        """Start asking for ``job``; :meth:`emit` sends it."""
        self.jobs.append(job)

    def has(self, steps: Iterable[Step]) -> bool:
        """Whether any job for one of ``steps`` is still to be answered."""
        wanted = frozenset(steps)
        return any(job.step in wanted for job in self.jobs)

    def finish(self, job: Job) -> None:
        """The job is answered (or given up): forget it."""
        job.done = True
        if job in self.jobs:
            self.jobs.remove(job)

    def cancel_all(self) -> None:
        """Abandon every job; answers to their requests will be dropped."""
        for job in self.jobs:
            job.done = True
        self.jobs.clear()

    def drop_unsent(self, steps: Iterable[Step]) -> list[Job]:
        """Abandon the jobs for ``steps`` that the broker cannot have acted on; return them."""
        wanted = frozenset(steps)
        dropped = [
            job for job in self.jobs
            if job.step in wanted and job.request is None and not job.maybe_applied
        ]
        for job in dropped:
            self.finish(job)
        return dropped

    def resume(self, now: float) -> None:
        """Send every waiting job at once (the application called again)."""
        for job in self.jobs:
            if job.request is None:
                job.not_before = min(job.not_before, now)

    def coordinator(self, destination: Destination, key: str) -> Node | None:
        """The coordinator known for ``key``, or None."""
        return self._coordinators.get((destination, key))

    def emit(
        self,
        build: Callable[[Job], Any],
        identity: ProducerIdentity,
        ready: Callable[[Job], bool],
    ) -> None:
        """Put a ``SendRequest`` in the outbox for every job due and ``ready``."""
        index = 0
        while index < len(self.jobs):  # a lookup added on the way is emitted too
            job = self.jobs[index]
            index += 1
            if job.request is None and ready(job):
                self._emit(job, build, identity)

    def _emit(self, job: Job, build: Callable[[Job], Any], identity: ProducerIdentity) -> None:
        node = None
        if job.destination is not Destination.ANY_BROKER:
            node = self.coordinator(job.destination, job.key)
            if node is None:
                self._look_up(job.destination, job.key, job.not_before)
                return
        job.sent_to = node
        job.request, job.sent_as = build(job), identity
        self._flights[id(job.request)] = job
        self.outbox.append(SendRequest(job.request, job.destination, node, job.not_before))

    def look_up_ahead(self, target: Destination, key: str, now: float) -> None:
        """Find ``key``'s coordinator now, unless it is known or being looked up, so that a
        request to it declared ahead (a pre-registered group) need not wait for the lookup."""
        if self.coordinator(target, key) is None:
            self._look_up(target, key, now)

    def _look_up(self, target: Destination, key: str, not_before: float) -> None:
        for job in self.jobs:
            if job.step is Step.FIND and job.target is target and job.key == key:
                return
        self.add(Job(Step.FIND, Destination.ANY_BROKER, key=key, target=target,
                     not_before=not_before))

    def answered(self, request: Any) -> Job | None:
        """The job ``request`` was sent for, now not in flight; None if it was abandoned.

        Raises:
            ValueError: ``request`` was not sent by this conversation, or was answered already.
        """
        job = self._flights.pop(id(request), None)
        if job is None or job.request is not request:
            raise ValueError(f"{type(request).__name__} is not a request in flight here")
        job.request, job.sent_version = None, getattr(request, "API_VERSION", None)
        return None if job.done else job

    # -- InitProducerId's form, per broker (KIP-360) -----------------------------------------

    def init_form(self, job: Job) -> InitForm:
        """The form to build an INIT job in: the bump form wherever its broker may accept it."""
        if job.bump_from == NO_IDENTITY or job.sent_to in self._plain_only:
            return InitForm.PLAIN
        return InitForm.BUMP

    def sent_form(self, job: Job) -> InitForm:
        """The form the broker received: below v3 the KIP-360 fields are not on the wire."""
        version = job.sent_version
        old = version is not None and version < _KIP360_VERSION
        return InitForm.PLAIN if old else job.form

    def reject_bump_form(self, job: Job) -> None:
        """``job``'s broker rejected the bump form: that broker gets the plain form from now on."""
        if job.sent_to is not None:
            self._plain_only.add(job.sent_to)

    def plain_only(self) -> frozenset[Node]:
        """The coordinators known to reject the KIP-360 form."""
        return frozenset(self._plain_only)

    def found(self, job: Job, node: Node) -> None:
        """A FindCoordinator job's answer: remember the coordinator."""
        self._coordinators[(job.target, job.key)] = node
        self.finish(job)

    def retry(
        self,
        job: Job,
        now: float,
        *,
        quick: bool = False,
        lost: bool = False,
        rediscover: bool = False,
        error: EosError | None = None,
    ) -> None:
        """Send ``job`` again after a backoff.

        Args:
            job: The job whose request failed.
            now: The current time.
            quick: Start the backoff at :data:`QUICK_RETRY` (CONCURRENT_TRANSACTIONS).
            lost: The request's answer was lost: the broker may have acted, and the
                coordinator is looked up again.
            rediscover: Look the coordinator up again (a request that never left the client
                because its connection failed).
            error: The retriable error, kept as the cause of a later timeout.
        """
        job.attempts += 1
        self.retries += 1
        # The quick backoff doubles over CONCURRENT_TRANSACTIONS answers in a row only: one
        # after a coordinator move (a few refused connects) still comes back in ~20 ms.
        job.quick_attempts = job.quick_attempts + 1 if quick else 0
        base, tries = (QUICK_RETRY, job.quick_attempts) if quick else (self._backoff,
                                                                        job.attempts)
        job.not_before = now + min(base * 2 ** (tries - 1), self._backoff_max)
        job.maybe_applied = job.maybe_applied or lost
        if error is not None:
            self.last_retriable = error
        rediscover = rediscover or lost or (error is not None and error.code in _REDISCOVER)
        if rediscover and job.destination is not Destination.ANY_BROKER:
            self._coordinators.pop((job.destination, job.key), None)

    def take(self) -> list[Output]:
        """Everything emitted since the last call, oldest first."""
        out, self.outbox = self.outbox, []
        return out
