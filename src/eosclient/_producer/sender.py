"""The producer's I/O thread: drives the sans-IO core and accumulator through the network client.

Theory of operation
-------------------
One lock (:attr:`Sender.lock`) guards everything application threads share with this thread:
the :class:`~eosclient._core.txn.TransactionCore`, the
:class:`~eosclient._core.accumulator.RecordAccumulator` and the metadata. The thread loops:

1. **I/O, without the lock**: :meth:`NetworkClient.poll` waits until the nearest timer, a socket
   event, or a wakeup from an application call.
2. **Under the lock**: every finished request is dispatched (coordinator answers to the core,
   Produce answers to the accumulator, errors to the core), then one :meth:`Sender._step`:
   expire batches past ``delivery.timeout.ms``, poll the core and act on its outputs
   (``SendRequest`` queued until ``not_before``, ``FailUnsent`` -> ``fail_generation``,
   ``SequencesReset`` -> ``reset_identity``), send due coordinator requests, ask for metadata,
   take the ready batches for Produce requests (:mod:`eosclient._producer.produce`: their
   sequences are assigned then), and compute how long the next wait may be. Blocked
   application calls are notified.
3. **Without the lock**: the batches taken in step 2 are encoded (header, codec, CRC), made
   into Produce requests and written to their sockets (application threads append meanwhile;
   only this thread uses the network client and a drained batch); the outcomes of batches
   settled in step 2 are published to their records' futures
   (:func:`~eosclient._producer.results.publish`, one step per batch) and ``send_batch``
   futures are resolved, so callbacks may call the producer.

The I/O thread sleeps in poll until its next timer or a wakeup. ``send()`` wakes it when it
opened a batch (the record's offset delta is 0): the batch before it on that partition is full,
or the new one starts its linger timer; ``send_batch()`` wakes it always.

What the core's docs ask of the facade, and where it is done: ``now`` is ``time.monotonic()``;
``poll`` runs after every answer and at ``next_timer()`` (step 2 and the timeout); the
accumulator drains a new batch only if ``may_drain(tp, generation)`` and resends one only if
``may_resend(tp)`` (the core is the accumulator's drain gate, see
:mod:`eosclient._producer.produce`; while aborting only resends go out, which must be answered
before EndTxn(abort) may: KAFKA-14053); a request timeout closes its connection
(:mod:`eosclient._net.node`); a batch past its delivery timeout while in flight has its
connection closed *before* it is reported with ``on_batch_expired``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, TypeVar

from eosclient._core.accumulator import AccumulatorSettings, Appender, RecordAccumulator
from eosclient._core.txn import (
    FailUnsent,
    SendRequest,
    SequencesReset,
    TransactionCore,
    TransactionExpired,
)
from eosclient._core.types import NO_IDENTITY
from eosclient._net.client import Answer, NetworkClient
from eosclient._net.io_thread import IoThread, stopped_error
from eosclient._net.steps import Steps
from eosclient._net.steps import drive as drive_steps
from eosclient._producer.produce import ProduceLane
from eosclient._producer.results import DeliveryFuture, publish
from eosclient.config import ProducerConfig
from eosclient.errors import EosError, IllegalStateError
from eosclient.stats import ClientStats

__all__ = ["Sender", "WouldWait"]

log = logging.getLogger("eosclient.producer")

_MAX_SLEEP = 1.0  # seconds: liveness bound (delivery expiry, missed wakeups)
_EXPIRY_EVERY = 0.1  # seconds between delivery-timeout sweeps
_JOIN_TIMEOUT = 10.0

_T = TypeVar("_T")


class WouldWait(IllegalStateError):
    """A call would wait, and an event loop runs the turns on the caller's thread
    (:meth:`Sender.refuse_to_wait`). Raised before the call changed anything. The asyncio
    front catches it and awaits what the call would have waited for."""


class Sender(IoThread):
    """The I/O thread and the state it shares with application threads under :attr:`lock`.

    Args:
        config: The producer's settings.
    """

    def __init__(self, config: ProducerConfig) -> None:
        self.config = config
        self.core = TransactionCore(
            transactional_id=config.transactional_id,
            transaction_timeout_ms=config.transaction_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
        )
        self.acc = RecordAccumulator(AccumulatorSettings(
            batch_size=config.batch_size, linger_ms=config.linger_ms,
            max_request_size=config.max_request_size, compression_type=config.compression_type,
            delivery_timeout_ms=config.delivery_timeout_ms, buffer_memory=config.buffer_memory,
            max_in_flight=config.max_in_flight_requests_per_connection,
            transactional=config.transactional, partitioner=config.partitioner,
        ))
        super().__init__(NetworkClient(config), f"eosclient-producer-{config.client_id}")
        self.metadata = self.client.metadata
        self.settled: list[DeliveryFuture[object]] = []
        # send()'s shortcuts: where the last record sent to a topic (or topic and partition)
        # went, the batch's ``add`` and outcome (RecordAccumulator.appender). Valid only while
        # nothing but send() took the lock since: emptied by every turn, and by the
        # application's calls that change the transaction or open batches (the producer's).
        self.shortcuts: dict[object, Appender] = {}
        self.flushing = 0
        self._lane = ProduceLane(config, self.core, self.acc, self.client)
        self._sends: list[SendRequest] = []
        self._next_expiry = 0.0

    def refuse_to_wait(self, call: str) -> None:
        """Refuse a blocking call made from the I/O thread (a delivery future's callback): the
        thread would wait for itself until the call's timeout, stalling every other record.

        Raises:
            IllegalStateError: the caller is the I/O thread; nothing changed.
            WouldWait: the caller is the event loop's thread that runs the turns instead (the
                asyncio front: it awaits instead); nothing changed.
        """
        if self.in_io_thread():
            message = (f"{call}() cannot wait inside a delivery callback, which runs on the "
                       "producer's I/O thread; call it from another thread")
            raise WouldWait(message) if self.loop_driven else IllegalStateError(message)

    def drive(self, steps: Steps[_T]) -> _T:
        """Carry ``steps`` out on the application's thread, which holds :attr:`lock` (the sync
        front; :func:`eosclient._net.steps.drive`). Steps that end early (a KeyboardInterrupt
        in a wait) are closed at once, so what they undo on the way out (flush's count) is
        undone then, not when the traceback is dropped."""
        with contextlib.closing(steps):
            return drive_steps(steps, self)

    def check_alive(self) -> None:
        """Raise if the I/O thread died of a bug.

        Raises:
            AuthenticationError: a connection could not be authenticated; close, fix settings.
            AllBrokersDownError: no broker was ever reached, and none can be (without
                ``error_cb``); the producer keeps trying, call again to wait on.
            FatalError: the thread crashed; the producer can only be closed.
            ResponseTooLargeError: a non-Fetch answer was over ``receive.message.max.bytes``.
        """
        if self.crashed is not None:
            raise stopped_error(self.crashed, "producer")
        self.client.check_reached(time.monotonic())

    def broker_gone(self, now: float) -> bool:
        """Whether no broker has been reachable for a while: every connect failed, through
        at least one reconnect at the longest backoff (``reconnect.backoff.max.ms``, at least
        1 s). Waiting on for an answer is then pointless (call under the lock)."""
        return self.client.all_down(now) is not None

    def _take_settled(self) -> list[DeliveryFuture[object]]:
        # The list object is shared with every future (their sink): empty it, never rebind it.
        settled = self.settled[:]
        self.settled.clear()
        return settled

    def incomplete(self) -> bool:
        """Whether any batch is unsent or awaiting its answer."""
        return self.acc.in_flight() > 0 or self.acc.unsent_records() > 0

    # -- the I/O thread ------------------------------------------------------------------------

    def turn(self, answers: list[Answer]) -> float | None:
        """Steps 2 and 3 of the loop (the module docstring); the next wait, None to exit."""
        with self.lock:
            self.shortcuts.clear()  # anything may change now: batches drained, state, metadata
            timeout = self._iterate(answers)
            outcomes, settled = self.acc.take_settled(), self._take_settled()
            self.changed.notify_all()
        if timeout is not None:  # (closing: the client is closed, nothing was drained)
            self._lane.send_outbox()
        publish(outcomes)
        _resolve(settled)
        return timeout

    def _iterate(self, answers: list[Answer]) -> float | None:
        """Dispatch answers and run one step; the next wait in seconds, None to exit."""
        self.sleeping = False
        self.client.dispatch(answers)
        if self._stopping:
            self._shut_down()
            return None
        if self.client.fatal is not None:
            raise self.client.fatal
        now = time.monotonic()
        timeout = self._step(now)
        self.sleeping = True
        return timeout

    def _step(self, now: float) -> float:
        if now >= self._next_expiry:
            self._next_expiry = now + _EXPIRY_EVERY
            self._lane.expire(now)
        self._drive_core(now)
        self._send_coordinator_requests(now)
        self.client.maybe_update_metadata(now)
        self._lane.drain(now, flush=self.flushing > 0)
        return self._timeout(now)

    def _drive_core(self, now: float) -> None:
        """Poll the core and act on its outputs; again while they changed the accumulator."""
        changed = True
        while changed:
            changed = False
            for out in self.core.poll(now, incomplete_batches=self.incomplete()):
                if isinstance(out, SendRequest):
                    self._sends.append(out)
                elif isinstance(out, FailUnsent):
                    self.acc.fail_generation(out.generation, out.error)
                    changed = True
                elif isinstance(out, TransactionExpired):
                    log.warning("%s", out.message)
                elif isinstance(out, SequencesReset):
                    self.acc.reset_identity(out.new)
                    self._lane.forget_retries()
                    changed = True

    def _send_coordinator_requests(self, now: float) -> None:
        due = [s for s in self._sends if s.not_before <= now]
        if not due:
            return
        self._sends = [s for s in self._sends if s.not_before > now]
        for send in due:
            node_id = None
            if send.node is not None:
                self.client.add_node(*send.node)
                node_id = send.node.node_id
            self.client.send(node_id, send.request, self._on_coordinator_answer)

    def _on_coordinator_answer(self, answer: Answer) -> None:
        now = time.monotonic()
        if answer.error is not None:
            self.core.on_request_failed(answer.request, now, answer.error)
        else:
            self.core.on_response(answer.request, answer.response, now)

    def _timeout(self, now: float) -> float:
        timers = [now + _MAX_SLEEP, self.client.next_timer(), self.metadata.next_update(now),
                  self._lane.next_timer(now)]
        core_timer = self.core.next_timer()
        if core_timer is not None:
            timers.append(core_timer)
        if self._sends:
            timers.append(min(s.not_before for s in self._sends))
        return max(0.0, min(timers) - now)

    # -- the end -------------------------------------------------------------------------------

    def stats(self) -> ClientStats:
        """A snapshot of the producer's counters (under the lock)."""
        lane, counts = self._lane, self.core.counts
        return ClientStats(
            "producer", self.config.client_id, records=lane.acked_records,
            batches=lane.acked_batches, transactions_committed=counts.committed,
            transactions_aborted=counts.aborted, retries=lane.retried_batches + self.core.retries,
            epoch_bumps=counts.epoch_bumps, requests=self.client.latency.snapshot())

    def _shut_down(self) -> None:
        """Fail every record still queued or in flight, and close the connections."""
        closed = IllegalStateError("the producer was closed before the record was delivered")
        self._drive_core(time.monotonic())  # the core's FailUnsent for close()
        self.client.dispatch(self.client.close())
        self._fail_everything(closed)

    def _fail_everything(self, error: EosError) -> None:
        self.acc.fail_generation(self.core.generation, error)
        if self.acc.sequences.identity != NO_IDENTITY:
            self.acc.reset_identity(NO_IDENTITY, error)

    def crash(self, exc: BaseException) -> None:
        """Fail every record and blocked call with the crash (rather than hang the callers)."""
        if exc is not self.client.fatal:  # that one the network client logged
            log.exception("the producer's I/O thread crashed", exc_info=exc)
        with self.lock:
            self.shortcuts.clear()
            self.crashed = exc
            error = stopped_error(exc, "producer")  # each failed record's future says why
            try:
                self._fail_everything(error)
                self.client.close()
            except Exception:  # already broken; the callers learn of `crashed`
                log.exception("cleaning up after the crash failed")
            outcomes, settled = self.acc.take_settled(), self._take_settled()
            self.changed.notify_all()
        publish(outcomes)
        _resolve(settled)


def _resolve(settled: list[DeliveryFuture[Any]]) -> None:
    for future in settled:
        try:
            future.resolve()
        except Exception:  # a future the application resolved or broke itself
            log.exception("resolving a delivery future failed")
