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
for (``eosclient``: :class:`~eosclient.TransactionalProducer`; ``confluent-kafka``:
``confluent_kafka.Producer`` with ``transactional.id``; both ``linger.ms=5``, all else each
client's default), then plays the schedule in a thread while the application loop runs
transactions of 20 records (record ``i`` to partition ``i % 6``, each value naming its
transaction and record) for ``duration`` seconds. The loop does what the clients' documentation
asks of an application: a retriable error (a timed-out commit included) calls the same method
again, an abortable one aborts and goes on with the next transaction, a fatal one closes the
producer and makes a new one. It writes down what it was told about each transaction:

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
        --clients eosclient,confluent-kafka

Targets. Everything above is the ``producer`` target. The schedule and the writer's verdict
serve two more, through a :class:`~eosclient.testing.cluster_front.ClusterFront` over a real
broker instead of the mock (:mod:`eosclient.testing._front_nemesis`): ``consumer`` (a
read_committed consumer in a group) and ``processor`` (ExactlyOnceProcessor workers), sync or
asyncio. Their schedules (``make_schedule(seed, target="consumer")``, the same for both) draw
leader moves, coordinator moves (the transactional ids' or the group's) and node bounces, no
errors; :class:`_Nemesis` plays either kind of schedule on a :class:`Cluster`::

    python -m eosclient.testing.cluster_nemesis --target processor --broker tansu \\
        --seeds 1-3 --duration 30 --asyncio
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import queue
import random
import statistics
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, Protocol

from eosclient.errors import AbortableError, ApiKey, EosError, RetriableError
from eosclient.testing.marker_log import PartitionLog, decide, read_logs
from eosclient.testing.mock import MockCluster, MockClusterError

if TYPE_CHECKING:
    from eosclient.testing._front_nemesis import FrontNemesisResult as _FrontResult

__all__ = ["CLIENTS", "FAULT_KINDS", "FRONT_FAULT_KINDS", "SLOWEST_COMMIT_LIMIT", "TARGETS",
           "ClusterNemesisResult", "Counts", "Fault", "Schedule", "Txn", "format_table", "judge",
           "main", "make_schedule", "run_cluster_nemesis", "value_of"]

log = logging.getLogger("eosclient.testing.cluster_nemesis")

ClientName = Literal["eosclient", "confluent-kafka"]
CLIENTS: Final[tuple[ClientName, ...]] = ("eosclient", "confluent-kafka")
FaultKind = Literal["leader", "coordinator", "down", "error"]
FAULT_KINDS: Final[tuple[FaultKind, ...]] = ("leader", "coordinator", "down", "error")
#: The faults of the front targets (a ClusterFront has no error to push cluster-wide here).
FRONT_FAULT_KINDS: Final[tuple[FaultKind, ...]] = ("leader", "coordinator", "down")
CoordinatorKey = Literal["transaction", "group"]
Target = Literal["producer", "consumer", "processor"]
#: ``producer``: the transactional producer on the mock (this module); ``consumer`` and
#: ``processor``: a read_committed consumer, or ExactlyOnceProcessor workers, through a
#: ClusterFront over a real broker (:mod:`eosclient.testing._front_nemesis`).
TARGETS: Final[tuple[Target, ...]] = ("producer", "consumer", "processor")

TOPIC: Final = "churn"
PARTITIONS: Final = 6
BROKERS: Final = 3
TRANSACTIONAL_ID: Final = "cluster-nemesis"
RECORDS_PER_TRANSACTION: Final = 20
GAP: Final = (0.3, 1.2)  # seconds between faults, uniform
DOWN_FOR: Final = (0.5, 2.5)  # seconds a broker stays down, uniform
#: (API, error code) pairs ``error`` pushes: each retriable where Kafka's clients meet it.
ERRORS: Final[tuple[tuple[ApiKey, int], ...]] = (
    (ApiKey.PRODUCE, 6),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 16), (ApiKey.ADD_PARTITIONS_TO_TXN, 14),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 51),
    (ApiKey.END_TXN, 16), (ApiKey.END_TXN, 14), (ApiKey.END_TXN, 51),
)
_CODE_NAMES: Final = {6: "NOT_LEADER_OR_FOLLOWER", 14: "COORDINATOR_LOAD_IN_PROGRESS",
                      16: "NOT_COORDINATOR", 51: "CONCURRENT_TRANSACTIONS"}
SLOWEST_COMMIT_LIMIT: Final = 15.0
CALL_TIMEOUT: Final = 5.0  # each commit_transaction / abort_transaction call's timeout
GIVE_UP: Final = 60.0  # seconds of retrying a commit or an abort before it counts as wedged
_INIT_TIMEOUT: Final = 30.0
_RETRY_PAUSE: Final = 0.01  # before calling again after a retriable error (no busy loop)
_CLOSE_TIMEOUT: Final = 10.0
_READ_TIMEOUT: Final = 120.0
_LINGER_MS: Final = 5
_CAPTURED: Final = ("eosclient.net", "eosclient.producer")
_CK_LOGGER: Final = "eosclient.testing.cluster_nemesis.librdkafka"
_MAX_LOG_LINES: Final = 200_000
_AROUND: Final = 3.0  # seconds of log printed either side of a stall
_REQUESTS_AROUND: Final = 0.3  # seconds of mock requests kept either side of a window
_MAX_REQUEST_LINES: Final = 20_000
_SLOW_NOTE: Final = 1.0  # --log-dir lists every transaction whose commit took longer


# -- the schedule ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fault:
    """One fault of a schedule.

    Attributes:
        at: Seconds after the loop's first transaction began.
        kind: One of :data:`FAULT_KINDS`.
        broker: leader, coordinator: the new one; down: the broker (a front's node) taken
            down; error: unused.
        partition: leader: the partition moved; else -1.
        hold: down: seconds until it is up again; else 0.
        api, code: error: the API key and the error code pushed; else 0.
        coordinator: coordinator: whose coordinator moves, the transactional id's
            (``"transaction"``) or the consumer group's (``"group"``).
    """

    at: float
    kind: FaultKind
    broker: int = 0
    partition: int = -1
    hold: float = 0.0
    api: int = 0
    code: int = 0
    coordinator: CoordinatorKey = "transaction"

    def __str__(self) -> str:
        what = {
            "leader": f"partition {self.partition} led by broker {self.broker}",
            "coordinator": f"{self.coordinator} coordinator moves to broker {self.broker}",
            "down": f"broker {self.broker} down for {self.hold:.1f} s",
            "error": (f"{ApiKey(self.api).label} answers "
                      f"{_CODE_NAMES.get(self.code, 'code')} ({self.code}) once"),
        }[self.kind]
        return f"t={self.at:5.1f}s {self.kind:<11} {what}"


