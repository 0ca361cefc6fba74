"""The producer's conversation with the coordinators: what it asks, how, and how it reads answers.

Private to :mod:`eosclient._core.txn`, whose ``TransactionCore`` decides *what* to ask and what
each answer does to its state (``txn.py``, "answers"). This module keeps everything about the
asking itself, in three parts:

* **Requests and answers, as kafka-python objects.** Requests are built without a version: the
  I/O layer negotiates one per broker, and kafka-python encodes only the fields that version has.
  Fields are set so that every version in ``eosclient._protocol.apis`` encodes correctly:
  FindCoordinator gets both ``key`` (v0-v3) and ``coordinator_keys`` (v4, KIP-699), and its
  response is read from ``coordinators`` when present, else from the top-level fields;
  AddPartitionsToTxn uses the ``v3_and_below_*`` fields (the client caps the API at v3; v4+ is the
  broker-to-broker batched form of KIP-890); InitProducerId's KIP-360 fields (``producer_id``,
  ``producer_epoch``) exist from v3 on, and at v0-v2 kafka-python drops them, so the bump form
  silently becomes the plain form, which is exactly the fallback an old broker needs. Readers
  return error codes only; classifying them is ``eosclient.errors``' job, never this one's.
* **What an error's kind is to the state machine** (:func:`input_for`), and the one signal that
  is not an error code: a broker that closes the connection on EndTxn (Tansu, for a stale epoch)
  :data:`CLOSES_MEAN_FENCED` times in a row has fenced the producer.
* **The requests in progress** (:class:`Conversation`). A :class:`Job` is one request to get
  answered. It is emitted (as a :class:`SendRequest`) when its coordinator is known, a
  FindCoordinator job being added first when it is not; it is re-emitted after a retriable
  failure, with exponential backoff expressed as ``not_before`` (no sleeping). Every request
  object in flight maps back to its job, so an answer for a job that was cancelled meanwhile is
  recognised and dropped. It also remembers, per coordinator, whether that broker rejected
  InitProducerId's KIP-360 form (Tansu answers it with UNKNOWN_SERVER_ERROR): a bump to such a
  broker goes out in the plain form. The choice is per broker, never for the producer's life: a
  coordinator that moves to a broker that accepts the form gets it again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from eosclient._core._txn_table import Input
from eosclient._core.types import NO_IDENTITY, ProducerIdentity, TopicPartition
from eosclient._protocol.apis import APIS
from eosclient.errors import (
    AbortableError,
    ApiKey,
    EosError,
    EpochBumpRequiredError,
    FencedError,
    KafkaConnectionError,
)

__all__ = [
    "BUMP_FORM_REJECTED",
    "CLOSES_MEAN_FENCED",
    "MAY_LAND_LATE",
    "QUICK_RETRY",
    "REGISTRATION",
    "Conversation",
    "Destination",
    "GroupMetadata",
    "InitForm",
    "Job",
    "Node",
    "SendRequest",
    "Step",
    "closed_by_broker",
    "fenced_by_closes",
    "input_for",
]

_TRANSACTION_KEY = 1  # FindCoordinator key_type: 0 = group, 1 = transaction
_GROUP_KEY = 0
QUICK_RETRY = 0.020
"""Seconds before retrying CONCURRENT_TRANSACTIONS right after a transaction ended (KAFKA-5482)."""
_REDISCOVER = frozenset({15, 16})  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: look it up again
_KIP360_VERSION = 3  # InitProducerId's first version with producer id and epoch in the request
BUMP_FORM_REJECTED = frozenset({-1, 35, 59})
"""InitProducerId codes that reject the KIP-360 bump form (see ``_error_table``'s notes): Tansu
answers UNKNOWN_SERVER_ERROR (-1), old brokers UNSUPPORTED_VERSION (35) or UNKNOWN_PRODUCER_ID
(59)."""
CLOSES_MEAN_FENCED = 3
"""EndTxn attempts in a row answered by the broker closing the connection that mean "fenced"."""


# -- what a conversation is made of ----------------------------------------------------------------


class Node(NamedTuple):
    """A broker, as FindCoordinator names it."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """The consumer's group membership that TxnOffsetCommit carries (KIP-447).

    With the defaults (a bare group id) the coordinator cannot fence a zombie consumer; pass the
    consumer's generation and member id to get that protection.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class Destination(enum.Enum):
    """Where a request goes; the facade resolves coordinators through :attr:`SendRequest.node`."""

    TXN_COORDINATOR = "the transaction coordinator"
    GROUP_COORDINATOR = "the group coordinator"
    ANY_BROKER = "any broker"


@dataclass(frozen=True, slots=True)
class SendRequest:
    """Send ``request`` to ``node`` (any broker when None), not before ``not_before``."""

    request: Any
    destination: Destination
    node: Node | None
    not_before: float


class Step(enum.Enum):
    """What a coordinator request is for; the value is its API."""

    FIND = ApiKey.FIND_COORDINATOR
    INIT = ApiKey.INIT_PRODUCER_ID
    ADD_PARTITIONS = ApiKey.ADD_PARTITIONS_TO_TXN
    ADD_OFFSETS = ApiKey.ADD_OFFSETS_TO_TXN
    OFFSETS = ApiKey.TXN_OFFSET_COMMIT
    END_TXN = ApiKey.END_TXN


REGISTRATION = frozenset({Step.ADD_PARTITIONS, Step.ADD_OFFSETS, Step.OFFSETS})
"""Steps that must all be settled before EndTxn."""
MAY_LAND_LATE = REGISTRATION | {Step.END_TXN}
"""Steps whose lost request could land on the next transaction (``txn.Stragglers``)."""


class InitForm(enum.Enum):
    """The two forms of InitProducerId (the I/O layer picks the version; below v3 there is only
    the plain one, so kafka-python drops the KIP-360 fields and the bump form goes out plain)."""

    PLAIN = "InitProducerId(transactional id): a new epoch for whoever asks, fencing the owner"
    BUMP = "InitProducerId(transactional id, producer id, epoch): KIP-360, the owner's bump only"


@dataclass(eq=False)
class Job:
    """One coordinator request to get answered, re-sent until it is."""

    step: Step
    destination: Destination
    key: str = ""  # the coordinator's key (transactional id or group id)
    target: Destination = Destination.TXN_COORDINATOR  # FIND: which coordinator it looks up
    partitions: frozenset[TopicPartition] = frozenset()
    group: GroupMetadata | None = None
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    bump_from: ProducerIdentity = NO_IDENTITY  # INIT: the answer must be its successor (KIP-360)
    form: InitForm = InitForm.PLAIN  # INIT: the form of the request last built
    committed: bool = False  # END_TXN: commit or abort
    waiter: Callable[[EosError | None], None] | None = None  # finishes a call waiting on it
    not_before: float = 0.0
    attempts: int = 0
    quick_attempts: int = 0  # CONCURRENT_TRANSACTIONS answers in a row (the quick backoff)
    request: Any = None  # in flight when set
    sent_as: ProducerIdentity = NO_IDENTITY
    sent_to: Node | None = None  # the coordinator the last request went to (None: any broker)
    sent_version: int | None = None  # the version the I/O layer sent it at, once answered
    closes_in_a_row: int = 0  # END_TXN: attempts the broker answered by closing the connection
    maybe_applied: bool = False  # a request of it was lost: the broker may have acted
    lost_answers: int = 0  # how many of its requests were lost (each may have acted)
    done: bool = False


# -- requests built, answers read ------------------------------------------------------------------


def find_coordinator(key: str, *, group: bool) -> Any:
    """FindCoordinator for a transactional id (``group=False``) or a group id."""
    key_type = _GROUP_KEY if group else _TRANSACTION_KEY
    return APIS[ApiKey.FIND_COORDINATOR].request(
        key=key, key_type=key_type, coordinator_keys=[key]
    )


def init_producer_id(
    transactional_id: str | None, timeout_ms: int, bump_from: ProducerIdentity = NO_IDENTITY
) -> Any:
    """InitProducerId; with ``bump_from`` set, the KIP-360 form that bumps that identity."""
    return APIS[ApiKey.INIT_PRODUCER_ID].request(
        transactional_id=transactional_id,
        transaction_timeout_ms=timeout_ms,
        producer_id=bump_from.producer_id,
        producer_epoch=bump_from.epoch,
    )


def add_partitions(
    transactional_id: str, identity: ProducerIdentity, partitions: Iterable[TopicPartition]
) -> Any:
    """One AddPartitionsToTxn (v0-v3 form) for every partition given."""
    api = APIS[ApiKey.ADD_PARTITIONS_TO_TXN]
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    topics = [
        api.request.AddPartitionsToTxnTopic(name=topic, partitions=numbers)
        for topic, numbers in by_topic.items()
    ]
    return api.request(
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=identity.producer_id,
        v3_and_below_producer_epoch=identity.epoch,
        v3_and_below_topics=topics,
    )


def add_offsets(transactional_id: str, identity: ProducerIdentity, group_id: str) -> Any:
    """AddOffsetsToTxn: put the group's offsets partition into the transaction."""
    return APIS[ApiKey.ADD_OFFSETS_TO_TXN].request(
        transactional_id=transactional_id,
        producer_id=identity.producer_id,
        producer_epoch=identity.epoch,
        group_id=group_id,
    )


def txn_offset_commit(
    transactional_id: str,
    identity: ProducerIdentity,
    group: GroupMetadata,
    offsets: Mapping[TopicPartition, int],
) -> Any:
    """TxnOffsetCommit with the group's generation, member id and instance id (KIP-447)."""
    request = APIS[ApiKey.TXN_OFFSET_COMMIT].request
    topic_cls = request.TxnOffsetCommitRequestTopic
    partition_cls = topic_cls.TxnOffsetCommitRequestPartition
    by_topic: dict[str, list[Any]] = {}
    for tp, offset in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            partition_cls(partition_index=tp.partition, committed_offset=offset,
                          committed_leader_epoch=-1, committed_metadata="")
        )
    return request(
        transactional_id=transactional_id,
        group_id=group.group_id,
        producer_id=identity.producer_id,
        producer_epoch=identity.epoch,
        generation_id=group.generation_id,
        member_id=group.member_id,
        group_instance_id=group.group_instance_id,
        topics=[topic_cls(name=name, partitions=parts) for name, parts in by_topic.items()],
    )


