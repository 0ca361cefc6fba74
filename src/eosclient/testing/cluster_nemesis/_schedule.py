"""The cluster nemesis's schedule: the cluster it is drawn for, a seed's faults (leaders and
coordinators moving, brokers going down, errors pushed), and the :class:`Player` that plays them
on a :class:`Cluster`, the mock or a front (:mod:`eosclient.testing.cluster_nemesis` says why
the schedule draws as it does).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from eosclient.errors import ApiKey

__all__ = ["BROKERS", "DOWN_FOR", "ERRORS", "FAULT_KINDS", "FRONT_FAULT_KINDS", "GAP",
           "PARTITIONS", "TARGETS", "TOPIC", "TRANSACTIONAL_ID", "Cluster", "CoordinatorKey",
           "Fault", "FaultKind", "Player", "Schedule", "Target", "make_schedule"]

FaultKind = Literal["leader", "coordinator", "down", "error"]
FAULT_KINDS: Final[tuple[FaultKind, ...]] = ("leader", "coordinator", "down", "error")
#: The faults of the front targets (a ClusterFront has no error to push cluster-wide here).
FRONT_FAULT_KINDS: Final[tuple[FaultKind, ...]] = ("leader", "coordinator", "down")
CoordinatorKey = Literal["transaction", "group"]
Target = Literal["producer", "consumer", "processor"]
#: ``producer``: the transactional producer on the mock (``_mock_run``); ``consumer`` and
#: ``processor``: a read_committed consumer, or ExactlyOnceProcessor workers, through a
#: ClusterFront over a real broker (``_front_run``).
TARGETS: Final[tuple[Target, ...]] = ("producer", "consumer", "processor")

# The cluster the schedules are drawn for: its brokers, and the producer target's one topic and
# transactional id (the front targets make topics and ids of their own, as many partitions).
TOPIC: Final = "churn"
PARTITIONS: Final = 6
BROKERS: Final = 3
TRANSACTIONAL_ID: Final = "cluster-nemesis"
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
    """What a schedule is played on: librdkafka's mock (``_mock_run``) or a ClusterFront
    (``_front_run``)."""

    def leader(self, partition: int, broker: int) -> None: ...
    def coordinator(self, key: CoordinatorKey, broker: int) -> None: ...
    def down(self, broker: int) -> None: ...
    def up(self, broker: int) -> None: ...
    def error(self, api: int, code: int) -> None: ...


class Player(threading.Thread):
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