@dataclass(frozen=True)
class Schedule:
    """A seed's faults in time order, and the window and target they were drawn for."""

    seed: int
    duration: float
    faults: tuple[Fault, ...]
    target: Target = "producer"

    @property
    def kinds(self) -> tuple[FaultKind, ...]:
        """The kinds of fault this target's schedules draw."""
        return FAULT_KINDS if self.target == "producer" else FRONT_FAULT_KINDS

    def __str__(self) -> str:
        counts = Counter(f.kind for f in self.faults)
        whose = "" if self.target == "producer" else f" ({self.target} target)"
        head = (f"cluster nemesis schedule{whose}, seed {self.seed}: {len(self.faults)} faults "
                f"in {self.duration:g} s ("
                + ", ".join(f"{counts[k]} {k}" for k in self.kinds) + ")")
        return "\n".join([head, *(f"  {fault}" for fault in self.faults)])


def make_schedule(seed: int, *, duration: float = 30.0, target: Target = "producer") -> Schedule:
    """The schedule of ``seed`` over ``duration`` seconds for ``target``: the same arguments
    give the same schedule, always.

    Faults start 0.3-1.2 s in and come 0.3-1.2 s apart; each kind of the target's
    (:data:`FAULT_KINDS` for the producer, :data:`FRONT_FAULT_KINDS` for the front targets) is
    equally likely, and a front target's ``coordinator`` moves the transactional ids' or the
    group's coordinator, equally likely. A ``down`` drawn while a broker is still down becomes
    an ``error`` (the producer) or a ``leader`` move (the front targets); every broker taken
    down is up again by ``duration`` at the latest (its hold is cut short). Leaders and
    coordinators start as the runs set them up (partition p on broker ``p % 3 + 1``, every
    coordinator on broker 1), move only to brokers that are up, and always to another broker
    than the one they are on. The producer's draws are those of the first version, seed for
    seed.

    Raises:
        ValueError: ``duration`` is not positive, or an unknown ``target``.
    """
    if duration <= 0:
        raise ValueError("duration must be > 0")
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, not {target!r}")
    front = target != "producer"
    kinds = FRONT_FAULT_KINDS if front else FAULT_KINDS
    keys: tuple[CoordinatorKey, ...] = ("transaction", "group") if front else ("transaction",)
    rng = random.Random(seed)
    leaders = [p % BROKERS + 1 for p in range(PARTITIONS)]
    coordinators = dict.fromkeys(keys, 1)
    down_until, down = 0.0, 0
    faults: list[Fault] = []
    t = rng.uniform(*GAP)
    while t < duration:
        at = round(t, 2)
        kind = rng.choice(kinds)
        if kind == "down" and down_until > at:
            kind = "leader" if front else "error"
        up = [b for b in range(1, BROKERS + 1) if not (down_until > at and b == down)]
        if kind == "leader":
            partition = rng.randrange(PARTITIONS)
            broker = rng.choice([b for b in up if b != leaders[partition]] or up)
            leaders[partition] = broker
            faults.append(Fault(at, kind, broker=broker, partition=partition))
        elif kind == "coordinator":
            key = rng.choice(keys) if len(keys) > 1 else keys[0]
            broker = rng.choice([b for b in up if b != coordinators[key]] or up)
            coordinators[key] = broker
            faults.append(Fault(at, kind, broker=broker, coordinator=key))
        elif kind == "down":
            down = rng.randint(1, BROKERS)
            hold = round(min(rng.uniform(*DOWN_FOR), duration - at), 2)
            down_until = at + hold
            faults.append(Fault(at, kind, broker=down, hold=hold))
        else:
            api, code = rng.choice(ERRORS)
            faults.append(Fault(at, kind, api=int(api), code=code))
        t += rng.uniform(*GAP)
    return Schedule(seed, duration, tuple(faults), target)


class Cluster(Protocol):
    """What a schedule is played on: librdkafka's mock (:class:`_MockCluster`) or a
    ClusterFront (:mod:`eosclient.testing._front_nemesis`)."""

    def leader(self, partition: int, broker: int) -> None: ...
    def coordinator(self, key: CoordinatorKey, broker: int) -> None: ...
    def down(self, broker: int) -> None: ...
    def up(self, broker: int) -> None: ...
    def error(self, api: int, code: int) -> None: ...


class _MockCluster:
    """The producer target's cluster: the mock, its one topic and transactional id."""

    def __init__(self, mock: MockCluster) -> None:
        self._mock = mock

    def leader(self, partition: int, broker: int) -> None:
        self._mock.set_partition_leader(TOPIC, partition, broker)

    def coordinator(self, key: CoordinatorKey, broker: int) -> None:
        self._mock.set_coordinator("transaction", TRANSACTIONAL_ID, broker)

    def down(self, broker: int) -> None:
        self._mock.set_broker_down(broker)

    def up(self, broker: int) -> None:
        self._mock.set_broker_up(broker)

    def error(self, api: int, code: int) -> None:
        self._mock.push_request_errors(api, code)