def end_txn(transactional_id: str, identity: ProducerIdentity, *, committed: bool) -> Any:
    """EndTxn: commit or abort the open transaction."""
    return APIS[ApiKey.END_TXN].request(
        transactional_id=transactional_id,
        producer_id=identity.producer_id,
        producer_epoch=identity.epoch,
        committed=committed,
    )


def coordinator_of(response: Any, key: str) -> tuple[int, str | None, Node]:
    """The (error code, error message, node) a FindCoordinator response gives for ``key``."""
    for entry in getattr(response, "coordinators", None) or ():
        if entry.key == key:
            node = Node(entry.node_id, entry.host, entry.port)
            return entry.error_code, entry.error_message, node
    node = Node(response.node_id, response.host, response.port)
    return response.error_code, getattr(response, "error_message", None), node


def partition_codes(response: Any) -> dict[TopicPartition, int]:
    """Every partition's error code in an AddPartitionsToTxn response (v0-v3 layout)."""
    return {
        TopicPartition(topic.name, result.partition_index): result.partition_error_code
        for topic in response.results_by_topic_v3_and_below
        for result in topic.results_by_partition
    }


def offset_commit_codes(response: Any) -> list[int]:
    """Every partition's error code in a TxnOffsetCommit response."""
    return [part.error_code for topic in response.topics for part in topic.partitions]


