"""The gate: what makes a batch of the data source writer visible at once.

Theory of operation (argued in full in ``docs/spark.md``). A read_committed reader never reads
past a partition's last stable offset (LSO), and the LSO stays at the first record of the
earliest transaction still open on the partition (KIP-98). Before the tasks of a batch write,
the driver opens a transaction of its own transactional id, ``<sinkId>-gate``, writes one empty
record (header ``eos.gate``) to every output partition, flushes it and leaves it open
(:meth:`~eosclient.TransactionalProducer.prepare_transaction`). Every record of the batch then
lies behind a gate record, so however the tasks' transactions end, none of them is read while
the gate is open. The driver's commit ends the tasks' transactions, then aborts the gate: one
EndTxn, after which the LSO of each partition moves past the whole batch.

When: Spark makes the writer on the driver twice per batch, in two processes: once to plan
the batch (that writer is pickled and shipped to the tasks) and once to commit or abort it.
The gate is opened when the writer is pickled for the tasks
(``eosclient.spark._writer.WriterPlan.for_tasks``), which only the planning process does
(once per writer); the committing process
reads which gate is open from the sink's records (group ``gate``, beside the decision:
:class:`~._decisions.Records`). The record is set to 0 before anything that may end the gate it
names (a release, an initialisation of the gate's id) and names a gate only once it is
flushed, so a record that names a gate names an open one (one driver per sink).

A new gate always replaces the recorded one (initialising the id aborts it): a gate a dead
driver left open stands in front of nothing decided (recovery, which runs first, finishes a
decided batch and releases its gate). Keeping it would also be sound, but Tansu 0.6 keeps a
partition's LSO stuck at a committed transaction that followed an aborted one of the same
transactional id while an older transaction (here: the dead driver's gate) was open there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from eosclient._core.prepared import PreparedTransaction
from eosclient._core.types import TopicPartition
from eosclient._producer.prepared import end_pooled
from eosclient.errors import FencedError
from eosclient.producer import TransactionalProducer
from eosclient.spark._decisions import Records, gate_id

__all__ = ["HEADER", "Gate", "current", "open_gate", "release", "reset"]

log = logging.getLogger("eosclient.spark")

HEADER = "eos.gate"


@dataclass(frozen=True, slots=True)
class Gate:
    """An open gate: its transaction, and the partitions it stands in front of (empty when
    read back from the records, which keep only the identity)."""

    prepared: PreparedTransaction
    partitions: tuple[TopicPartition, ...] = ()


def current(records: Records) -> Gate | None:
    """The open gate the records name, or None."""
    prepared = records.gate()
    return None if prepared is None else Gate(prepared)


def open_gate(records: Records, bootstrap_servers: str, partitions: Sequence[TopicPartition],
              producer_config: dict[str, object]) -> Gate:
    """Open a new gate in front of ``partitions``; the id's initialisation aborts the gate
    open before, recorded or not.

    Raises:
        EosError: Kafka failed; no gate is recorded.
    """
    if records.gate() is not None:
        records.record_gate(None)  # before the init below ends the gate it names
    producer = TransactionalProducer(bootstrap_servers,
                                     transactional_id=gate_id(records.sink_id),
                                     config=producer_config)
    try:
        producer.init_transactions(records.timeout)
        producer.begin_transaction(list(partitions))
        for tp in partitions:
            producer.send(tp.topic, b"", partition=tp.partition, headers=[(HEADER, b"")])
        prepared = producer.prepare_transaction(records.timeout)
    except BaseException:
        producer.close(records.timeout)
        raise
    records.record_gate(prepared)
    log.debug("sink %s: gate open (epoch %d) on %d partitions", records.sink_id, prepared.epoch,
              len(partitions))
    return Gate(prepared, tuple(partitions))


def release(records: Records, bootstrap_servers: str, gate: Gate) -> None:
    """Abort the gate (one EndTxn): every partition's LSO moves past what was behind it.
    Nothing to do when the records no longer name it (released, or aborted by a reset)."""
    if records.gate() != gate.prepared:
        return
    records.record_gate(None)
    try:
        end_pooled(records.pool, bootstrap_servers, [gate.prepared], commit=False,
                   timeout=records.timeout)
    except FencedError:  # its id was initialised since, which aborted it already
        log.info("sink %s: the gate was aborted already", records.sink_id)


def reset(records: Records, bootstrap_servers: str, producer_config: dict[str, object]) -> None:
    """Abort whatever gate is open, recorded or not, by initialising the gate's id again
    (recovery: the dead driver's gate may have been opened and not yet recorded)."""
    records.record_gate(None)
    with TransactionalProducer(bootstrap_servers, transactional_id=gate_id(records.sink_id),
                               config=producer_config) as producer:
        producer.init_transactions(records.timeout)