class _Nemesis(threading.Thread):
    """Plays a schedule on a cluster, from ``clock`` (a ``time.monotonic()``) on."""

    def __init__(self, cluster: Cluster, schedule: Schedule, clock: float,
                 events: list[str]) -> None:
        super().__init__(name="cluster-nemesis", daemon=True)
        self._cluster, self._clock, self._events = cluster, clock, events
        steps: list[tuple[float, int, Fault, bool]] = []  # (at, order, fault, is the "up")
        for n, fault in enumerate(schedule.faults):
            steps.append((fault.at, 2 * n, fault, False))
            if fault.kind == "down":
                steps.append((round(fault.at + fault.hold, 2), 2 * n + 1, fault, True))
        self._steps = sorted(steps, key=lambda s: (s[0], s[1]))
        self._halt = threading.Event()
        self._down: set[int] = set()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for at, _, fault, up in self._steps:
                if self._halt.wait(max(0.0, self._clock + at - time.monotonic())):
                    return
                self._play(fault, up)
        except BaseException as exc:  # the run reports it
            self.error = exc

    def _play(self, fault: Fault, up: bool) -> None:
        cluster = self._cluster
        if fault.kind == "leader":
            cluster.leader(fault.partition, fault.broker)
        elif fault.kind == "coordinator":
            cluster.coordinator(fault.coordinator, fault.broker)
        elif fault.kind == "down" and up:
            cluster.up(fault.broker)
            self._down.discard(fault.broker)
        elif fault.kind == "down":
            cluster.down(fault.broker)
            self._down.add(fault.broker)
        else:
            cluster.error(fault.api, fault.code)
        now = time.monotonic() - self._clock
        self._events.append(f"t={now:6.2f}s " + (f"broker {fault.broker} up" if up
                                                   else str(fault).split(" ", 1)[1].strip()))

    def stop(self) -> None:
        """Stop playing, and bring every broker taken down back up (from the calling thread,
        once this one has ended)."""
        self._halt.set()
        self.join(10)
        for broker in sorted(self._down):
            self._cluster.up(broker)
            self._events.append(f"t={time.monotonic() - self._clock:6.2f}s broker {broker} up "
                                "(the run ended)")
        self._down.clear()


# -- the clients -----------------------------------------------------------------------------------

class _Retry(Exception):
    """Transient: call the same method again."""


class _Abort(Exception):
    """This transaction is lost: abort it."""


class _Fatal(Exception):
    """The producer cannot go on: close it and make a new one."""


class _Client(Protocol):
    """One transactional producer, its errors translated to :class:`_Retry`, :class:`_Abort`
    and :class:`_Fatal` as its documentation tells an application to read them."""

    def init(self, timeout: float) -> None: ...
    def begin(self) -> None: ...
    def send(self, partition: int, value: bytes) -> None: ...
    def commit(self, timeout: float) -> None: ...
    def abort(self, timeout: float) -> None: ...
    def close(self, timeout: float) -> None: ...


@contextlib.contextmanager
def _eos_errors() -> Iterator[None]:
    """eosclient's error kinds (docs/errors.md): retriable -> call again, abortable -> abort,
    fenced, fatal or a usage error -> close."""
    try:
        yield
    except RetriableError as exc:
        raise _Retry(repr(exc)) from exc
    except AbortableError as exc:
        raise _Abort(repr(exc)) from exc
    except EosError as exc:
        raise _Fatal(repr(exc)) from exc


class _EosClient:
    def __init__(self, servers: str, *, topic: str = TOPIC,
                 transactional_id: str = TRANSACTIONAL_ID) -> None:
        from eosclient.producer import TransactionalProducer  # noqa: PLC0415

        self._topic = topic
        self._producer = TransactionalProducer(servers, transactional_id=transactional_id,
                                               linger_ms=_LINGER_MS)

    def init(self, timeout: float) -> None:
        with _eos_errors():
            self._producer.init_transactions(timeout)

    def begin(self) -> None:
        with _eos_errors():
            self._producer.begin_transaction()

    def send(self, partition: int, value: bytes) -> None:
        with _eos_errors():
            self._producer.send(self._topic, value, partition=partition)

    def commit(self, timeout: float) -> None:
        with _eos_errors():
            self._producer.commit_transaction(timeout)

    def abort(self, timeout: float) -> None:
        with _eos_errors():
            self._producer.abort_transaction(timeout)

    def close(self, timeout: float) -> None:
        with contextlib.suppress(EosError):
            self._producer.close(timeout)


class _CkClient:
    def __init__(self, servers: str) -> None:
        import confluent_kafka  # noqa: PLC0415

        self._ck = confluent_kafka
        self._producer = confluent_kafka.Producer({
            "bootstrap.servers": servers, "transactional.id": TRANSACTIONAL_ID,
            "linger.ms": _LINGER_MS, "logger": logging.getLogger(_CK_LOGGER)})

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """librdkafka's transactional error kinds (KafkaError.fatal(), txn_requires_abort(),
        retriable()); an error that is none of them (e.g. _STATE) leaves no way on: close."""
        try:
            yield
        except self._ck.KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if error is None or not hasattr(error, "fatal") or error.fatal():
                raise _Fatal(repr(exc)) from exc
            if error.txn_requires_abort():
                raise _Abort(repr(exc)) from exc
            if error.retriable():
                raise _Retry(repr(exc)) from exc
            raise _Fatal(repr(exc)) from exc
        except BufferError as exc:
            raise _Retry(repr(exc)) from exc

    def init(self, timeout: float) -> None:
        with self._errors():
            self._producer.init_transactions(timeout)

    def begin(self) -> None:
        with self._errors():
            self._producer.begin_transaction()

    def send(self, partition: int, value: bytes) -> None:
        with self._errors():
            self._producer.produce(TOPIC, value, partition=partition)

    def commit(self, timeout: float) -> None:
        with self._errors():
            self._producer.commit_transaction(timeout)
        self._producer.poll(0)  # serve the log callback

    def abort(self, timeout: float) -> None:
        with self._errors():
            self._producer.abort_transaction(timeout)
        self._producer.poll(0)

    def close(self, timeout: float) -> None:
        """Purge, then close() in a thread of its own: it aborts an open transaction and
        flushes, and may wait for a broker for as long as it likes."""
        producer = self._producer
        with contextlib.suppress(Exception):
            producer.purge()
        closer = threading.Thread(target=producer.close, name="ck-close", daemon=True)
        closer.start()
        closer.join(timeout)
        if closer.is_alive():
            log.warning("confluent-kafka close() has not returned after %.0f s", timeout)


_MAKERS: Final[Mapping[str, Callable[[str], _Client]]] = {
    "eosclient": _EosClient, "confluent-kafka": _CkClient}


# -- what a run records ----------------------------------------------------------------------------

Outcome = Literal["committed", "aborted", "failed", "unknown"]