# -- what an answer is to the state machine --------------------------------------------------------


def input_for(error: EosError) -> Input:
    """The broker event an error's kind is (retriable errors never get here)."""
    if isinstance(error, FencedError):
        return Input.RECV_FENCED
    if isinstance(error, EpochBumpRequiredError):
        return Input.RECV_BUMP_REQUIRED
    if isinstance(error, AbortableError):
        return Input.RECV_ABORTABLE
    return Input.RECV_FATAL


def closed_by_broker(error: EosError | None) -> bool:
    """Whether the connection ended because the broker closed it (EOF or reset), rather than a
    request timeout or a failed connect: the I/O layer chains the socket's reason as the cause."""
    return isinstance(error, KafkaConnectionError) and isinstance(
        error.__cause__, (EOFError, ConnectionResetError))


def fenced_by_closes(count: int, last: EosError | None) -> FencedError:
    """The FencedError that :data:`CLOSES_MEAN_FENCED` closes in a row stand for, ``last`` (the
    last connection error) chained under its cause."""
    fenced = FencedError(
        f"EndTxn: the broker closed the connection instead of answering, {count} attempts in "
        "a row; taken as a fence (another instance owns the transactional.id)",
        api=ApiKey.END_TXN)
    cause = KafkaConnectionError(
        "the broker closes the connection on EndTxn, as Tansu does for an EndTxn with a stale "
        "producer epoch", api=ApiKey.END_TXN)
    cause.__cause__ = last
    fenced.__cause__ = cause
    return fenced


# -- the requests in progress ----------------------------------------------------------------------


class Conversation:
    """Jobs, flights and coordinators of one producer.

    Args:
        backoff: Seconds before the first retry; doubled per attempt.
        backoff_max: The cap on a retry's wait.
    """

    def __init__(self, *, backoff: float, backoff_max: float) -> None:
        self.jobs: list[Job] = []
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
    ) -> list[SendRequest]:
        """A ``SendRequest`` for every job not in flight that is ``ready``, oldest job first."""
        sends: list[SendRequest] = []
        index = 0
        while index < len(self.jobs):  # a lookup added on the way is emitted too
            job = self.jobs[index]
            index += 1
            if job.request is None and ready(job):
                self._emit(job, build, identity, sends)
        return sends

    def _emit(
        self,
        job: Job,
        build: Callable[[Job], Any],
        identity: ProducerIdentity,
        sends: list[SendRequest],
    ) -> None:
        node = None
        if job.destination is not Destination.ANY_BROKER:
            node = self.coordinator(job.destination, job.key)
            if node is None:
                self._look_up(job.destination, job.key, job.not_before)
                return
        job.sent_to = node
        job.request, job.sent_as = build(job), identity
        self._flights[id(job.request)] = job
        sends.append(SendRequest(job.request, job.destination, node, job.not_before))

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

    # -- InitProducerId's form, per broker (KIP-360) -----------------------------------------------

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
        job.lost_answers += lost
        if error is not None:
            self.last_retriable = error
        rediscover = rediscover or lost or (error is not None and error.code in _REDISCOVER)
        if rediscover and job.destination is not Destination.ANY_BROKER:
            self._coordinators.pop((job.destination, job.key), None)
