"""Ending a transaction that another process opened, by its identity alone; sans-IO.

Theory of operation. EndTxn (KIP-98) names a transaction by (transactional id, producer id,
epoch), nothing else: the coordinator does not ask which connection or process began it. So a
producer may write a transaction, flush it, and *hand it over* as a
:class:`PreparedTransaction` without ending it; any process may later commit or abort it with
FindCoordinator(transactional id) then EndTxn. This is how Flink's Kafka sink resumes the
transactions of a checkpoint after a restart, and what KIP-939 ("prepared" transactions) will
make a first-class state; neither broker here has KIP-939, and both accept the plain form
(probed: noida-db 0.2.3 and Tansu 0.6.0 commit and abort from a fresh connection).

What an answer means here (:meth:`EndPrepared.on_response`):

* NONE: done. Both brokers here also answer NONE to a repeated EndTxn, commit or abort, of a
  transaction already ended with the same epoch (Kafka answers NONE to a repeated commit): so
  a caller that lost the answer simply asks again.
* A retriable error (CONCURRENT_TRANSACTIONS 51, NOT_COORDINATOR 16, COORDINATOR_NOT_AVAILABLE
  15, COORDINATOR_LOAD_IN_PROGRESS 14, a cut connection): find the coordinator again and retry,
  with backoff, until the caller's deadline.
* INVALID_PRODUCER_EPOCH (47) / PRODUCER_FENCED (90): another instance initialised the
  transactional id since, which aborted the transaction (on noida-db and Tansu as on Kafka).
  Tansu closes the connection instead of answering; :data:`CLOSES_MEAN_FENCED` closes in a row
  are taken as that fence, as the producer does.
* Anything else: the error, as :func:`eosclient.errors.error_for` classifies it.

:class:`CheckPrepared` asks, without ending anything, whether a prepared transaction is still
live: AddPartitionsToTxn (v0-v3) of a partition under its identity is answered NONE while the
epoch is current (the partition joins the transaction: harmless, it gets a marker when the
transaction ends) and INVALID_PRODUCER_EPOCH / PRODUCER_FENCED once another instance
initialised the id, which aborted it. A driver checks every task's transaction this way before
deciding to commit them, so a zombie attempt's stale hand-over is never decided.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from eosclient._core import _txn_wire as wire
from eosclient._core._txn_wire import CLOSES_MEAN_FENCED, closed_by_broker, fenced_by_closes
from eosclient._core.types import ProducerIdentity, TopicPartition
from eosclient.errors import ApiKey, EosError, RetriableError, error_for, error_for_codes

__all__ = ["CheckPrepared", "EndPrepared", "PreparedTransaction", "Step"]


@dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """A flushed, still open transaction, as another process needs it to end it.

    Attributes:
        transactional_id: The producer's ``transactional.id``.
        producer_id: The producer id the coordinator gave it.
        epoch: Its epoch; an EndTxn with another epoch is refused as fenced.
    """

    transactional_id: str
    producer_id: int
    epoch: int

    @property
    def identity(self) -> ProducerIdentity:
        return ProducerIdentity(self.producer_id, self.epoch)


class Step(enum.Enum):
    FIND = "FindCoordinator"  # to any broker
    END = "EndTxn"  # to the coordinator found


class EndPrepared:
    """One EndTxn of a :class:`PreparedTransaction`: requests out, answers in, time passed in.

    ``next_request(now)`` gives ``(step, request)`` when one is due (None while waiting for an
    answer or for the backoff); feed its answer to :meth:`on_response` or its loss to
    :meth:`on_failure`. :attr:`done` then :attr:`error` say how it ended.
    """

    def __init__(self, prepared: PreparedTransaction, *, commit: bool,
                 backoff: float = 0.02, backoff_max: float = 1.0,
                 coordinator: wire.Node | None = None) -> None:
        self.prepared = prepared
        self.commit = commit
        self.done = False
        self.error: EosError | None = None
        self.coordinator = coordinator  # known already (an earlier call found it), or looked up
        self.attempts = 0
        self._backoff, self._backoff_max = backoff, backoff_max
        self._not_before = 0.0
        self._waiting = False
        self._closes = 0

    @property
    def step(self) -> Step:
        return Step.FIND if self.coordinator is None else Step.END

    def next_request(self, now: float) -> tuple[Step, Any] | None:
        if self.done or self._waiting or now < self._not_before:
            return None
        self._waiting = True
        key = self.prepared.transactional_id
        if self.coordinator is None:
            return Step.FIND, wire.find_coordinator(key, group=False)
        self.attempts += 1
        return Step.END, self._request()

    def _request(self) -> Any:
        return wire.end_txn(self.prepared.transactional_id, self.prepared.identity,
                            committed=self.commit)

    def _error(self, response: Any) -> EosError | None:
        code = response.error_code
        return error_for(ApiKey.END_TXN, code) if code else None

    def wait_until(self) -> float:
        """The earliest time :meth:`next_request` may give a request."""
        return self._not_before

    def on_response(self, response: Any, now: float) -> None:
        self._waiting = False
        if self.coordinator is None:
            code, message, node = wire.coordinator_of(response, self.prepared.transactional_id)
            if code:
                self._retry(error_for(ApiKey.FIND_COORDINATOR, code, message), now)
            else:
                self.coordinator = node
            return
        self._closes = 0
        error = self._error(response)
        if error is None:
            self.done, self.error = True, None
            return
        if isinstance(error, RetriableError):
            self._retry(error, now)
        else:
            self._fail(error)

    def on_failure(self, error: EosError, now: float) -> None:
        """The request's connection failed or its answer did not come."""
        self._waiting = False
        if self.coordinator is not None and closed_by_broker(error):
            self._closes += 1
            if self._closes >= CLOSES_MEAN_FENCED:
                self._fail(fenced_by_closes(self._closes, error))
                return
        self._retry(error, now)

    def _retry(self, error: EosError, now: float) -> None:
        self.error = error  # the last reason, for a timeout's message
        self.coordinator = None  # NOT_COORDINATOR and friends: look it up again
        delay = min(self._backoff * 2 ** min(self.attempts, 16), self._backoff_max)
        self._not_before = now + delay

    def _fail(self, error: EosError) -> None:
        self.done, self.error = True, error


class CheckPrepared(EndPrepared):
    """Whether a prepared transaction is still live (see the module docstring): done with no
    error if so, a FencedError if another instance initialised its id since."""

    def __init__(self, prepared: PreparedTransaction, partition: TopicPartition, *,
                 backoff: float = 0.02, backoff_max: float = 1.0,
                 coordinator: wire.Node | None = None) -> None:
        super().__init__(prepared, commit=False, backoff=backoff, backoff_max=backoff_max,
                         coordinator=coordinator)
        self.partition = partition

    def _request(self) -> Any:
        return wire.add_partitions(self.prepared.transactional_id, self.prepared.identity,
                                   [self.partition])

    def _error(self, response: Any) -> EosError | None:
        return error_for_codes(ApiKey.ADD_PARTITIONS_TO_TXN,
                               wire.partition_codes(response).values())