@dataclass
class Txn:
    """One transaction of the loop, and what the application was told.

    Attributes:
        n: Its number (in send order, from 0).
        began: Seconds on the schedule's clock when it began.
        outcome: What the application was told (see the module docstring).
        sent: How many of its records ``send()`` accepted.
        commit_seconds: From the first ``commit_transaction()`` call to the last one's end
            (retries included); None if the commit was never called.
        abort_seconds: Likewise for the abort.
        note: The error that decided it, if any.
        ended: Seconds on the schedule's clock when it was committed or aborted (None: it
            was neither, as far as the application knows).
    """

    n: int
    began: float
    outcome: Outcome = "failed"
    sent: int = 0
    commit_seconds: float | None = None
    abort_seconds: float | None = None
    note: str = ""
    ended: float | None = None


@dataclass(frozen=True)
class Wedge:
    """A commit or abort that never finished, or a producer that had to be re-created."""

    at: float  # schedule clock, when the call that wedged began
    txn: int
    what: str
    seconds: float  # how long it was tried

    def __str__(self) -> str:
        return f"t={self.at:.1f}s transaction {self.txn}: {self.what} (after {self.seconds:.1f} s)"


@dataclass
class Counts:
    """What the log holds against what the application was told (the verdict's counts)."""

    committed_records: int = 0
    lost: int = 0
    duplicated: int = 0
    aborted_read: int = 0
    out_of_order: int = 0
    partial: int = 0  # transactions of unknown outcome committed in part
    unexpected: int = 0
    unread: int = 0  # offsets below a high watermark the read never reached
    pruned: int = 0  # committed or unknown transactions the mock's dropped log head hid in part
    open_records: int = 0  # records with no marker after them (not a problem by itself)
    examples: list[str] = field(default_factory=list)

    def bad(self) -> dict[str, int]:
        """The non-zero counts that fail a run."""
        kinds = ("lost", "duplicated", "aborted_read", "out_of_order", "partial", "unexpected",
                 "unread")
        return {k: getattr(self, k) for k in kinds if getattr(self, k)}


def value_of(txn: int, record: int) -> bytes:
    """The value of ``record`` of transaction ``txn``: ``b"txn/record"``, short, so the mock's
    5 MiB a partition holds as many transactions as it can."""
    return b"%d/%d" % (txn, record)


def _parse(value: bytes) -> tuple[int, int] | None:
    txn, slash, record = value.partition(b"/")
    if not slash or not txn.isdigit() or not record.isdigit():
        return None
    return int(txn), int(record)


def judge(txns: Sequence[Txn], logs: Mapping[int, PartitionLog], *,
          topic: str = TOPIC) -> Counts:
    """Compare what the application was told (``txns``) with the log, partition by partition
    (``logs``: partition -> what was read of it), deciding each record by the markers. Pure:
    no broker.

    Where the mock dropped a partition's head (``start_offset`` above 0), its records of the
    transactions before the first one still in it cannot be judged: those transactions count
    as ``pruned``, and only their other partitions are judged.
    """
    counts = Counts()
    told = {t.n: t for t in txns}
    committed_of: dict[int, set[int]] = {}  # txn -> its committed record numbers
    seen: Counter[bytes] = Counter()
    judged_from: dict[int, int] = {}  # partition -> first transaction judged there

    def example(text: str) -> None:
        if len(counts.examples) < 20:
            counts.examples.append(text)

    for partition, read in sorted(logs.items()):
        if not read.complete:
            counts.unread += read.end_offset - read.read_to
            example(f"unread: {topic}-{partition} read to offset {read.read_to} of "
                    f"{read.end_offset}")
        decided = decide(read.batches)
        if read.start_offset > 0:
            keys = [k for b in read.batches for _, v in b.records if (k := _parse(v))]
            judged_from[partition] = min(keys)[0] if keys else len(txns)
        counts.open_records += len(decided.open)
        last: tuple[int, int] | None = None
        for offset, value in decided.committed:
            counts.committed_records += 1
            where = f"{topic}-{partition}@{offset} {value.decode(errors='replace')!r}"
            key = _parse(value)
            txn = told.get(key[0]) if key is not None else None
            if key is None or txn is None or key[1] >= txn.sent or \
                    key[1] % PARTITIONS != partition:
                counts.unexpected += 1
                example(f"unexpected: {where}")
                continue
            seen[value] += 1
            if seen[value] > 1:
                counts.duplicated += 1
                example(f"duplicated: {where}")
                continue
            if txn.outcome in ("aborted", "failed"):
                counts.aborted_read += 1
                example(f"aborted-read: {where} (the application was told {txn.outcome}"
                        + (f": {txn.note}" if txn.note else "") + ")")
            if last is not None and key < last:
                counts.out_of_order += 1
                example(f"out-of-order: {where} after {last[0]}/{last[1]}")
            last = max(key, last) if last is not None else key
            committed_of.setdefault(key[0], set()).add(key[1])
    for txn in txns:
        got = committed_of.get(txn.n, set())
        judged = {i for i in range(txn.sent) if txn.n >= judged_from.get(i % PARTITIONS, 0)}
        if len(judged) < txn.sent and txn.outcome in ("committed", "unknown"):
            counts.pruned += 1
        if txn.outcome == "committed" and not judged <= got:
            missing = sorted(judged - got)
            counts.lost += len(missing)
            example(f"lost: transaction {txn.n} (began t={txn.began:.2f}s, committed in "
                    f"{txn.commit_seconds or 0:.2f} s): records {missing} not committed")
        elif txn.outcome == "unknown" and len(judged) == txn.sent and 0 < len(got) < txn.sent:
            counts.partial += 1
            example(f"partial: transaction {txn.n} of unknown outcome: {len(got)} of "
                    f"{txn.sent} records committed")
    return counts


