"""The fault suite's scenarios: copy N records with ExactlyOnceProcessor while faults happen,
then let the checker count what went wrong (every count must be zero).

Theory of operation. :func:`run_scenario` builds a
:class:`~eosclient.testing._scenario_run.Run` (input topic filled with ``records`` committed
records, an empty output topic, one group, one transactional.id, a fault-injecting proxy in
front of the broker, ``random.Random(seed)``), hands it to the scenario's driver (which starts
processors, injects faults, and returns once the group has committed the whole input or the
deadline passed), then runs the checker against the broker directly and returns a
:class:`ScenarioResult`. :meth:`ScenarioResult.problems` says what is wrong with the run: an
anomaly, an input not copied in time, a fault that never happened, or a scenario's own
expectation not met (aborts where faults must abort, none where they must be transparent, a
zombie that was never fenced). A run with no problem is a pass.

Use::

    from eosclient.testing.scenarios import SCENARIOS, run_scenario

    for name in SCENARIOS:
        result = run_scenario(name, broker, seed=1, records=2_000)
        assert not result.problems(), result.problems()

From a shell, the long run (it starts its own brokers and prints the scenario x seed table)::

    python -m eosclient.testing.scenarios --records 100000 --seeds 3 [--broker tansu]

and the quick slice's table: ``--records 2000 --seeds 3 --max-records-per-transaction 50``.
A scenario with ``restarts_broker`` gets a broker of its own that keeps its data across the
restart (:func:`start_restartable_broker`: on Tansu, the s3 engine on a local S3 server, which
needs ``moto[server]``); one a broker cannot pass (``broken_on``) is skipped there with the
reason.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from eosclient.testing._scenario_faults import DRIVERS
from eosclient.testing._scenario_run import Run
from eosclient.testing.brokers import BROKER_KINDS, BrokerKind, RunningBroker, start_broker
from eosclient.testing.checker import KINDS, CheckReport

__all__ = ["KNOWN_BROKER_FAULTS", "SCENARIOS", "Scenario", "ScenarioResult", "format_row",
           "format_table", "main", "run_scenario", "start_restartable_broker"]

Aborts = Literal["some", "none", "any"]
_PRODUCER_CONFIG: Final = {"request.timeout.ms": 1000, "retry.backoff.ms": 20}

#: Instance failures that are the broker's fault, by broker kind: (what the failure says, why).
#: They label a failed run (``broker_faults``); they excuse nothing, since the client is meant
#: to stay clear of them (the producer registers a declared partition at begin only where an
#: empty one is safe, and ExactlyOnceProcessor does not pre-register output partitions).
KNOWN_BROKER_FAULTS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "noida": ((
        "EndTxn: INVALID_TXN_STATE (48)",
        "once a transaction with records on some partition is aborted (by the producer, or "
        "by an InitProducerId that found it open), a later transaction of that producer id "
        "that registers the partition (KIP-609) but writes nothing there gets "
        "INVALID_TXN_STATE from EndTxn(commit), after the partitions that got records were "
        "marked committed: half committed (duplicates), or the others left open for good; "
        "the producer no longer registers such a partition before its first record "
        "(test_noida_no_half_commit_after_a_reinit_aborted_the_last_transaction)."),),
}


@dataclass(frozen=True)
class Scenario:
    """One fault scenario.

    Attributes:
        name: Its key in :data:`SCENARIOS`.
        description: What it injects, in a line.
        driver: ``driver(run, deadline)``: starts processors, injects, waits, stops them.
        aborts: ``"some"``: the faults must abort transactions; ``"none"``: they must be
            handled without an abort; ``"any"``: either.
        fenced: A processor instance must end fenced (the zombie scenario).
        restarts_broker: It stops and starts the broker: give it a broker of its own, one that
            keeps its data across a restart (:func:`start_restartable_broker`).
        broken_on: Broker kind -> why the scenario cannot pass there (a broker fault it
            exposes); runners skip it on those brokers and say why.
    """

    name: str
    description: str
    driver: Callable[[Run, float], None]
    aborts: Aborts = "any"
    fenced: bool = False
    restarts_broker: bool = False
    broken_on: Mapping[str, str] = field(default_factory=dict)


def _scenario(name: str, description: str, *, aborts: Aborts = "any", fenced: bool = False,
              restarts_broker: bool = False, broken_on: Mapping[str, str] | None = None,
              ) -> Scenario:
    return Scenario(name, description, DRIVERS[name], aborts, fenced, restarts_broker,
                    dict(broken_on or {}))


NOIDA_ABORTS_ON_RESTART: Final = (
    "noida-db aborts every open transaction when it restarts, then answers the producer's "
    "EndTxn(commit) for it with NONE (same producer id and epoch): the processor is told its "
    "transaction committed, moves on, and the aborted records are lost once a later "
    "transaction commits offsets past them (test_noida_acknowledges_a_commit_it_aborted)")


SCENARIOS: Final[dict[str, Scenario]] = {s.name: s for s in (
    _scenario("sigkill", "SIGKILL `eosclient copy` while the proxy holds a Produce or the "
              "EndTxn of its open transaction, restart it (2-3 times)"),
    _scenario("broker-restart", "restart the broker (SIGTERM) once or twice between "
              "transactions (the next one's registration held in the proxy meanwhile)",
              restarts_broker=True),
    _scenario("broker-restart-mid-txn", "restart the broker (SIGTERM) once or twice with a "
              "Produce of an open transaction in flight", restarts_broker=True,
              broken_on={"noida": NOIDA_ABORTS_ON_RESTART}),
    _scenario("cut", "cut connections before the broker saw a request or after it answered"),
    _scenario("drop-produce", "drop Produce responses after the broker wrote the batch"),
    _scenario("drop-end-txn", "drop EndTxn responses after the broker ended the transaction"),
    _scenario("drop-txn-offset-commit",
              "drop TxnOffsetCommit responses after the broker stored the offsets"),
    _scenario("delay-end-txn",
              "hold EndTxn (request or response) past the client's request timeout"),
    _scenario("error-45", "OUT_OF_ORDER_SEQUENCE_NUMBER on Produce (abort, bump)",
              aborts="some"),
    _scenario("error-46", "DUPLICATE_SEQUENCE_NUMBER on Produce the broker wrote",
              aborts="none"),
    _scenario("error-47", "INVALID_PRODUCER_EPOCH on Produce (KIP-588: abort)", aborts="some"),
    _scenario("error-51", "CONCURRENT_TRANSACTIONS on InitProducerId, AddPartitionsToTxn, "
              "AddOffsetsToTxn, EndTxn", aborts="none"),
    _scenario("error-59", "UNKNOWN_PRODUCER_ID on Produce (abort, bump)", aborts="some"),
    _scenario("error-14", "COORDINATOR_LOAD_IN_PROGRESS on transaction and group coordinator "
              "APIs", aborts="none"),
    _scenario("error-16", "NOT_COORDINATOR on transaction and group coordinator APIs",
              aborts="none"),
    _scenario("zombie", "pause an instance, start another with the same transactional.id, "
              "resume the first", fenced=True),
    _scenario("rebalance", "two more instances (own transactional.ids) join the group "
              "mid-copy: partitions change hands twice"),
    _scenario("random-aborts", "seeded abortable errors on Produce, TxnOffsetCommit, EndTxn",
              aborts="some"),
)}


@dataclass
class ScenarioResult:
    """What one scenario run did and what the checker found.

    Attributes:
        scenario, broker, seed: Which run.
        records: Input records written.
        complete: The group committed the whole input before the deadline.
        output_records: Records the checker read from the output topic.
        transactions_committed, transactions_aborted: Summed over every processor instance
            (a SIGKILLed ``eosclient copy`` counts up to its last progress line).
        instances: Processor instances run (restarts and zombies included).
        failures: ``repr`` of each instance that ended with an error.
        broker_faults: Failures :data:`KNOWN_BROKER_FAULTS` names (a label, not an excuse).
        faults: Faults that actually happened; ``fault_kinds`` by kind.
        lost, duplicated, aborted_read, unexpected, out_of_order: The checker's totals.
        seconds: Wall time of the run, fill and check included.
        report: The checker's full report (None if it could not read the topics).
    """

    scenario: str
    broker: str
    seed: int
    records: int
    complete: bool = False
    output_records: int = 0
    transactions_committed: int = 0
    transactions_aborted: int = 0
    instances: int = 0
    failures: list[str] = field(default_factory=list)
    faults: int = 0
    fault_kinds: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    duplicated: int = 0
    aborted_read: int = 0
    unexpected: int = 0
    out_of_order: int = 0
    seconds: float = 0.0
    report: CheckReport | None = None

    @property
    def broker_faults(self) -> int:
        """Instance failures that are a known fault of this broker."""
        return sum(1 for f in self.failures if _known_broker_fault(self.broker, f))

    @property
    def anomalies(self) -> int:
        """The sum of the checker's counts."""
        return sum(getattr(self, kind) for kind in KINDS)

    def problems(self) -> list[str]:
        """Everything wrong with the run (empty: it passed)."""
        spec = SCENARIOS[self.scenario]
        found = [f"{kind}: {getattr(self, kind)}" for kind in KINDS if getattr(self, kind)]
        if self.report is None:
            found.append("the checker could not read the topics")
        if not self.complete:
            found.append("the input was not committed before the deadline")
        if self.faults == 0:
            found.append("no fault happened")
        if spec.aborts == "some" and self.transactions_aborted == 0:
            found.append("the faults aborted no transaction")
        if spec.aborts == "none" and self.transactions_aborted:
            found.append(f"{self.transactions_aborted} transactions aborted")
        fenced = [f for f in self.failures if "Fenced" in f]
        if spec.fenced and not fenced:
            found.append("no instance was fenced")
        unexplained = [f for f in self.failures if not (spec.fenced and f in fenced)]
        found += [f"instance failed: {f}" for f in unexplained]
        return found


