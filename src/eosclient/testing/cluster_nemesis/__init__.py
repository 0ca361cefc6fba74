"""The cluster nemesis: a transactional producer on librdkafka's three-broker mock while a seeded
schedule moves partition leaders and the transaction coordinator, bounces brokers and pushes
retriable errors; then a verdict read from the log's control markers.

Theory of operation. :func:`make_schedule` turns a seed into a :class:`Schedule`, drawn up front
from ``random.Random(seed)`` alone, so the same seed gives the same schedule on every machine and
for every client. A fault comes every 0.3-1.2 s (uniform) and is one of

* ``leader``: move one partition's leader to another broker (the old one answers
  NOT_LEADER_OR_FOLLOWER, Metadata names the new one);
* ``coordinator``: move the transaction coordinator of the transactional.id to another broker
  (the old one answers NOT_COORDINATOR (16));
* ``down``: take one broker down (its connections reset, new ones refused) for 0.5-2.5 s, then
  up again;
* ``error``: push one retriable error onto the next request of one API, cluster-wide:
  NOT_LEADER_OR_FOLLOWER (6) on Produce, NOT_COORDINATOR (16), COORDINATOR_LOAD_IN_PROGRESS
  (14) or CONCURRENT_TRANSACTIONS (51) on AddPartitionsToTxn (24) or EndTxn (26).

The schedule behaves like a cluster, not like the mock's every possibility: at most one broker
is down at a time, and a leader or the coordinator moves only to a broker that is up, as an
election picks a live replica (the mock would let a partition be led by a down broker for ever).
A broker that goes down keeps leading what it led until it is back: the mock does not elect.

:func:`run_cluster_nemesis` gives each run a fresh :class:`~eosclient.testing.mock.MockCluster`
of three brokers with one topic of six partitions (replication factor 3, leaders 1, 2, 3, 1, 2,
3) and the coordinator on broker 1, initialises one transactional producer of the client asked
for (``eosclient``: :class:`~eosclient.TransactionalProducer`; ``eosclient-asyncio``:
:class:`~eosclient.aio.AsyncTransactionalProducer`, on an event loop the run keeps in its own
thread; ``confluent-kafka``: ``confluent_kafka.Producer`` with ``transactional.id``; all
``linger.ms=5``, all else each client's default), then plays the schedule in a thread while the
application loop runs transactions of 20 records (record ``i`` to partition ``i % 6``, each
value naming its transaction and record) for ``duration`` seconds. The loop does what the
clients' documentation asks of an application: a retriable error (a timed-out commit included)
calls the same method again, an abortable one aborts and goes on with the next transaction, a
fatal one closes the producer and makes a new one. Its decisions are written once and carried
out by a sync and an asyncio driver, so both eosclient fronts run the same loop. It writes down
what it was told about each transaction:

* ``committed``: ``commit_transaction()`` returned;
* ``aborted``: ``abort_transaction()`` returned (after a send or the commit failed);
* ``failed``: it failed before it was committed, and the abort did not complete either;
* ``unknown``: the commit was called and did not return for good: the loop gave up after
  ``give_up`` seconds of retrying, or the client raised a fatal error.

Then the brokers come up, the producer is closed, every leader moves to broker 1 (one Fetch then
reads all six partitions) and every partition is read raw from its start
(:func:`eosclient.testing.marker_log.read_logs`: read_uncommitted, control batches included, no
CRC check, as the mock writes its markers with a CRC of 0, and what was read deleted as the read
goes, as the mock walks its log from the start for every Fetch). Each record is decided by the
markers alone, since the mock's LSO is the high watermark and it sends no aborted-transactions
index. The verdict (:meth:`ClusterNemesisResult.problems`) wants 0 of each:

* lost: a record of a transaction the application was told committed that is not committed in
  the log (aborted, or with no marker after it);
* duplicated: a committed value seen more than once;
* aborted-read: a committed record of an aborted or failed transaction;
* out-of-order: within a partition, a committed record after one sent later (transactions and
  records are numbered in send order);
* partial: a transaction of unknown outcome committed in part (either outcome is fine, half of
  one is not); unexpected: a committed value the application never sent to that partition;
  unread: a partition not read to its high watermark;
* wedged: a commit or abort that did not finish within ``give_up`` seconds, or a producer that
  had to be re-created; and the slowest commit at most :data:`SLOWEST_COMMIT_LIMIT` seconds.

The mock keeps at most 5 MiB (or 100,000 batches) a partition and drops the oldest batches past
that: about 25,000 of these transactions. Records it dropped cannot be judged; the transactions
they belonged to are counted as ``pruned`` (shown, not a problem), and judged by their other
partitions. Values are kept short (``b"txn/record"``) to put that off.

Transactions per second (committed ones over the loop's seconds) is the rate. Evidence is kept
with every run, on the schedule's clock: the DEBUG lines of the ``eosclient.net`` and
``eosclient.producer`` loggers (librdkafka's log for confluent-kafka), and the requests the mock's
brokers read (broker and API, from the mock's request tracking) during every wedge and the
slowest commit. A failure's summary prints them around the stall; ``--log-dir`` writes them for
every run, with the whole log.

The mock is not a semantic broker: a re-initialised producer gets a new random producer id and
fences nobody, so a re-created producer's predecessor is never fenced by the broker here.

From a shell (one row per seed per client, then the median rate per client and their ratio)::

    python -m eosclient.testing.cluster_nemesis --seeds 1-6 --duration 30 \\
        --clients eosclient,eosclient-asyncio,confluent-kafka

(``--asyncio`` alone is ``--clients eosclient-asyncio``, as the other targets' flag.)

Targets. Everything above is the ``producer`` target. The schedule and the writer's verdict
serve two more, through a :class:`~eosclient.testing.cluster_front.ClusterFront` over a real
broker instead of the mock (``_front_run``): ``consumer`` (a
read_committed consumer in a group) and ``processor`` (ExactlyOnceProcessor workers), sync or
asyncio. Their schedules (``make_schedule(seed, target="consumer")``, the same for both) draw
leader moves, coordinator moves (the transactional ids' or the group's) and node bounces, no
errors; :class:`Player` plays either kind of schedule on a :class:`Cluster`::

    python -m eosclient.testing.cluster_nemesis --target processor --broker tansu \\
        --seeds 1-3 --duration 30 --asyncio

Where each part lives: ``_schedule`` (the cluster's shape, a seed's faults, and the
:class:`Player` that plays them on a :class:`Cluster`), ``_writer`` (the application loop's
decisions, their sync and asyncio drivers, and the clients they drive), ``_verdict`` (what a
producer run records, and :func:`judge`), ``_capture`` (the clients' DEBUG lines on the
schedule's clock), ``_mock_run`` (the producer target on the mock), ``_front_run`` (the consumer
and processor targets through a front: how a run goes; ``_front_consumer`` and
``_front_processor``, each target, made to ``_front_target``'s interface; ``_front_verdict``,
what they record and are judged by), ``_table`` (the Markdown tables) and ``_cli`` (the command
line).
"""