@dataclass
class ClusterNemesisResult:
    """What one run did and found (see :meth:`problems`)."""

    client: str
    schedule: Schedule
    txns: list[Txn] = field(default_factory=list)
    wedges: list[Wedge] = field(default_factory=list)
    recreated: int = 0  # producers made after the first
    loop_seconds: float = 0.0
    seconds: float = 0.0  # the whole run: cluster, init, loop, close, read
    events: list[str] = field(default_factory=list)  # the steps as played
    log_lines: list[str] = field(default_factory=list)  # DEBUG lines, schedule clock
    # The requests the mock's brokers read during windows() (a little either side), and how
    # many of each API they read in the whole run.
    request_lines: list[str] = field(default_factory=list)
    requests_by_api: dict[str, int] = field(default_factory=dict)
    counts: Counts | None = None
    error: str = ""  # the run itself failed (could not init, could not read)
    give_up: float = GIVE_UP
    call_timeout: float = CALL_TIMEOUT

    @property
    def seed(self) -> int:
        return self.schedule.seed

    def outcomes(self) -> Counter[str]:
        """Transactions by what the application was told."""
        return Counter(t.outcome for t in self.txns)

    @property
    def committed(self) -> int:
        return self.outcomes()["committed"]

    @property
    def rate(self) -> float:
        """Committed transactions per second of the loop."""
        return self.committed / self.loop_seconds if self.loop_seconds > 0 else 0.0

    def slowest_commit(self) -> Txn | None:
        """The transaction whose commit took longest (retries included), if any was called."""
        timed = [t for t in self.txns if t.commit_seconds is not None]
        return max(timed, key=lambda t: t.commit_seconds or 0.0) if timed else None

    def problems(self) -> list[str]:
        """Everything wrong with the run (empty: it passed)."""
        found: list[str] = []
        if self.error:
            found.append(f"run failed: {self.error}")
        if self.counts is None:
            found.append("the log was not judged")
        else:
            found += [f"{kind.replace('_', '-')}: {n}" for kind, n in self.counts.bad().items()]
        found += [f"wedged: {w}" for w in self.wedges]
        slowest = self.slowest_commit()
        if slowest is not None and (slowest.commit_seconds or 0.0) > SLOWEST_COMMIT_LIMIT:
            found.append(f"slowest commit {slowest.commit_seconds:.1f} s > "
                         f"{SLOWEST_COMMIT_LIMIT:g} s (transaction {slowest.n}, began "
                         f"t={slowest.began:.1f}s)")
        if not self.committed and not self.error:
            found.append("no transaction committed")
        return found

    def stall(self) -> tuple[float, float] | None:
        """The schedule-clock window of the worst stall: the first wedge, else the slowest
        commit over the limit (None: no stall)."""
        if self.wedges:
            w = self.wedges[0]
            return w.at, w.at + w.seconds
        slowest = self.slowest_commit()
        if slowest is not None and (slowest.commit_seconds or 0.0) > SLOWEST_COMMIT_LIMIT:
            return slowest.began, slowest.began + (slowest.commit_seconds or 0.0) + 1.0
        return None

    def windows(self) -> list[tuple[float, float]]:
        """The schedule-clock windows worth evidence: every wedge, and the slowest commit."""
        out = [(w.at, w.at + w.seconds) for w in self.wedges]
        slowest = self.slowest_commit()
        if slowest is not None:
            out.append((slowest.began, slowest.began + (slowest.commit_seconds or 0.0)))
        return out

    def lines_around(self, window: tuple[float, float], around: float = _AROUND) -> list[str]:
        """The captured log lines within ``around`` seconds of ``window``, with the requests
        the mock's brokers read during it, in time order."""
        low, high = window[0] - around, window[1] + around
        return sorted((line for line in [*self.log_lines, *self.request_lines]
                       if low <= _time_of(line) <= high), key=_time_of)

    def replay(self) -> str:
        """The command that replays this run's schedule for this client."""
        return (f"python -m eosclient.testing.cluster_nemesis --seeds {self.seed} "
                f"--duration {self.schedule.duration:g} --clients {self.client}")

    def summary(self, *, max_log_lines: int = 200) -> str:
        """Seed, verdict, problems, examples, the schedule as played, the log around the stall
        and the replay command: what a failure message needs."""
        problems = self.problems()
        lines = [f"cluster nemesis, {self.client}, seed {self.seed}: "
                 + ("OK" if not problems else "PROBLEMS"), *(f"  {p}" for p in problems)]
        if self.counts is not None and self.counts.examples:
            lines += ["examples:", *(f"  {e}" for e in self.counts.examples)]
        lines += [str(self.schedule), "as played:", *(f"  {e}" for e in self.events)]
        if self.requests_by_api:
            lines.append("requests the brokers read: " + ", ".join(
                f"{api} {n}" for api, n in self.requests_by_api.items()))
        window = self.stall()
        if window is not None:
            lines += self.evidence(window, max_log_lines)
        lines.append(f"replay: {self.replay()}")
        return "\n".join(lines)

    def evidence(self, window: tuple[float, float], max_lines: int = 200) -> list[str]:
        """The log lines and mock requests around ``window``, headed."""
        around = self.lines_around(window)
        cut = f", the last {max_lines}" if len(around) > max_lines else ""
        return [f"log and requests from t={window[0] - _AROUND:.1f}s to "
                f"t={window[1] + _AROUND:.1f}s ({len(around)} lines{cut}):",
                *(f"  {line}" for line in around[-max_lines:])]


def _time_of(line: str) -> float:
    """The schedule-clock time a captured line starts with (``t=1.234s ...``)."""
    try:
        return float(line.split("s ", 1)[0].removeprefix("t="))
    except ValueError:
        return -1.0


# -- the run ---------------------------------------------------------------------------------------