def _known_broker_fault(broker: str, failure: str) -> bool:
    return any(text in failure for text, _ in KNOWN_BROKER_FAULTS.get(broker, ()))


def run_scenario(name: str, broker: RunningBroker, *, seed: int, records: int,
                 partitions: int = 3, max_records_per_transaction: int = 100,
                 timeout: float = 120.0) -> ScenarioResult:
    """Run scenario ``name`` once against ``broker`` and check the copy.

    Args:
        name: A key of :data:`SCENARIOS`.
        broker: The broker; a scenario with ``restarts_broker`` restarts it (don't share it).
        seed: Decides where the faults land.
        records: Input records to copy.
        partitions: Partitions of the input and output topics.
        max_records_per_transaction: Each processor's transaction size.
        timeout: Seconds the copy may take (the fill and the check come on top).

    Raises:
        KeyError: an unknown scenario.
        ValueError: a scenario that restarts the broker, given one that starts empty after a
            restart (Tansu's memory engine): use :func:`start_restartable_broker`.
        EosError: the topics could not be created or filled.
    """
    spec = SCENARIOS[name]
    if spec.restarts_broker and not broker.keeps_data:
        raise ValueError(f"{name} restarts the broker, and {broker!r} starts empty after a "
                         "restart: give it start_restartable_broker(kind)")
    started = time.monotonic()
    result = ScenarioResult(name, broker.kind, seed, records)
    run = Run(broker, name=name, seed=seed, records=records, partitions=partitions,
              max_records_per_transaction=max_records_per_transaction,
              producer_config=_PRODUCER_CONFIG)
    try:
        spec.driver(run, time.monotonic() + timeout)
        result.complete = run.progress() >= 1.0
    finally:
        run.close()
    result.transactions_committed = run.tally.committed
    result.transactions_aborted = run.tally.aborted
    result.instances = run.tally.instances
    result.failures = list(run.tally.failures)
    result.faults, result.fault_kinds = run.faults, dict(run.fault_kinds)
    report = run.check(timeout=max(60.0, records / 1000))
    result.report, result.output_records = report, report.output_records
    for kind in KINDS:
        setattr(result, kind, getattr(report.totals, kind))
    result.seconds = time.monotonic() - started
    return result