from __future__ import annotations

from eosclient.testing.cluster_nemesis._cli import main
from eosclient.testing.cluster_nemesis._front_run import run_front_nemesis
from eosclient.testing.cluster_nemesis._front_verdict import (
    FRONT_TARGETS,
    POLL_LIMIT,
    READ_LAG_LIMIT,
    FrontNemesisResult,
    FrontTarget,
    ReadCounts,
    judge_reads,
)
from eosclient.testing.cluster_nemesis._mock_run import run_cluster_nemesis
from eosclient.testing.cluster_nemesis._schedule import (
    BROKERS,
    DOWN_FOR,
    ERRORS,
    FAULT_KINDS,
    FRONT_FAULT_KINDS,
    GAP,
    PARTITIONS,
    TARGETS,
    Cluster,
    Fault,
    Player,
    Schedule,
    make_schedule,
)
from eosclient.testing.cluster_nemesis._table import (
    format_front_row,
    format_front_table,
    format_row,
    format_table,
    medians,
)
from eosclient.testing.cluster_nemesis._verdict import (
    SLOWEST_COMMIT_LIMIT,
    ClusterNemesisResult,
    Counts,
    Txn,
    Wedge,
    judge,
    value_of,
)
from eosclient.testing.cluster_nemesis._writer import CLIENTS

__all__ = ["BROKERS", "CLIENTS", "DOWN_FOR", "ERRORS", "FAULT_KINDS", "FRONT_FAULT_KINDS",
           "FRONT_TARGETS", "GAP", "PARTITIONS", "POLL_LIMIT", "READ_LAG_LIMIT",
           "SLOWEST_COMMIT_LIMIT", "TARGETS", "Cluster", "ClusterNemesisResult", "Counts",
           "Fault", "FrontNemesisResult", "FrontTarget", "Player", "ReadCounts", "Schedule",
           "Txn", "Wedge", "format_front_row", "format_front_table", "format_row",
           "format_table", "judge", "judge_reads", "main", "make_schedule", "medians",
           "run_cluster_nemesis", "run_front_nemesis", "value_of"]