class _Capture(logging.Handler):
    """Keeps the DEBUG lines of the client's loggers, stamped on the schedule's clock."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(logging.DEBUG)
        self.clock = time.monotonic()
        self.lines: deque[str] = deque(maxlen=_MAX_LOG_LINES)
        self._loggers = [logging.getLogger(n) for n in names]
        self._levels = [lg.level for lg in self._loggers]

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            t = record.created - time.time() + time.monotonic() - self.clock
            self.lines.append(f"t={t:.3f}s {record.threadName} {record.name} "
                              f"{record.levelname} {record.getMessage()}")

    def __enter__(self) -> _Capture:
        for lg in self._loggers:
            lg.addHandler(self)
            lg.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for lg, level in zip(self._loggers, self._levels, strict=True):
            lg.removeHandler(self)
            lg.setLevel(level)


class _Loop:
    """The application: transactions of 20 records until the window ends.

    ``pace``: seconds to wait after each transaction (0: none); ``abort_every``: abort, after
    its sends, every transaction whose number is ``abort_every - 1`` modulo ``abort_every``
    (0: none; 2: every other one), as the front targets' steady writer does.
    """

    def __init__(self, result: ClusterNemesisResult, make: Callable[[], _Client],
                 duration: float, *, pace: float = 0.0, abort_every: int = 0) -> None:
        self.result, self._make, self._duration = result, make, duration
        self._pace, self._abort_every = pace, abort_every
        self.clock = time.monotonic()  # the schedule's clock: set when the faults start
        self.client = make()

    def now(self) -> float:
        return time.monotonic() - self.clock

    def init(self) -> None:
        """init_transactions, retried while retriable, for at most ``give_up`` seconds."""
        started = time.monotonic()
        while True:
            try:
                self.client.init(_INIT_TIMEOUT)
                return
            except _Retry:
                if time.monotonic() - started > self.result.give_up:
                    raise
                time.sleep(_RETRY_PAUSE)

    def run(self) -> None:
        n = len(self.result.txns)  # after any the caller ran itself (a warm-up)
        while self.now() < self._duration:
            txn = Txn(n, round(self.now(), 3))
            self.result.txns.append(txn)
            n += 1
            self.transaction(txn)
            if self._pace:
                time.sleep(self._pace)

    def transaction(self, txn: Txn) -> None:
        started = time.monotonic()
        while True:
            try:
                self.client.begin()
                break
            except _Retry as exc:
                if time.monotonic() - started < self.result.give_up:
                    time.sleep(_RETRY_PAUSE)
                    continue
                txn.note = f"begin: {exc}"
                self.recreate(txn, f"begin_transaction() did not succeed: {exc}", txn.began,
                              time.monotonic() - started)
                return
            except _Abort as exc:  # an earlier failure not aborted: abort it, begin again
                txn.note = f"begin: {exc}"
                self.abort(txn)
                return
            except _Fatal as exc:
                txn.note = f"begin: {exc}"
                self.recreate(txn, f"begin_transaction() raised {exc}", txn.began)
                return
        try:
            for i in range(RECORDS_PER_TRANSACTION):
                self.client.send(i % PARTITIONS, value_of(txn.n, i))
                txn.sent += 1
        except (_Retry, _Abort, _Fatal) as exc:
            txn.note = f"send: {exc}"
            self.abort(txn)
            return
        if self._abort_every and txn.n % self._abort_every == self._abort_every - 1:
            txn.note = "aborted by the application"
            self.abort(txn)
            return
        self.commit(txn)

    def commit(self, txn: Txn) -> None:
        started = time.monotonic()
        at = self.now()
        while True:
            try:
                self.client.commit(self.result.call_timeout)
            except _Retry as exc:
                if time.monotonic() - started < self.result.give_up:
                    time.sleep(_RETRY_PAUSE)
                    continue
                txn.commit_seconds = time.monotonic() - started
                txn.outcome, txn.note = "unknown", f"commit: {exc}"
                self.recreate(txn, f"commit_transaction() did not finish: {exc}", at,
                              txn.commit_seconds)
            except _Abort as exc:
                txn.commit_seconds = time.monotonic() - started
                txn.note = f"commit: {exc}"
                self.abort(txn)
            except _Fatal as exc:
                txn.commit_seconds = time.monotonic() - started
                txn.outcome, txn.note = "unknown", f"commit: {exc}"
                self.recreate(txn, f"commit_transaction() raised {exc}", at, txn.commit_seconds)
            else:
                txn.commit_seconds = time.monotonic() - started
                txn.outcome, txn.ended = "committed", round(self.now(), 3)
            return

    def abort(self, txn: Txn) -> None:
        started = time.monotonic()
        at = self.now()
        while True:
            try:
                self.client.abort(self.result.call_timeout)
            except _Retry as exc:
                if time.monotonic() - started < self.result.give_up:
                    time.sleep(_RETRY_PAUSE)
                    continue
                txn.abort_seconds = time.monotonic() - started
                self.recreate(txn, f"abort_transaction() did not finish: {exc}", at,
                              txn.abort_seconds)
            except (_Abort, _Fatal) as exc:
                txn.abort_seconds = time.monotonic() - started
                self.recreate(txn, f"abort_transaction() raised {exc}", at, txn.abort_seconds)
            else:
                txn.abort_seconds = time.monotonic() - started
                txn.outcome, txn.ended = "aborted", round(self.now(), 3)
            return

    def recreate(self, txn: Txn, what: str, at: float, seconds: float = 0.0) -> None:
        """Close the producer and make a new one (a wedge, whatever the cause)."""
        self.result.wedges.append(Wedge(round(at, 2), txn.n, what, round(seconds, 1)))
        self.client.close(_CLOSE_TIMEOUT)
        self.result.recreated += 1
        self.client = self._make()
        self.init()


def run_cluster_nemesis(client: str, *, seed: int = 1, duration: float = 30.0,
                        schedule: Schedule | None = None,
                        give_up: float = GIVE_UP,
                        call_timeout: float = CALL_TIMEOUT) -> ClusterNemesisResult:
    """One run of ``client`` (one of :data:`CLIENTS`) on a fresh mock cluster under ``seed``'s
    schedule (or ``schedule``), judged from the log.

    Args:
        client: ``"eosclient"`` or ``"confluent-kafka"``.
        seed: Draws the schedule (:func:`make_schedule`) unless ``schedule`` is given.
        duration: Seconds of the loop (and of the schedule drawn).
        schedule: Play this schedule instead of drawing one.
        give_up: Seconds of retrying one commit, abort or init before it counts as wedged.
        call_timeout: The timeout of each ``commit_transaction`` and ``abort_transaction``
            call; one that times out is called again until ``give_up``.

    Returns:
        The result; a run that could not be played or read has ``error`` set.

    Raises:
        ValueError: an unknown ``client``, or a schedule drawn for another target.
    """
    if client not in _MAKERS:
        raise ValueError(f"client must be one of {', '.join(CLIENTS)}, not {client!r}")
    schedule = schedule or make_schedule(seed, duration=duration)
    if schedule.target != "producer":
        raise ValueError(f"a schedule drawn for the {schedule.target} target has no errors to "
                         "push and moves a group's coordinator: draw one for 'producer'")
    result = ClusterNemesisResult(client, schedule, give_up=give_up, call_timeout=call_timeout)
    started = time.monotonic()
    with MockCluster(BROKERS) as cluster, _Capture([*_CAPTURED, _CK_LOGGER]) as capture:
        cluster.create_topic(TOPIC, PARTITIONS, replication_factor=BROKERS)
        for partition in range(PARTITIONS):
            cluster.set_partition_leader(TOPIC, partition, partition % BROKERS + 1)
        cluster.set_coordinator("transaction", TRANSACTIONAL_ID, 1)
        servers = cluster.bootstrap_servers
        loop: _Loop | None = None
        nemesis: _Nemesis | None = None
        try:
            loop = _Loop(result, lambda: _MAKERS[client](servers), schedule.duration)
            loop.init()
            capture.clock = loop.clock = time.monotonic()
            nemesis = _Nemesis(_MockCluster(cluster), schedule, loop.clock, result.events)
            cluster.start_request_tracking()
            nemesis.start()
            loop.run()
        except (_Retry, _Abort, _Fatal) as exc:
            result.error = f"init_transactions(): {exc}"
        except Exception as exc:  # a harness or client bug: the table still gets its row
            log.exception("the %s run of seed %d failed", client, schedule.seed)
            result.error = f"the loop raised {exc!r}"
        finally:
            if loop is not None and nemesis is not None:
                result.loop_seconds = round(loop.now(), 3)
            if nemesis is not None:
                nemesis.stop()
                if nemesis.error is not None:
                    result.error = result.error or f"the nemesis failed: {nemesis.error!r}"
            if loop is not None:
                loop.client.close(_CLOSE_TIMEOUT)
                _take_requests(cluster, result, loop.clock)
        try:
            for partition in range(PARTITIONS):  # one Fetch reads all six (see marker_log)
                cluster.set_partition_leader(TOPIC, partition, 1)
            with _Deleter(cluster) as deleter:
                logs = read_logs(servers, TOPIC, range(PARTITIONS), timeout=_READ_TIMEOUT,
                                 release=deleter.delete)
            result.counts = judge(result.txns, logs)
        except EosError as exc:
            result.error = result.error or f"reading the log: {exc!r}"
        result.log_lines = list(capture.lines)
    result.seconds = round(time.monotonic() - started, 1)
    return result


class _Deleter(threading.Thread):
    """Deletes what the reader has read, beside it: a mock control call waits for the mock's
    thread, which an idle cluster may leave asleep for up to a second (its wake-up can be
    lost), while the reader's next Fetch, sent meanwhile, wakes it at once."""

    def __init__(self, cluster: MockCluster) -> None:
        super().__init__(name="cluster-nemesis-deleter", daemon=True)
        self._cluster = cluster
        self._todo: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()

    def delete(self, partition: int, offset: int) -> None:
        self._todo.put((partition, offset))

    def run(self) -> None:
        while (item := self._todo.get()) is not None:
            with contextlib.suppress(MockClusterError):  # a read that failed says why
                self._cluster.delete_records(TOPIC, *item)

    def __enter__(self) -> _Deleter:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._todo.put(None)
        self.join()  # before the cluster is closed: a call racing close() reaches freed memory


