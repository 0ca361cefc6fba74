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

Which gate is open is recorded beside the sink's decision records (:class:`~._decisions.Records`,
groups ``gate`` and ``gate.n``): the gate's identity, and how many partitions of the topic it
covers. The record is set to 0 *before* anything that may end the gate it names (a release, or
an initialisation of the gate's id), and names a gate only once that gate is flushed; so a
record that names a gate names one that is open (one driver per sink). That is how the driver
process that plans a batch and the one that commits it (Spark starts one of each per batch)
agree on the gate without ending it: both make the writer, and making it opens a gate only
when none is recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from eosclient._core.prepared import PreparedTransaction
from eosclient._core.types import TopicPartition
from eosclient._producer.prepared import end_prepared
from eosclient.errors import FencedError
from eosclient.producer import TransactionalProducer
from eosclient.spark._decisions import Records, gate_id

__all__ = ["HEADER", "Gate", "gate_id", "open_gate", "release", "reset"]

log = logging.getLogger("eosclient.spark")

HEADER = "eos.gate"


@dataclass(frozen=True, slots=True)
class Gate:
    """An open gate: its transaction, and the partitions it stands in front of."""

    prepared: PreparedTransaction
    partitions: tuple[TopicPartition, ...]


def current(records: Records, topic: str) -> Gate | None:
    """The open gate the records name, or None."""
    found = records.gate()
    if found is None:
        return None
    prepared, count = found
    return Gate(prepared, tuple(TopicPartition(topic, p) for p in range(count)))


def open_gate(records: Records, bootstrap_servers: str, partitions: Sequence[TopicPartition],
              producer_config: dict[str, object]) -> Gate:
    """Open a new gate in front of ``partitions``, when the records name none (the id's
    initialisation aborts any gate left open and unrecorded).

    Raises:
        EosError: Kafka failed; no gate is recorded (the next writer opens one).
    """
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
    records.record_gate(prepared, len(partitions))
    log.debug("sink %s: gate open (epoch %d) on %d partitions", records.sink_id, prepared.epoch,
              len(partitions))
    return Gate(prepared, tuple(partitions))


def release(records: Records, bootstrap_servers: str, gate: Gate) -> None:
    """Abort the gate (one EndTxn): every partition's LSO moves past what was behind it.
    Nothing to do when the records no longer name it (released, or aborted by a reset)."""
    recorded = records.gate()
    if recorded is None or recorded[0] != gate.prepared:
        return
    records.record_gate(None, 0)
    try:
        end_prepared(bootstrap_servers, [gate.prepared], commit=False, timeout=records.timeout)
    except FencedError:  # its id was initialised since, which aborted it already
        log.info("sink %s: the gate was aborted already", records.sink_id)


def reset(records: Records, bootstrap_servers: str, producer_config: dict[str, object]) -> None:
    """Abort whatever gate is open, recorded or not, by initialising the gate's id again
    (recovery: the dead driver's gate may have been opened and not yet recorded)."""
    records.record_gate(None, 0)
    with TransactionalProducer(bootstrap_servers, transactional_id=gate_id(records.sink_id),
                               config=producer_config) as producer:
        producer.init_transactions(records.timeout)
