"""The data source writer's driver side: recover, commit, abort. One atomic decision per batch.

Theory of operation (the argument in full, with the state machine, is in ``docs/spark.md``).
Each task of batch ``b`` writes its rows in a transaction of its own transactional id
(``<sink>-w<partition>``), flushes, and hands the driver a
:class:`~eosclient.PreparedTransaction` instead of committing. The driver then:

0. before any task of ``b`` runs, a **gate** stands in front of every output partition
   (:mod:`eosclient.spark._gate`: an open transaction of the sink's own, so read_committed
   readers read nothing the tasks write until the driver releases it);
1. **recovers** (:func:`recover`): if the last decision is not marked done, a driver died while
   ending its transactions: end them all as committed (EndTxn by identity is idempotent: a
   transaction already committed answers NONE again), abort the dead driver's gate (by
   initialising its id again), then mark it done;
2. skips a **replay**: ``b`` at or before the last done batch committed before (Spark re-runs
   the last batch whose end it had not recorded): its fresh transactions are aborted;
3. checks that every transaction is still live (``check_pooled``: a zombie attempt may have
   handed over a transaction that a later attempt's initialisation aborted), and that the
   gate the tasks were planned behind is the one still open; if not, aborts them all and
   fails the batch (Spark replays it);
4. writes the **decision** (:meth:`Records.decide`): the tasks' identities, then one offset
   naming the batch; from here on the batch *will* be committed, by this driver or the next;
5. **commits** every transaction (EndTxn by producer id and epoch, from this process);
6. **releases** the gate (EndTxn abort: the whole batch becomes readable at once);
7. marks the batch **done**.

A crash before 4 leaves open transactions that nobody will commit: the replay's tasks
initialise the same transactional ids, which aborts them (and fences any zombie attempt).
A crash after 4 is finished by step 1 of the next driver, which runs when the restarted query
plans its first batch, before any task of it can initialise (and abort) a decided transaction.

Crash points are injectable for tests (:func:`crash_point`).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

from eosclient._core.prepared import PreparedTransaction
from eosclient._producer.prepared import check_pooled, end_pooled
from eosclient.errors import AbortableError, ConfigError, FencedError
from eosclient.spark import _gate
from eosclient.spark._decisions import Decision, Records
from eosclient.spark._gate import Gate

__all__ = ["CRASH_ENV", "CRASH_EXIT", "CRASH_POINTS", "TaskCommit", "abort", "commit", "recover"]

log = logging.getLogger("eosclient.spark")

CRASH_ENV = "EOSCLIENT_SPARK_CRASH"
CRASH_EXIT = 17
CRASH_POINTS = ("before_decision", "after_decision", "mid_commit", "after_commit",
                "after_gate", "after_done")


@dataclass(frozen=True, slots=True)
class TaskCommit(WriterCommitMessage):
    """What one task hands the driver (Spark's commit message; pickled).

    Attributes:
        task: The Spark partition, which names the transactional id.
        prepared: The task's open transaction, or None when it wrote nothing.
        records: Records written.
        skipped: The task did not write, because its batch committed before (a replay).
        gate: The gate the task was planned behind (None: no gate).
    """

    task: int
    prepared: PreparedTransaction | None
    records: int
    skipped: bool = False
    gate: PreparedTransaction | None = None


def crash_point(setting: str | None, point: str, batch: int) -> None:
    """Tests only: die at ``point`` of ``batch`` when ``setting`` (the writer's
    ``testing.crashAt`` option, else the ``EOSCLIENT_SPARK_CRASH`` variable) names it:
    ``<point>:<batch>`` ends this process (the one running the driver's commit) at once;
    ``<point>:<batch>:kill=<pgid>`` SIGKILLs process group ``pgid`` (the driver's: JVM, Python
    and all; Spark runs the commit in a worker of another group); ``<point>:<batch>:pause=<s>``
    only sleeps ``s`` seconds there (a reader then has time to see what that state shows)."""
    wanted = setting or os.environ.get(CRASH_ENV)
    head = f"{point}:{batch}"
    if wanted and wanted.startswith(head + ":pause="):
        log.warning("crash point %s of batch %d: pausing", point, batch)
        time.sleep(float(wanted[len(head + ":pause="):]))
        return
    if not wanted or not (wanted == head or wanted.startswith(head + ":kill=")):
        return
    log.warning("crash point %s of batch %d: the driver dies here", point, batch)
    if wanted != head:
        os.killpg(int(wanted[len(head + ":kill="):]), signal.SIGKILL)
    os._exit(CRASH_EXIT)


def recover(records: Records, bootstrap_servers: str,
            producer_config: dict[str, object]) -> int | None:
    """Finish a decided batch a dead driver left (its transactions committed, then its gate
    aborted); return the last batch done (or None)."""
    done = records.done()
    header = records.decided()
    if header is None or (done is not None and header[0] <= done):
        return done
    decision = records.decision()
    if decision is not None and (done is None or decision.batch > done):
        log.warning("sink %s: batch %d was decided but not finished; committing its %d "
                    "transactions", records.sink_id, decision.batch, _count(decision))
        end_pooled(records.pool, bootstrap_servers, _transactions(decision.transactions),
                   commit=True, timeout=records.timeout)
        _gate.reset(records, bootstrap_servers, producer_config)
        records.mark_done(decision.batch)
        done = decision.batch
    return done


def commit(records: Records, bootstrap_servers: str, messages: Sequence[TaskCommit | None],
           batch: int, *, gate: Gate | None, producer_config: dict[str, object],
           crash: str | None = None, recovered: tuple[int | None] | None = None) -> bool:
    """Commit batch ``batch`` all or nothing, and release ``gate`` (the open one, which the
    tasks were planned behind); False when it was a replay (aborted instead).

    ``recovered``: ``(done,)`` when this process ran :func:`recover` just before, with nothing
    of the sink's written since (a stream writer made to commit); else it recovers first.

    Raises:
        ConfigError: the sink committed a later batch (a new checkpoint under an old sink id);
            this batch's transactions are aborted first.
        EosError: Kafka failed; the batch is decided or not, and the next driver finishes or
            replays it.
    """
    done = recover(records, bootstrap_servers, producer_config) if recovered is None \
        else recovered[0]
    prepared = _by_task(messages)
    if done is not None and batch <= done:
        abort_all(records, bootstrap_servers, prepared)
        _release(records, bootstrap_servers, gate)
        if batch < done:
            raise ConfigError(
                f"sink {records.sink_id!r} already committed batch {done}, and this query is at "
                f"batch {batch}: a query with a new checkpoint needs a new sinkId (or these "
                f"batches would be skipped)", key="sinkId")
        log.info("sink %s batch %d: committed before; the replay is aborted", records.sink_id,
                 batch)
        return False
    live = _transactions(prepared)
    try:  # a zombie attempt's stale hand-over must never be decided
        check_pooled(records.pool, bootstrap_servers, live, records.anchor,
                     timeout=records.timeout)
    except FencedError as exc:
        abort_all(records, bootstrap_servers, prepared)
        _release(records, bootstrap_servers, gate)
        raise AbortableError(
            f"batch {batch}: a task's transaction was aborted after its hand-over, by a later "
            f"attempt of the same task (a retry or a speculative copy): {exc}; the batch's "
            f"transactions are aborted, and Spark replays it") from exc
    stale = _stale_gates(messages, gate)
    if stale:  # a task wrote behind a gate that is gone: the batch would show in parts
        abort_all(records, bootstrap_servers, prepared)
        _release(records, bootstrap_servers, gate)
        raise AbortableError(
            f"batch {batch}: {stale} task(s) wrote behind a gate that is no longer the open one "
            f"(another writer of sinkId {records.sink_id!r}?); the batch's transactions are "
            f"aborted, and Spark replays it")
    crash_point(crash, "before_decision", batch)
    records.decide(Decision(batch, prepared))
    crash_point(crash, "after_decision", batch)
    for i, item in enumerate(live):
        end_pooled(records.pool, bootstrap_servers, [item], commit=True,
                   timeout=records.timeout)
        if i == 0:
            crash_point(crash, "mid_commit", batch)
    crash_point(crash, "after_commit", batch)
    _release(records, bootstrap_servers, gate)
    crash_point(crash, "after_gate", batch)
    records.mark_done(batch)
    crash_point(crash, "after_done", batch)
    return True


def abort(records: Records, bootstrap_servers: str, messages: Sequence[TaskCommit | None],
          batch: int, *, gate: Gate | None, producer_config: dict[str, object]) -> None:
    """End a failed batch: roll forward if it was decided, else abort its transactions; then
    release the gate.

    Spark calls ``abort`` also when ``commit`` raised, and ``commit`` may have raised after its
    decision (an EndTxn that timed out, say): aborting then would break the decision, and on
    the brokers here a later EndTxn(commit) of an aborted transaction is answered NONE without
    committing anything. So a decided batch is finished instead, and only transactions the
    decision does not name are aborted.
    """
    header = records.decided()
    decision = records.decision() if header is not None and header[0] == batch else None
    decided: set[PreparedTransaction] = set()
    if decision is not None and decision.batch == batch:
        recover(records, bootstrap_servers, producer_config)
        decided = set(_transactions(decision.transactions))
    _release(records, bootstrap_servers, gate)  # first: nothing undecided is behind it, and
    abort_all(records, bootstrap_servers,  # Tansu's LSO sticks after aborts under an open
              [p for p in _by_task(messages) if p not in decided])  # older one


def abort_all(records: Records, bootstrap_servers: str,
              prepared: Sequence[PreparedTransaction | None]) -> None:
    """Abort each transaction; one that a later initialisation of its id fenced was aborted by
    that initialisation already."""
    for item in _transactions(prepared):
        try:
            end_pooled(records.pool, bootstrap_servers, [item], commit=False,
                       timeout=records.timeout)
        except FencedError:
            log.info("%s epoch %d: aborted already, by a later initialisation of the id",
                     item.transactional_id, item.epoch)


def _release(records: Records, bootstrap_servers: str, gate: Gate | None) -> None:
    if gate is not None:
        _gate.release(records, bootstrap_servers, gate)


def _stale_gates(messages: Sequence[TaskCommit | None], gate: Gate | None) -> int:
    """How many tasks were planned behind another gate than ``gate`` (the open one)."""
    want = None if gate is None else gate.prepared
    return sum(1 for m in messages if m is not None and m.prepared is not None
               and m.gate != want)


def _by_task(messages: Sequence[TaskCommit | None]) -> tuple[PreparedTransaction | None, ...]:
    """The tasks' transactions indexed by Spark partition (None where there is none)."""
    found = [m for m in messages if m is not None]
    slots: list[PreparedTransaction | None] = [None] * (max((m.task for m in found),
                                                            default=-1) + 1)
    for m in found:
        slots[m.task] = m.prepared
    return tuple(slots)


def _transactions(items: Sequence[PreparedTransaction | None]) -> list[PreparedTransaction]:
    return [p for p in items if p is not None]


def _count(decision: Decision) -> int:
    return len(_transactions(decision.transactions))