def _api_name(key: int) -> str:
    try:
        return ApiKey(key).label
    except ValueError:
        return f"API {key}"


def _take_requests(cluster: MockCluster, result: ClusterNemesisResult, clock: float) -> None:
    """Count the requests the brokers read during the loop, by API, and keep those read during
    ``result``'s windows (and just around them) as lines on the schedule's clock."""
    windows = [(low - _REQUESTS_AROUND, high + _REQUESTS_AROUND)
               for low, high in result.windows()]
    counts: Counter[int] = Counter()
    lines = []
    for request in cluster.requests():
        counts[request.api_key] += 1
        t = request.at - clock
        if any(low <= t <= high for low, high in windows):
            lines.append(f"t={t:.3f}s mock broker {request.broker_id} read "
                         f"{_api_name(request.api_key)}")
    cluster.stop_request_tracking()
    result.request_lines = lines[-_MAX_REQUEST_LINES:]
    result.requests_by_api = {_api_name(key): n for key, n in sorted(counts.items())}


# -- the table and the command line ----------------------------------------------------------------

_HEADINGS: Final = ("client", "seed", "faults", "committed", "aborted", "unknown", "txn/s",
                    "slowest commit s", "lost", "dup", "ab-read", "order", "partial", "unexp",
                    "wedged", "pruned", "ok")


def format_row(result: ClusterNemesisResult) -> str:
    """One Markdown table row for ``result``."""
    outcomes = result.outcomes()
    counts = result.counts
    slowest = result.slowest_commit()

    def count(kind: str) -> str:
        return str(getattr(counts, kind)) if counts is not None else "-"

    cells = [result.client, str(result.seed), str(len(result.schedule.faults)),
             str(outcomes["committed"]), str(outcomes["aborted"] + outcomes["failed"]),
             str(outcomes["unknown"]), f"{result.rate:.1f}",
             f"{slowest.commit_seconds:.2f}" if slowest is not None and
             slowest.commit_seconds is not None else "-",
             *(count(k) for k in ("lost", "duplicated", "aborted_read", "out_of_order",
                                  "partial", "unexpected")),
             str(len(result.wedges)), count("pruned"), "yes" if not result.problems() else "NO"]
    return "| " + " | ".join(cells) + " |"


def format_table(results: Sequence[ClusterNemesisResult]) -> str:
    """A Markdown table of ``results``, one row each."""
    head = "| " + " | ".join(_HEADINGS) + " |"
    rule = "|" + "|".join("---" for _ in _HEADINGS) + "|"
    return "\n".join([head, rule, *(format_row(r) for r in results)])


def medians(results: Sequence[ClusterNemesisResult]) -> dict[str, float]:
    """Client -> median committed transactions per second over its runs."""
    rates: dict[str, list[float]] = {}
    for r in results:
        rates.setdefault(r.client, []).append(r.rate)
    return {client: statistics.median(values) for client, values in rates.items()}


