"""ExactlyOnceProcessor: consume, transform, produce, each input record's effect exactly once.

Theory of operation. One loop on the caller's thread (``run()``), over one
:class:`~eosclient.ReadCommittedConsumer` (``subscribe()``, a consumer group) and one
:class:`~eosclient.TransactionalProducer` (the rules below are written once, as steps in
:mod:`eosclient._processor.core`; this module carries them out with the sync clients, and
:class:`~eosclient.aio.AsyncExactlyOnceProcessor` with the asyncio ones)::

    poll -> begin(the group, and every output partition if asked: KIP-609 pre-registration)
         -> transform -> send (each output with an ``eos.src`` header naming its input record)
         -> poll more while the transaction is neither full nor due -> ...
         -> send_offsets_to_transaction(positions after the records, group_metadata())  KIP-447
         -> commit

The input offsets move if and only if the outputs commit, so a crash anywhere redoes exactly the
transaction that was open: the next instance with the same transactional.id fences this one
(InitProducerId), the coordinator aborts what it left open, and the group resumes from the
committed offsets.

Failures, by kind (see :mod:`eosclient.errors`):

* :class:`~eosclient.errors.AbortableError`: the transaction is aborted, every assigned
  partition is rewound to its committed offset (read with ``require_stable``), and the loop goes
  on: the same records are processed again in a new transaction, after a backoff that grows
  with each abort in a row (0, then 50 ms doubling up to 2 s). After ``max_consecutive_aborts``
  (10) in a row ``run()`` raises the last error: a record the broker always refuses
  (MESSAGE_SIZE_TOO_LARGE) or a topic the producer may not write would otherwise loop for ever.
* :class:`~eosclient.errors.FencedError` (another instance owns the transactional.id) and
  :class:`~eosclient.errors.FatalError`: the producer and consumer are closed and ``run()``
  raises. The processor does not rejoin on its own: a fenced instance is a zombie, and the
  newer one already does its work; a supervisor may build a new processor if it knows better.
  A fenced instance's consumer leaves the group, static or not, under its member id alone
  (``close(leave_group=True)``): a broker that does not expire it (Tansu) would otherwise keep
  partitions assigned to it for good.
* An exception raised by the transform: the transaction is aborted, the clients closed, and
  ``run()`` re-raises it (nothing of that transaction was committed).

Static membership (KIP-345). The consumer's ``group.instance.id`` defaults to the
transactional.id (unless ``consumer_config`` sets one): both name *this* instance, stable across
restarts and unique among instances. A restarted instance then takes its predecessor's place in
the group at once, with its partitions, instead of waiting for the coordinator to notice the
dead member (noida-db never drops a SIGKILLed member and makes it the next generation's leader,
so a restarted dynamic member would never get a partition). A zombie is fenced twice: by the
transactional.id (InitProducerId bumps the epoch) and by the instance id (the group answers its
heartbeats and commits FENCED_INSTANCE_ID). The price, as in Java: a static member does not
leave the group when it closes, so after a clean stop its partitions wait
``session.timeout.ms`` for it before the group hands them to the other instances.

Output partitions are added to a transaction as records go to them (as Java does), not
pre-registered, unless ``preregister_partitions=True``. Then every output partition is declared
at ``begin_transaction``, and the producer registers at once those where an empty registration
is safe: noida-db fails the EndTxn(commit) of a transaction that registered a partition where
this producer id ever aborted records and wrote nothing there, after marking some other
partitions committed (a half-committed transaction), so only while the producer id is new
(not after a restart of the transactional.id) and not where this instance aborted records;
the others are registered with their first record. Pre-registration saves a round trip per
transaction when the transform is slow; every partition it registers gets a marker at commit
on Kafka, written to or not.

A rebalance that revokes partitions commits the open transaction first (in ``on_revoke``); if
that commit fails, it is aborted and every partition still assigned is rewound before the next
poll, so no record is lost and no output is written twice. Before it gives a partition up
(rebalance or close) the processor reads back the offset it last committed there, waiting up to
30 s until the group shows it: the next owner starts from that offset, and a broker may apply a
transaction's offsets after acknowledging its commit (Tansu 0.6 does, while another transaction
that wrote earlier to the same output partition is open). For the same reason a rewind after an
abort never goes back past what this instance committed for a partition it still holds, and
after every commit the processor commits the same offsets again with a plain OffsetCommit
(under its generation) before the next transaction begins: Tansu keeps deferred offsets in the
producer epoch's transaction state and drops them when the next transaction of that epoch is
aborted, by this instance or by a successor's InitProducerId after a crash. Elsewhere that
commit writes what the group holds already, for one round trip per transaction.

Partitions can also be taken involuntarily: a process paused (GC, a stopped VM) or stalled past
its session or poll interval has lost its generation, and the group may already have given its
partitions to another member. Four rules keep that exactly once, and the zombie fenced, on
brokers that check less than Kafka does (neither broker here checks a TxnOffsetCommit's
generation strictly, times transactions out, or honours ``require_stable``; Tansu keeps no
static members):

* a transaction is committed only if the consumer still holds its generation by the clock
  (``in_generation()``), checked after the offsets were sent: a process resumed from a pause
  aborts instead, even before its I/O thread noticed the lost session;
* lost partitions (``on_lost``, KIP-429) abort the open transaction, never commit it;
* a worker that lost its generation, or whose loop did not turn for a whole session (a stopped
  process), or that is assigned partitions, with no transaction open proves its producer was
  not replaced meanwhile: one record in a transaction it aborts, which a newer epoch refuses
  (``FencedError``) (Tansu may give a zombie paused for less than its session and its
  replacement one member id, and both the same partitions);
* newly assigned partitions start only once every transaction that was open on the output has
  ended (the output's LSO passes its high watermark of the moment; at most
  ``transaction.timeout.ms``), then from the offsets the group shows: a previous owner's last
  transaction is then decided, and its offsets applied.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from eosclient._processor.core import (
    SOURCE_HEADER,
    CopyRun,
    Item,
    Output,
    OutputRecord,
    ProcessorCore,
    ProcessorSettings,
)
from eosclient._processor.stats import ProcessorStats
from eosclient._processor.steps import drive
from eosclient.config import ConsumerConfig, ProducerConfig
from eosclient.consumer import ConsumerRecord, ReadCommittedConsumer
from eosclient.producer import TransactionalProducer, send_run

__all__ = ["SOURCE_HEADER", "ExactlyOnceProcessor", "OutputRecord", "ProcessorStats"]

log = logging.getLogger("eosclient.processor")

# The records carry what consumer_config's deserializers make (bytes without one), which the
# type checker cannot see: a transform may take ConsumerRecord[str, Any] as well as bytes'.
Transform = Callable[[ConsumerRecord[Any, Any]], Iterable[Output]]
BatchTransform = Callable[[list[ConsumerRecord[Any, Any]]], Iterable[Output]]


class ExactlyOnceProcessor:
    """Copy (and transform) records from input topics to an output topic, exactly once.

    Args:
        bootstrap_servers: ``"host:port,host:port"``.
        input_topics: The topics to consume (as a member of ``group_id``).
        output_topic: The topic outputs go to.
        group_id: The consumer group; its offsets are committed inside the transactions.
        transactional_id: Stable across restarts of this instance (one per instance).
        fn: ``fn(record) -> iterable of (key, value) or OutputRecord``; default: identity.
        batch_fn: Instead of ``fn``: ``batch_fn(records) -> iterable of outputs``, called once
            per poll.
        max_records_per_transaction: Commit when a transaction holds this many input records.
        commit_interval_ms: Commit a transaction at the latest this long after it began.
        preregister_partitions: Declare every output partition at ``begin_transaction``
            (KIP-609 style), so that the AddPartitionsToTxn round trip overlaps the transform
            instead of delaying the first Produce, where an empty registration is safe (a
            new producer id, not where its aborts left records; the others are registered
            with their first record: module docstring). Off by default: a transaction then
            leaves most registered partitions empty, and Kafka writes a marker on each. The
            consumer group is always pre-registered.
        max_consecutive_aborts: ``run()`` raises the last error once this many transactions in
            a row were aborted (None: retry for ever). Between them it waits, from 0 after the
            first abort up to 2 s.
        config: Settings by Kafka's dotted key given to both clients, the producer and the
            consumer: what they must share to reach the cluster (``security.protocol``,
            ``ssl.*``, ``sasl.*``, ``client.id``, timeouts). ``producer_config`` and
            ``consumer_config`` add to it and win over it.
        producer_config: Producer settings by Kafka's dotted key.
        consumer_config: Consumer settings by Kafka's dotted key (``auto.offset.reset``
            defaults to ``earliest`` here, and ``group.instance.id`` to ``transactional_id``:
            static membership, see the module docstring).

    Raises:
        ValueError: both ``fn`` and ``batch_fn``, no input topic, or a bad limit.
    """

    def __init__(self, *, bootstrap_servers: str, input_topics: Sequence[str],
                 output_topic: str, group_id: str, transactional_id: str,
                 fn: Transform | None = None, batch_fn: BatchTransform | None = None,
                 max_records_per_transaction: int = 500, commit_interval_ms: int = 100,
                 preregister_partitions: bool = False,
                 max_consecutive_aborts: int | None = 10,
                 config: Mapping[str, object] | None = None,
                 producer_config: Mapping[str, object] | None = None,
                 consumer_config: Mapping[str, object] | None = None) -> None:
        settings = ProcessorSettings.of(
            bootstrap_servers=bootstrap_servers, input_topics=input_topics,
            output_topic=output_topic, group_id=group_id, transactional_id=transactional_id,
            fn=fn, batch_fn=batch_fn, max_records_per_transaction=max_records_per_transaction,
            commit_interval_ms=commit_interval_ms, preregister_partitions=preregister_partitions,
            max_consecutive_aborts=max_consecutive_aborts, config=config,
            producer_config=producer_config, consumer_config=consumer_config)
        self.bootstrap_servers = settings.bootstrap_servers
        self.input_topics = settings.input_topics
        self.output_topic = settings.output_topic
        self.group_id = settings.group_id
        self.transactional_id = settings.transactional_id
        self._core = ProcessorCore(settings)

    @property
    def stats(self) -> ProcessorStats:
        """Progress so far (committed records, transactions, records/s); any thread."""
        return self._core.counter.snapshot()

    def stop(self) -> None:
        """Ask ``run()`` to commit what it has and return; safe from any thread or a signal
        handler."""
        self._core.stop_event.set()

    def run(self, max_records: int | None = None, timeout: float | None = None,
            idle_timeout: float | None = None) -> ProcessorStats:
        """Process until ``stop()``, ``max_records`` input records, ``timeout`` seconds, or
        ``idle_timeout`` seconds without a record; commit, close the clients, return the stats.

        ``idle_timeout`` counts from the start (``init_transactions()`` and the first group
        join included), then from the last record; once partitions were assigned, a later
        rebalance does not count (a join may wait for a dead member's session to expire).

        Raises:
            KafkaTimeoutError: ``idle_timeout`` passed before any partition was ever assigned
                (an input topic that does not exist, no broker reachable: the message says
                which), or init did not finish within it; clients closed.
            FencedError: another instance took over the transactional.id; clients closed.
            FatalError: e.g. not authorised; clients closed.
            KafkaTimeoutError: init or a commit did not finish in time; clients closed.
            AbortableError: ``max_consecutive_aborts`` transactions in a row failed (the last
                one's error, with a note); clients closed.
            Exception: whatever ``fn``/``batch_fn`` raised, after aborting its transaction.
        """
        return drive(self._core.run(max_records, timeout, idle_timeout), _Ports(self._core))


class _Ports:
    """The sync front's ``front`` port (:mod:`eosclient._processor.core` lists the ports):
    the sync clients, on the caller's thread; rebalance callbacks drive the core's steps
    inside ``poll_batch``."""

    def __init__(self, core: ProcessorCore) -> None:
        self._core = core
        self.producer: TransactionalProducer | None = None
        self.consumer: ReadCommittedConsumer | None = None

    def __getitem__(self, port: str) -> object:
        return self if port == "front" else getattr(self, port)

    def open_producer(self) -> ProducerConfig:
        settings = self._core.settings
        self.producer = TransactionalProducer(settings.bootstrap_servers,
                                              transactional_id=settings.transactional_id,
                                              config=settings.producer_config)
        return self.producer.config

    def open_consumer(self) -> ConsumerConfig:
        settings, core = self._core.settings, self._core
        consumer = ReadCommittedConsumer(settings.bootstrap_servers, group_id=settings.group_id,
                                         config=settings.consumer_config)
        self.consumer = consumer
        consumer.subscribe(settings.input_topics,
                           on_assign=lambda tps: drive(core.on_assign(tps), self),
                           on_revoke=lambda tps: drive(core.on_revoke(tps), self),
                           on_lost=lambda tps: drive(core.on_lost(tps), self))
        return consumer.config

    def transform_each(self, records: list[ConsumerRecord]) -> list[tuple[ConsumerRecord, Any]]:
        fn = self._core.settings.fn
        assert fn is not None
        return [(record, fn(record)) for record in records]

    def transform_batch(self, records: list[ConsumerRecord]) -> Any:
        batch_fn = self._core.settings.batch_fn
        assert batch_fn is not None
        return batch_fn(records)

    def send_all(self, topic: str, items: list[Item]) -> None:
        send = self._need(self.producer).send
        for value, key, partition, headers in items:
            send(topic, value, key, partition=partition, headers=headers)

    def send_copies(self, topic: str, runs: list[CopyRun]) -> None:
        producer = self._need(self.producer)
        for values, keys, headers in runs:
            send_run(producer, topic, values, keys, headers)

    def probe(self, topic: str, headers: list[tuple[str, bytes]]) -> None:
        producer = self._need(self.producer)
        producer.send(topic, None, partition=0, headers=headers)
        producer.flush()

    def backoff(self, seconds: float) -> bool:
        return self._core.stop_event.wait(seconds)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def close_clients(self, replaced: bool) -> None:
        consumer, producer = self.consumer, self.producer
        try:
            if consumer is not None:
                consumer.close(leave_group=replaced)
        finally:
            self.consumer = self.producer = None
            if producer is not None:
                producer.close()

    @staticmethod
    def _need(client: TransactionalProducer | None) -> TransactionalProducer:
        if client is None:
            raise RuntimeError("the processor is not running")
        return client