_COLUMNS: Final = ("scenario", "broker", "seed", "records", "output_records",
                   "transactions_committed", "transactions_aborted", "instances", "faults",
                   "broker_faults", *KINDS, "seconds")
_HEADINGS: Final = ("scenario", "broker", "seed", "in", "out", "commits", "aborts", "inst",
                    "faults", "brk-faults", "lost", "dup", "ab-read", "unexp", "ooo", "s", "ok")


def format_row(result: ScenarioResult) -> str:
    """One Markdown table row for ``result``."""
    cells = [f"{v:.0f}" if isinstance(v := getattr(result, c), float) else str(v)
             for c in _COLUMNS]
    return "| " + " | ".join([*cells, "yes" if not result.problems() else "NO"]) + " |"


def format_table(results: Sequence[ScenarioResult]) -> str:
    """A Markdown table of ``results``, one row each."""
    head = "| " + " | ".join(_HEADINGS) + " |"
    rule = "|" + "|".join("---" for _ in _HEADINGS) + "|"
    return "\n".join([head, rule, *(format_row(r) for r in results)])


def main(argv: Sequence[str] | None = None) -> int:
    """Run scenarios x seeds on brokers it starts, print the table; exit 1 on any problem."""
    parser = argparse.ArgumentParser(prog="python -m eosclient.testing.scenarios",
                                     description="The exactly-once fault suite, long run.")
    parser.add_argument("--records", type=int, default=100_000, help="per scenario (100000)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..N per scenario (3)")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="one scenario (repeatable; default: all)")
    parser.add_argument("--max-records-per-transaction", type=int, default=500,
                        help="each processor's transaction size (500)")
    parser.add_argument("--broker", choices=BROKER_KINDS, default="noida")
    parser.add_argument("--timeout", type=float, help="seconds per copy (default: scaled)")
    args = parser.parse_args(argv)
    timeout = args.timeout or max(120.0, args.records / 100)
    results: list[ScenarioResult] = []
    print("| " + " | ".join(_HEADINGS) + " |", flush=True)
    with start_broker(args.broker) as shared:
        for name in args.scenario or list(SCENARIOS):
            broken = SCENARIOS[name].broken_on.get(args.broker)
            if broken:
                print(f"    {name}: skipped on {args.broker}: {broken}", flush=True)
                continue
            for seed in range(1, args.seeds + 1):
                result = _run_one(name, shared, seed, args.records, timeout=timeout,
                                  per_transaction=args.max_records_per_transaction)
                results.append(result)
                print(format_row(result), flush=True)
                for problem in result.problems():
                    print(f"    {name} seed {seed}: {problem}", flush=True)
    print()
    print(format_table(results))
    return 1 if any(r.problems() for r in results) else 0


def start_restartable_broker(kind: BrokerKind, directory: Path | None = None,
                            ) -> RunningBroker:
    """A broker of ``kind`` for a scenario with ``restarts_broker``: one whose restart keeps
    its data (noida-db's data directory; Tansu's s3 engine on a local S3 server, since its
    memory engine starts empty). ``directory`` keeps the data and logs (default: temporary)."""
    if kind == "noida":
        return start_broker(kind, data_dir=directory and directory / "data", log_dir=directory)
    return start_broker(kind, storage="s3", log_dir=directory)


def _run_one(name: str, shared: RunningBroker, seed: int, records: int, *, timeout: float,
             per_transaction: int) -> ScenarioResult:
    if not SCENARIOS[name].restarts_broker:
        return run_scenario(name, shared, seed=seed, records=records, timeout=timeout,
                            max_records_per_transaction=per_transaction)
    with start_restartable_broker(shared.kind) as own:
        return run_scenario(name, own, seed=seed, records=records, timeout=timeout,
                            max_records_per_transaction=per_transaction)


if __name__ == "__main__":
    sys.exit(main())