def _seeds(text: str) -> list[int]:
    """``"1-6"``, ``"7"`` or ``"1,4,9-12"`` as a list of seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        seeds += range(int(low), int(high or low) + 1)
    return seeds


def _clients(text: str) -> list[str]:
    names = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in names if c not in CLIENTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"clients are {', '.join(CLIENTS)}; not {unknown}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    """Run every seed for every client (the producer target) or on the broker asked for (the
    front targets), print a row each (and the producer's medians and ratio); exit 1 on any
    problem."""
    parser = argparse.ArgumentParser(
        prog="python -m eosclient.testing.cluster_nemesis",
        description="Seeded cluster faults (leaders and coordinators move, brokers bounce) "
        "against a transactional producer on librdkafka's 3-broker mock (--target producer, "
        "with retriable errors pushed, judged from the log's control markers), or against a "
        "read_committed consumer or ExactlyOnceProcessor workers through a three-node "
        "ClusterFront over a real broker (--target consumer|processor).")
    parser.add_argument("--target", choices=TARGETS, default="producer",
                        help="what the faults are played against (producer)")
    parser.add_argument("--broker", choices=("noida", "tansu"), default="noida",
                        help="the real broker behind the front (consumer and processor "
                        "targets; noida)")
    parser.add_argument("--asyncio", action="store_true",
                        help="eosclient.aio's consumer or processor (consumer and processor "
                        "targets)")
    parser.add_argument("--seeds", type=_seeds, default=[1], help="e.g. 1-6 or 3,7 (1)")
    parser.add_argument("--duration", type=float, default=30.0,
                        help="seconds of transactions and faults per run (30)")
    parser.add_argument("--clients", type=_clients, default=list(CLIENTS),
                        help="comma-separated, run in this order per seed "
                        "(eosclient,confluent-kafka)")
    parser.add_argument("--give-up", type=float, default=GIVE_UP,
                        help=f"seconds of retrying a commit or abort before it counts as "
                        f"wedged ({GIVE_UP:g})")
    parser.add_argument("--call-timeout", type=float, default=CALL_TIMEOUT,
                        help="each commit_transaction / abort_transaction call's timeout; "
                        f"one that times out is called again ({CALL_TIMEOUT:g})")
    parser.add_argument("--log-dir", type=Path,
                        help="write each run's summary and whole captured log here")
    args = parser.parse_args(argv)
    if args.target != "producer":
        return _main_front(args)
    results: list[ClusterNemesisResult] = []
    for seed in args.seeds:
        schedule = make_schedule(seed, duration=args.duration)
        print(schedule, flush=True)
        for client in args.clients:
            result = run_cluster_nemesis(client, schedule=schedule, give_up=args.give_up,
                                         call_timeout=args.call_timeout)
            results.append(result)
            print(format_table([result]).splitlines()[-1], flush=True)
            if result.problems():
                print(result.summary(), flush=True)
            if args.log_dir is not None:
                print(f"log: {_write_log(result, args.log_dir)}", flush=True)
    print()
    print(format_table(results))
    rates = medians(results)
    print()
    for client, rate in rates.items():
        print(f"median {client}: {rate:.1f} transactions/s")
    if "eosclient" in rates and rates.get("confluent-kafka"):
        print(f"eosclient / confluent-kafka: {rates['eosclient'] / rates['confluent-kafka']:.2f}x")
    return 1 if any(r.problems() for r in results) else 0


def _main_front(args: argparse.Namespace) -> int:
    """The consumer or processor target: every seed on one broker started here."""
    from eosclient.testing import _front_nemesis as front  # noqa: PLC0415
    from eosclient.testing.brokers import start_broker  # noqa: PLC0415

    results = []
    with start_broker(args.broker) as broker:
        for seed in args.seeds:
            schedule = make_schedule(seed, duration=args.duration, target=args.target)
            print(schedule, flush=True)
            result = front.run_front_nemesis(args.target, broker, schedule=schedule,
                                             asyncio=args.asyncio)
            results.append(result)
            print(front.format_table([result]).splitlines()[-1], flush=True)
            if result.problems():
                print(result.summary(), flush=True)
            if args.log_dir is not None:
                print(f"log: {_write_front_log(result, args.log_dir)}", flush=True)
    print()
    print(front.format_table(results))
    return 1 if any(r.problems() for r in results) else 0


def _write_front_log(result: _FrontResult, directory: Path) -> Path:
    """Write a front run's summary (with the evidence around its worst window) and its whole
    captured log as ``cluster-nemesis-<target>-<broker>[-asyncio]-seed<N>.log``."""
    directory.mkdir(parents=True, exist_ok=True)
    name = (f"cluster-nemesis-{result.target}-{result.broker}"
            f"{'-asyncio' if result.asyncio else ''}-seed{result.seed}.log")
    path = directory / name
    parts = [result.summary(max_log_lines=2_000), "", "log:", *result.feed.log_lines, ""]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path.resolve()


def _write_log(result: ClusterNemesisResult, directory: Path) -> Path:
    """Write ``result``'s summary, the evidence around its slowest commit, the transactions
    not committed at once, and its whole captured log, as
    ``cluster-nemesis-<client>-seed<N>.log`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"cluster-nemesis-{result.client}-seed{result.seed}.log"
    slow = [f"transaction {t.n} began t={t.began:.3f}s, {t.outcome}, {t.sent} sent, commit "
            f"{_seconds(t.commit_seconds)}, abort {_seconds(t.abort_seconds)} {t.note}".rstrip()
            for t in result.txns
            if t.outcome != "committed" or (t.commit_seconds or 0.0) > _SLOW_NOTE]
    parts = [result.summary(), ""]
    slowest = result.slowest_commit()
    if slowest is not None:
        parts += [f"the slowest commit: transaction {slowest.n}",
                  *result.evidence(result.windows()[-1], max_lines=2_000), ""]
    parts += [f"transactions not committed within {_SLOW_NOTE:g} s:", *slow, "",
              "log:", *result.log_lines, ""]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path.resolve()


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


if __name__ == "__main__":
    sys.exit(main())
