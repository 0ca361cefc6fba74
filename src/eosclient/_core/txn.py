"""The transactional producer's state machine, sans-IO: calls and responses in, requests out.

Theory of operation
-------------------
A transactional producer holds one identity, ``(producer id, epoch)``, handed out by the
transaction coordinator (InitProducerId), and walks one table of states
(:data:`TRANSACTIONAL_TABLE`, drawn in ``docs/producer-states.md``). Every change of state passes
through :meth:`TransactionCore._transition`, named by its cause: ``CALL_*`` when the application
asked, ``RECV_*`` when a broker answered. A call the table lacks raises
:class:`~eosclient.errors.IllegalStateError` and changes nothing; a broker event the table lacks
is a protocol violation and goes to FATAL. Around the table sits the conversation with the
coordinators: :meth:`~TransactionCore.poll` hands out :class:`SendRequest` values (kafka-python
request objects, no version set, each tagged with where it goes and the earliest time to send
it), and :meth:`~TransactionCore.on_response` takes the answers back. Error codes are classified
only by :func:`eosclient.errors.error_for`; this module decides what each *kind* does here.

The KIPs followed:

* **KIP-98** (transactions). FindCoordinator(transactional id) then InitProducerId; per
  transaction AddPartitionsToTxn before the first Produce to a partition, AddOffsetsToTxn before
  TxnOffsetCommit, EndTxn last, and only once every registration and every batch is settled.
* **KIP-609-style pre-registration** (client side here; the KIP never shipped). ``begin`` with
  partitions and/or a group emits one AddPartitionsToTxn and one AddOffsetsToTxn at once, without
  waiting; a partition may be produced to once its registration succeeded
  (:meth:`~TransactionCore.partition_ready`). Undeclared partitions and groups fail locally.
  Only the declared partitions where a registration left empty is safe go out at ``begin``
  (Decisions, below); the others, and every partition without a declaration, are registered
  lazily, with their first record: all new ones of a drain in one request, one request at a time
  (Java's behaviour). A group's coordinator is looked up as soon as the
  group is named (at ``begin`` or ``send_offsets``), beside its AddOffsetsToTxn, so that
  TxnOffsetCommit follows that answer at once. So a pre-registered transaction takes three rounds
  of requests, the floor without KIP-890: registrations (and a lookup), Produce and
  TxnOffsetCommit, EndTxn. CONCURRENT_TRANSACTIONS (51) on InitProducerId or on a registration
  before any partition of the transaction is registered means the previous transaction is
  still writing markers: retried after 20 ms, doubling (Java: KAFKA-5482).
* **KIP-447**. TxnOffsetCommit carries the consumer's generation, member id and instance id, so
  the group coordinator can fence a zombie consumer.
* **KIP-360** (recovering a broken sequence). An :class:`~eosclient.errors.EpochBumpRequiredError`
  (Produce 45, 59, every Produce rejection the errors table marks so, a batch expired with its
  outcome unknown) makes the transaction abortable with :attr:`Recovery.BUMP_EPOCH`; nothing is
  bumped yet. ``abort`` then fails the unsent batches (:class:`FailUnsent`), waits for the
  in-flight ones, sends EndTxn(abort), then InitProducerId(id, producer id, epoch). A broker that
  rejects that form (Tansu: -1; UNSUPPORTED_VERSION 35; UNKNOWN_PRODUCER_ID 59, as the errors table
  notes) gets the plain InitProducerId(id) instead, and later bumps to that broker go plain at
  once. The answer must be the successor identity (epoch + 1), else FENCED. Only then READY,
  with a new identity and :class:`SequencesReset`. The producer stays ABORTING during the bump,
  so ``abort`` again resumes it. (The rules, and the plain form's residual risk, are in
  ``_txn_answers.py``.)
* **KIP-588**. INVALID_PRODUCER_EPOCH (47) on Produce is abortable-with-bump (the coordinator may
  have aborted on timeout); on the coordinator APIs it is fenced, like PRODUCER_FENCED (90). The
  KIP's recovery (re-claiming the epoch a coordinator bumped on timeout) is deliberately not
  attempted: on noida-db it would fence the live instance (Decisions, below).
* **KIP-890**. TRANSACTION_ABORTABLE (120) is abortable. This client does not use transaction
  version 2 (partitions added by Produce v12, the bump inside EndTxn v5): neither broker here
  offers it (noida-db 0.2.3: Produce v9, EndTxn v3; Tansu 0.6.0: Produce v11, EndTxn v4; no
  finalized ``transaction.version`` feature in either's ApiVersions). The broker's part-1
  verification is what finally closes the KAFKA-14053 window below.

Generations
-----------
Every transaction gets a generation number (:attr:`TransactionCore.generation`, +1 at ``begin``).
``send`` returns it; the accumulator tags each batch with it and drains a new batch only when
:meth:`~TransactionCore.may_drain` agrees, which needs the batch's generation to be the current
one (the accumulator's ``drain`` asks it per batch, so this holds even before the facade applied
``FailUnsent``). Abort emits ``FailUnsent(generation)``. So a record of a failed transaction can
never be drained into the next one (kafka-python 3.0.12 does exactly that after a KIP-360 bump).
A batch already sent is different: its resend (same identity, same sequences) is allowed by
:meth:`~TransactionCore.may_resend`, also while aborting, because EndTxn must follow its answer.

Decisions
---------
* **KAFKA-14053.** A batch still in flight when EndTxn(abort) is written can land *after* the
  abort marker with the same epoch, where a later commit marker could commit it. So EndTxn, for
  abort as for commit, waits until the facade reports no incomplete batch: unsent ones failed,
  in-flight ones answered, or their connection closed. A batch whose answer can never come
  (request timeout, cut connection) must be reported with
  :meth:`~TransactionCore.on_batch_expired` only after the I/O layer closed that connection; it
  makes the abort bump the epoch and delays EndTxn(abort) by ``unknown_outcome_grace_ms``, so a
  request the broker had already read is appended before the marker. That narrows, but on a
  broker without KIP-890 verification cannot close, the window. The alternative of Java's
  proposal for KAFKA-14053 (skip EndTxn, plain fencing InitProducerId, whose abort marker carries
  a new epoch) was not taken: the plain form cannot tell a zombie from the owner and would take
  the transactional.id back from a successor. (Re-initialising, ``init`` in COMMITTING or
  ABORTING, uses the KIP-360 form too, and must get the successor identity, else FENCED.)
* **Unknown outcome.** EndTxn that timed out or lost its connection leaves the state COMMITTING
  or ABORTING with :attr:`Ending.outcome` UNKNOWN; the same EndTxn is re-sent (after finding the
  coordinator again), since the coordinator answers a repeated EndTxn as a success. ``commit``
  again resumes a commit, ``abort`` again an abort; the other one is refused (an unconfirmed
  commit may only be retried as a commit), and so is ``begin``, until the outcome is settled or
  ``init`` re-initialises (a new epoch: the coordinator completes or aborts whatever was open).
  Once settled, the epoch is bumped before READY: the lost EndTxn may still land (the same holds
  for a lost TxnOffsetCommit or registration). ``abort`` may replace a ``commit`` whose EndTxn
  has not been sent.
* **Transaction timeout: the client aborts, at once.** ``transaction.timeout.ms`` is counted
  from the transaction's first registration (the coordinator starts its clock when that request
  arrives, a little later, so the client's deadline comes first). When it passes,
  TIMER_TXN_EXPIRED moves IN_TRANSACTION (or COMMITTING whose EndTxn is unsent, or an
  ABORTABLE_ERROR nobody aborted) to ABORTABLE_ERROR, :class:`TransactionExpired` asks the facade
  to log a WARNING, and the I/O thread sends EndTxn(abort) itself, after the transaction's
  batches are answered (KAFKA-14053), bumping where KIP-360 asks. Java's client only fails the
  next call and leaves the abort to the coordinator, which aborts and bumps the epoch on its
  own. Neither broker here does (BROKERS.md), so a hung application, the very case the setting
  exists for, would hold back the LSO of every partition it wrote, and every read_committed
  reader behind it, for ever; the I/O thread is the only live party left to end it. The abort is
  what a broker would have done, so it breaks no promise: nothing of the transaction was
  committed, and the application still learns of it, because the state stays ABORTABLE_ERROR
  (its next call raises an AbortableError naming the timeout) until ``abort_transaction()``,
  which then finds the abort done (:class:`~eosclient._core._txn_values.EarlyAbort`). A process
  that is stopped altogether (SIGSTOP, a VM pause) cannot do this; its successor's
  InitProducerId aborts the transaction instead.
* **KIP-588 recovery: not attempted, because on noida-db it fences the live instance.** Where
  a coordinator aborts a transaction on timeout it bumps the epoch, and the producer's next
  coordinator request is refused with 47 or 90, exactly as if another instance had taken the
  transactional.id over. KIP-588 lets the producer send InitProducerId(id, producer id, old
  epoch): Kafka's coordinator remembers that the bump was its own (the pre-timeout epoch stays
  as ``lastProducerEpoch``) and answers epoch + 1, and answers PRODUCER_FENCED if another
  instance's InitProducerId made the bump. All the safety is in that memory at the coordinator;
  the producer cannot tell the two cases apart. Not even by the narrowest trigger, "this
  producer's own transaction outlived ``transaction.timeout.ms`` (its timer fired, or the
  refusal came after the deadline) and the refusal answers a request of that transaction": a
  process paused past the timeout (GC, SIGSTOP, a VM) is precisely the zombie whose successor
  re-initialised meanwhile, so the trigger selects the dangerous case as often as the good one.
  The probe is therefore safe only on a broker that refuses a stale epoch in the KIP-360 form
  *without bumping*, and the client cannot learn whether its broker does without sending one.
  noida-db does not (it is lax): asked InitProducerId(id, producer id, e) while the live
  instance holds e + 1, it bumps to e + 2 and answers that (``tests/integration/test_wire.py``
  measures it). The zombie, seeing e + 2 rather than its successor, is FENCED, but the live
  instance is fenced too: both dead, the outcome issue 11 (item 2) removed. Tansu refuses the
  form with UNKNOWN_SERVER_ERROR and does not bump: harmless, but no recovery, and the plain
  form this client falls back to elsewhere (KIP-360, above) would fence the live instance
  outright, so it must never be used for a probe. Neither broker here aborts on timeout
  (BROKERS.md), so on them a probe could only do harm (noida-db) or nothing (Tansu). So 47 and
  90 from the coordinator stay FENCED, also past the timeout; the client's own abort (above)
  is what ends a timed-out transaction here, and where a broker does abort on timeout the
  application closes the producer and starts a new one (Java's behaviour before KIP-588). The
  Produce-47 path is not a probe: its bump follows an EndTxn(abort) that the coordinator
  accepted with the same epoch, which proves the epoch current (noida-db answers a stale
  EndTxn with 47, so that path ends FENCED before any bump). A broker known to be strict (real
  Kafka) could get the probe behind an explicit setting; nothing here can test it.
* **Pre-registration only where an empty partition is safe.** Kafka's coordinator writes its
  marker on every registered partition, written to or not, and Tansu commits such a partition
  too, so registering a declared partition at ``begin`` costs nothing there. noida-db 0.2.3
  answers EndTxn(commit) with INVALID_TXN_STATE (48) when a registered partition got no record
  and the producer id ever aborted records there (an EndTxn(abort), or an InitProducerId that
  found the transaction open: a takeover; a later commit with records there does not clear it).
  It answers only after walking the partitions in no fixed order: those before the empty one
  have their COMMIT marker, the others none, their records open and the LSO held back; its
  coordinator then forgets the partitions, so a repeated EndTxn(commit) answers NONE (and
  DescribeTransactions says CompleteCommit) with nothing written, and a successor's
  InitProducerId aborts nothing (``tests/integration/test_noida_quirks.py``, and the wire
  measurements in ``docs/testing.md``). Neither "committed" nor "aborted" is then true, and
  nothing the client can send makes it so, so it avoids the situation: a declared partition is
  registered at ``begin`` only where the client knows an empty registration is safe, i.e. it
  saw every transaction of its producer id (InitProducerId gave epoch 0: a new producer id,
  never handed to anyone before; a KIP-360 bump of it keeps that) and none of those that were
  not committed queued a record there (:class:`~eosclient._core._txn_values.AbortHistory`).
  Every other declared partition is registered with its first record, so one that gets no
  record is never in the transaction. After a takeover (epoch > 0) that is every one: the
  earlier instances' aborts are unknown. Not taken: a record written to every empty registered
  partition (filler in the application's data); answering the 48 with success, or with an
  "outcome unknown" error (half the transaction may be open for ever: neither is the truth, and
  a retry or DescribeTransactions cannot tell); asking the broker where the producer id aborted
  (DescribeTransactions shows only the open transaction; noida-db's Fetch lists every abort a
  partition ever had, but that is a second noida-db bug to depend on). The cost: where the
  producer id had an earlier holder, a declared partition's registration no longer overlaps the
  application's work before its first record (in Java it never does).
* **Timeouts.** A blocking call returns a :class:`Completion`; when ``now`` passes its deadline
  it fails with :class:`~eosclient.errors.KafkaTimeoutError` while the work goes on (as in Java).
  If the work then succeeds, the same call made again returns that success at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from eosclient._core._txn_engine import DRAINING, OPEN, TxnEngine, input_for
from eosclient._core._txn_table import (
    IDEMPOTENT_TABLE,
    TRANSACTIONAL_TABLE,
    Input,
    State,
    Transition,
    mermaid_diagram,
)
from eosclient._core._txn_values import (
    Completion,
    Destination,
    Ending,
    EndOutcome,
    FailUnsent,
    Job,
    Output,
    Recovery,
    SendRequest,
    SequencesReset,
    Step,
    TransactionExpired,
    Wait,
)
from eosclient._core._txn_wire import GroupMetadata, Node
from eosclient._core.types import NO_IDENTITY, ProducerIdentity, TopicPartition
from eosclient.errors import (
    ApiKey,
    EosError,
    EpochBumpRequiredError,
    InvalidGroupIdError,
    RetriableError,
    UnknownPartitionError,
    UsageError,
)

__all__ = [
    "IDEMPOTENT_TABLE",
    "NO_IDENTITY",
    "TRANSACTIONAL_TABLE",
    "Completion",
    "Destination",
    "EndOutcome",
    "Ending",
    "FailUnsent",
    "GroupMetadata",
    "Input",
    "Node",
    "Output",
    "ProducerIdentity",
    "Recovery",
    "SendRequest",
    "SequencesReset",
    "State",
    "TopicPartition",
    "TransactionCore",
    "TransactionExpired",
    "Transition",
    "Wait",
    "mermaid_diagram",
]


class TransactionCore(TxnEngine):
    """The transactional (or idempotent) producer's protocol state, without I/O.

    Args:
        transactional_id: The transactional.id; None for an idempotent producer, whose table
            (:data:`IDEMPOTENT_TABLE`) has no transactions.
        transaction_timeout_ms: Sent in InitProducerId.
        retry_backoff_ms: Wait before the first retry of a coordinator request; doubled per
            attempt up to ``retry_backoff_max_ms``.
        retry_backoff_max_ms: The cap on a retry's wait.
        unknown_outcome_grace_ms: How long EndTxn(abort) waits after a batch expired with its
            outcome unknown (KAFKA-14053, see the module docstring).
        history_size: How many transitions :attr:`history` keeps.

    Driving it: make the application's call; then :meth:`poll` and act on every output (send a
    :class:`SendRequest` to its node, not before ``not_before``; pass :class:`FailUnsent` to the
    accumulator's ``fail_generation`` and :class:`SequencesReset` to its ``reset_identity``);
    drain a new batch only where :meth:`may_drain` allows its generation, resend a batch only
    where :meth:`may_resend` allows (the accumulator's ``drain`` takes this core as its gate);
    feed each answer to :meth:`on_response` (or :meth:`on_request_failed`) and each failed batch
    to :meth:`on_produce_error` (or :meth:`on_batch_expired`); poll again after every answer and
    at :meth:`next_timer` at the latest. A blocking call has returned when its
    :class:`Completion` is done. ``now`` is monotonic seconds; deadlines use the same clock.
    """

    # -- what the facade reads ------------------------------------------------------------

    @property
    def state(self) -> State:
        """The current state."""
        return self._machine.state

    @property
    def transactional(self) -> bool:
        """False for an idempotent-only producer (no transactional_id)."""
        return self.transactional_id is not None

    @property
    def history(self) -> tuple[Transition, ...]:
        """The latest transitions, oldest first (``CALL_SEND`` is checked, never recorded)."""
        return tuple(self._machine.history)

    @property
    def retries(self) -> int:
        """Coordinator requests sent again (a retriable error, a lost answer), for stats()."""
        return self._conv.retries

    @property
    def recovery(self) -> Recovery | None:
        """How the failed transaction will be aborted; None outside ABORTABLE_ERROR/ABORTING."""
        abortable = self.state in (State.ABORTABLE_ERROR, State.ABORTING)
        return self._recovery if abortable else None

    @property
    def ending(self) -> Ending | None:
        """The EndTxn being worked on (commit or abort, outcome pending or unknown), if any."""
        return self._ending

    @property
    def error(self) -> EosError | None:
        """The error that put the producer in ABORTABLE_ERROR, FENCED or FATAL."""
        return self._error

    def waiting_for(self) -> frozenset[Wait]:
        """What the producer waits for before it can move on."""
        return frozenset(self._waits())

    def next_timer(self) -> float | None:
        """When :meth:`poll` must run even if nothing arrives (the nearest deadline, including
        the open transaction's ``transaction.timeout.ms``)."""
        deadlines = [w.deadline for w in self._waiters if not w.done]
        if self._txn_deadline is not None and self._machine.allows(Input.TIMER_TXN_EXPIRED):
            deadlines.append(self._txn_deadline)
        return min(deadlines, default=None)

    def partition_ready(self, tp: TopicPartition) -> bool:
        """Whether batches for ``tp`` may be sent now (registered in the open transaction)."""
        if not self.transactional:
            return self._machine.state is State.READY
        return self._machine.state in DRAINING and tp in self._registered

    def may_drain(self, tp: TopicPartition, generation: int) -> bool:
        """Whether a new batch tagged ``generation`` may be drained for ``tp`` now.

        A batch of an earlier generation never may: a record of a failed transaction is never
        drained into a later one (KIP-360).
        """
        return generation == self.generation and self.partition_ready(tp)

    def may_resend(self, tp: TopicPartition) -> bool:
        """Whether a batch of ``tp`` that was already sent, and is due for a resend, may go now.

        Unlike :meth:`may_drain` this holds while the transaction is failing or aborting too:
        EndTxn(abort) waits until every batch sent in the transaction is answered (KAFKA-14053),
        and a batch whose answer was a retriable error is answered only by its resend, under
        its original identity and sequences (which the broker deduplicates). Never after the
        transaction ended, was fenced or failed fatally, or for a partition it never registered.
        """
        if not self.transactional:
            return self._machine.state is State.READY
        return self._machine.state in OPEN and tp in self._registered

    # -- application calls ----------------------------------------------------------------

    def init(self, now: float, deadline: float) -> Completion:
        """CALL_INIT: get a producer id, resume an init that timed out, or re-initialise.

        From COMMITTING or ABORTING this abandons the transaction (its unsent batches are
        failed) and asks for a new epoch with the KIP-360 form; the coordinator completes or
        aborts what was open. An answer other than epoch + 1 fails it with FencedError.

        Raises:
            IllegalStateError: not allowed in this state; nothing changed.
            FencedError: the producer was fenced (FatalError likewise); nothing changed.
        """
        if (done := self._claim(Input.CALL_INIT)) is not None:
            return done
        self._call(Input.CALL_INIT, "init_transactions()", now)
        return self._wait(Input.CALL_INIT, deadline)

    def begin(
        self,
        now: float,
        *,
        partitions: Iterable[TopicPartition] | None = None,
        group_id: str | None = None,
    ) -> None:
        """CALL_BEGIN: open a transaction; never waits.

        Args:
            now: The current time.
            partitions: The partitions the transaction may write; ``send`` to any other
                partition raises UnknownPartitionError. Those where an empty registration is
                safe are registered at once (one AddPartitionsToTxn), the others with their
                first record (module docstring, Decisions: pre-registration).
            group_id: Pre-register this group (AddOffsetsToTxn, sent at once);
                ``send_offsets`` for another group then raises InvalidGroupIdError.

        Raises:
            IllegalStateError: no transactional_id, or not READY (e.g. an EndTxn outcome is
                still unknown); nothing changed.
            AbortableError: the open transaction failed and must be aborted; nothing changed.
            InvalidGroupIdError: ``group_id`` is empty; nothing changed.
        """
        declared = None
        if partitions is not None:
            declared = frozenset(TopicPartition(*tp) for tp in partitions)
        if group_id is not None and not group_id:
            raise InvalidGroupIdError("group_id must be a non-empty string")
        self._call(Input.CALL_BEGIN, "begin_transaction()", now)
        self._unclaimed = None
        self.generation += 1
        self._reset_transaction()
        self._declared, self._declared_group = declared, group_id
        if declared and (early := self._preregistrable(declared)):
            self._add_partitions_job(early, now)
        if group_id is not None:
            self._register_group(group_id, now)

    def send(self, tp: TopicPartition) -> int:
        """CALL_SEND: check that a record may be queued for ``tp``; return its generation.

        An unregistered ``tp`` (declared or not) is registered lazily: the next :meth:`poll`
        asks for every such partition in one AddPartitionsToTxn.

        Raises:
            UnknownPartitionError: ``tp`` was not declared at ``begin``; nothing changed.
            IllegalStateError: no transaction is open; nothing changed.
            AbortableError: the transaction failed (Fenced/FatalError likewise); nothing changed.
        """
        if self._machine.state is State.IN_TRANSACTION and (
                tp in self._registered or tp in self._adding or tp in self._pending):
            self._sent_to.add(tp)
            return self.generation  # the hot path: registered, or on its way (checked then)
        self._check(Input.CALL_SEND)
        if self._declared is not None and tp not in self._declared:
            raise UnknownPartitionError(
                f"send() to {tp.topic}[{tp.partition}], which begin_transaction(partitions="
                "...) did not declare; nothing was queued"
            )
        if self.transactional:
            self._sent_to.add(tp)
            if tp not in self._registered and tp not in self._adding:
                self._pending.add(tp)
        return self.generation

    def declared_partitions(self, topic: str) -> tuple[TopicPartition, ...] | None:
        """``topic``'s partitions declared at ``begin``, in order; None without a declaration."""
        if self._declared is None:
            return None
        return tuple(sorted(tp for tp in self._declared if tp.topic == topic))

    def add_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """:meth:`send`'s checks and lazy registration for many partitions (the bulk path)."""
        for tp in tps:
            self.send(tp)

    def send_offsets(
        self,
        offsets: Mapping[TopicPartition, int],
        group: GroupMetadata | str,
        now: float,
        deadline: float,
    ) -> Completion:
        """CALL_SEND_OFFSETS: commit consumer offsets inside the transaction (KIP-447).

        AddOffsetsToTxn first unless the group was registered, then TxnOffsetCommit to the
        group coordinator. Commit waits for it; waiting on the completion is optional.

        Raises:
            InvalidGroupIdError: another group was declared at ``begin``; nothing changed.
            IllegalStateError: no transaction is open; nothing changed.
            AbortableError: the transaction failed (Fenced/FatalError likewise); nothing changed.
        """
        meta = group if isinstance(group, GroupMetadata) else GroupMetadata(group)
        self._check(Input.CALL_SEND_OFFSETS)
        if self._declared_group is not None and meta.group_id != self._declared_group:
            raise InvalidGroupIdError(
                f"send_offsets_to_transaction() for group {meta.group_id!r}, but "
                f"begin_transaction() declared {self._declared_group!r}; nothing was sent"
            )
        self._call(Input.CALL_SEND_OFFSETS, f"offsets of group {meta.group_id!r}", now)
        waiter = self._wait(Input.CALL_SEND_OFFSETS, deadline)
        if not offsets:
            waiter._finish(None)
            return waiter
        self._register_group(meta.group_id, now)
        self._conv.add(Job(Step.OFFSETS, Destination.GROUP_COORDINATOR, key=meta.group_id,
                           group=meta, offsets=dict(offsets), waiter=waiter, not_before=now))
        return waiter

    def commit(self, now: float, deadline: float) -> Completion:
        """CALL_COMMIT: end the transaction with EndTxn(commit), or resume that.

        EndTxn goes out once every registration is answered and the facade reports no
        incomplete batch. If its outcome is lost, the same EndTxn is sent again.

        Raises:
            AbortableError: the transaction failed: abort it; nothing changed.
            IllegalStateError: not in a transaction, or aborting; nothing changed.
            FencedError: the producer was fenced (FatalError likewise); nothing changed.
        """
        if (done := self._claim(Input.CALL_COMMIT)) is not None:
            return done
        self._call(Input.CALL_COMMIT, "commit_transaction()", now)
        return self._wait(Input.CALL_COMMIT, deadline)

    def abort(self, now: float, deadline: float) -> Completion:
        """CALL_ABORT: fail the unsent batches, EndTxn(abort), and bump if KIP-360 asks.

        Raises:
            IllegalStateError: not in a transaction, or committing and EndTxn(commit) was
                sent (an unconfirmed commit may only be retried as a commit); nothing changed.
            FencedError: the producer was fenced (FatalError likewise); nothing changed.
        """
        if (done := self._claim(Input.CALL_ABORT)) is not None:
            return done
        self._call(Input.CALL_ABORT, "abort_transaction()", now)
        return self._wait(Input.CALL_ABORT, deadline)

    def abandon(self, completion: Completion) -> None:
        """The caller stopped waiting for ``completion`` before its deadline (an asyncio task
        was cancelled): treat it as timed out now, so the same call made again resumes the
        work, or returns its success if that came meanwhile, exactly as after a timeout.

        A completion already done with a success nobody saw is kept for the next call the same
        way; one done with an error needs nothing (the error state raises it again).
        """
        if completion.done:
            if completion.error is None:
                self._unclaimed = completion.call
            return
        completion._finish(self._timeout(completion.call))
        self._timed_out.add(completion.call)
        self._waiters = [w for w in self._waiters if not w.done]

    def close(self) -> None:
        """CALL_CLOSE: stop; pending calls fail, unsent batches are failed. Idempotent."""
        self._unclaimed = None
        self._call(Input.CALL_CLOSE, "close()", 0.0)

    # -- the conversation -----------------------------------------------------------------

    def poll(self, now: float, *, incomplete_batches: bool) -> list[Output]:
        """Advance timers and the conversation; return what the facade must do, oldest first.

        Args:
            now: The current time.
            incomplete_batches: Whether any batch of the open transaction is unsent or awaiting
                its answer (Java's ``accumulator.hasIncomplete()``); EndTxn waits while it is.

        Returns:
            SendRequest, FailUnsent and SequencesReset values. Call again after every response.
        """
        self._expire(now)
        self._incomplete = incomplete_batches
        self._check_expiry(now)
        if self._machine.state in DRAINING and self._pending and not self._adding:
            self._add_partitions_job(frozenset(self._pending), now)
            self._pending.clear()
        if self._machine.state in (State.COMMITTING, State.ABORTING, State.ABORTABLE_ERROR):
            self._maybe_end(now)  # (ABORTABLE_ERROR: only the client's own abort has an end)
        self._conv.emit(self._build, self.identity, self._ready)
        return self._conv.take()

    def on_response(self, request: Any, response: Any, now: float) -> None:
        """Take the answer to a request from :meth:`poll`.

        An answer for abandoned work, or for an identity since replaced, is ignored.

        Raises:
            ValueError: ``request`` is not in flight here.
        """
        job = self._conv.answered(request)
        if job is None:
            return
        if job.step not in (Step.FIND, Step.INIT) and job.sent_as != self.identity:
            self._conv.finish(job)
            return
        self._handle(job, response, now)

    def on_request_failed(self, request: Any, now: float, error: EosError | None = None) -> None:
        """A request's answer will never come (connection cut, request timeout).

        Coordinator requests are sent again after the coordinator is looked up again; a lost
        EndTxn makes its outcome UNKNOWN until a repeat is answered (see ``_txn_answers``).

        Raises:
            ValueError: ``request`` is not in flight here.
        """
        job = self._conv.answered(request)
        if job is not None:
            self._on_lost(job, now, error)

    def on_produce_error(
        self, error: EosError, identity: ProducerIdentity, generation: int, now: float
    ) -> None:
        """A batch failed for good with ``error`` (from ``errors.error_for(PRODUCE, code)``).

        Ignored for an old identity or a transaction already over. A retriable error here means
        the sender gave up: the batch's outcome is unknown, as in :meth:`on_batch_expired`.

        Raises:
            ValueError: ``error`` is a UsageError, not a broker's answer.
        """
        if isinstance(error, UsageError):
            raise ValueError(f"not a broker error: {error!r}")
        if isinstance(error, RetriableError):
            self.on_batch_expired(identity, generation, now, cause=error)
        elif self._current(identity, generation):
            self._transition(input_for(error), str(error), error=error, now=now)

    def on_batch_expired(
        self,
        identity: ProducerIdentity,
        generation: int,
        now: float,
        cause: EosError | None = None,
    ) -> None:
        """A batch expired with its outcome unknown; report it only once its connection closed.

        KIP-360: the abort will bump the epoch; KAFKA-14053: EndTxn(abort) waits the grace.
        """
        if not self._current(identity, generation):
            return
        self._quiet_until = max(self._quiet_until, now + self._grace)
        error = EpochBumpRequiredError(
            "a batch expired with its outcome unknown; the abort bumps the epoch (KIP-360)",
            api=ApiKey.PRODUCE,
        )
        error.__cause__ = cause
        self._transition(Input.RECV_BUMP_REQUIRED, str(error), error=error, now=now)
