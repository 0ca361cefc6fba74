"""The producer benchmark: eosclient beside confluent-kafka and kafka-python, in one run.

Run: ``.venv/bin/python benchmarks/producer.py [--quick] [--repeat 3] [--tls] [--json out.json]``.

Method
------
One noida-db broker is started for the run (``start_broker("noida")``), and a Tansu broker too
when the rtt scenario runs on it; all are stopped at the end. Every client is a transactional
producer with the same ``linger.ms`` (5 ms by default), acks=all and no compression; values are
100 random bytes with no key. Four scenarios:

1. **bulk**: transactions of ``--records`` (10,000) records; records/s over ``--bulk-transactions``
   transactions, each timed from ``begin_transaction`` to the return of ``commit_transaction``
   (i.e. commit acknowledged). Records go where each client's partitioner puts them.
2. **small**: transactions of 1 record, round-robin over the 4 partitions; transactions/s.
3. **latency**: the same, through `KafkaProxy` adding ``--proxy-latency-ms`` (1 ms) each way;
   the per-transaction latency (median, p99) in ms and in round trips (RTT = twice that).
   eosclient runs with pre-registration (``begin_transaction(partitions=[...])``) and without.
4. **rtt** (issue 14): the same at a 5 ms RTT (``--rtt-ms``) with ``linger.ms=0``, on noida-db
   and on Tansu (``--rtt-broker``), each behind a precise latency proxy of its own; besides the
   latency, the proxy's timings say per transaction which requests went out, how many round trips
   the client waited for one after the other, and how the time split between the added latency,
   the proxy, the broker and the client (``_rtt.py``).

**spread** (only when named, with ``--partitions``; the scale figures): the bulk scenario's
transactions with each record sent to the next partition in turn, eosclient ``send()`` beside
confluent-kafka ``produce()``: what holding many partitions costs a producer.

With ``--tls`` the bulk and small scenarios run through one TLS front (`KafkaProxy` with a
throwaway CA's certificate, in a process of its own) before the broker, and every client gets
the same settings: ``security.protocol=SSL``, ``ssl.ca.location`` = the CA, host name checked
(the same dict for eosclient and confluent-kafka; kafka-python's keywords for the same). The
front decrypts in Python and shares the two cores: it bounds every client alike, so read the
ratios, not the absolute numbers (the latency scenario is not run over TLS).

Each (scenario, variant, repeat) gets a fresh topic (4 partitions; ``--partitions``) and a fresh
producer, warmed up untimed (``init_transactions`` and one transaction of the same shape). Repeats
are interleaved (every variant once, then again), so drift in the broker hits all clients alike;
throughput is the median over repeats, latency pools all timed transactions. After each run the
topic's log is read batch header by batch header (kafka-python's decoder, straight from the
broker): exactly the expected records, all in transactional batches, committed, no aborts, and high
watermarks that add up. A client that drops records, or skips transactions, fails its row instead
of looking fast.

Caveats
-------
- Two cores are shared by the broker, the client under test and its I/O threads (and, in the
  latency scenario, the proxy, run in its own process so that it does not hold the client's GIL).
  Numbers vary by 10-20 % from run to run, more on a busy machine; compare ratios from one run,
  never absolute numbers across machines or runs.
- noida-db is not Apache Kafka: its costs per request differ, so ratios here say how the clients
  compare on this broker, not what any of them reaches against a Kafka cluster.
- The proxy adds latency in Python; its own processing adds a little to every round trip (the
  measured ApiVersions round trip through it is printed beside the nominal RTT).
- Only ``linger.ms`` is aligned. Batch sizes are each client's default (confluent-kafka batches
  up to 1 MB, kafka-python 16 KB), as a user would get them.
- Benchmarks are not tests: a missed target is reported, not failed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import os
import platform
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import _harness
import _producer_clients as clients
import _report as report
import _rtt

from eosclient.testing.brokers import RunningBroker, start_broker
from eosclient.testing.topics import create_topic

PARTITIONS = 4  # the topic's; --partitions sets it once, before anything runs
VALUE_SIZE: Final = 100
RUN_TIMEOUT: Final = 120.0  # seconds for one run (warm-up, timed transactions, close)
ROUND_ROBIN: Final = "round-robin over the partitions"
CLIENT_PARTITIONER: Final = "each client's partitioner"
SPREAD: Final = "record by record over every partition"

DEFAULTS: Final = {"bulk_transactions": 20, "small_transactions": 1000,
                   "latency_transactions": 300, "rtt_transactions": 200, "repeat": 3}
QUICK: Final = {"bulk_transactions": 3, "small_transactions": 200,
                "latency_transactions": 100, "rtt_transactions": 50, "repeat": 1}
RTT_BROKERS: Final = ("noida", "tansu")
BROKER_NAMES: Final = {"noida": "noida-db", "tansu": "Tansu"}
RTT_LINGER_MS: Final = 0  # the rtt scenario's linger.ms: a one-record transaction waits for nothing


@dataclass(frozen=True, slots=True)
class Scenario:
    """One shape of work, run by each of its variants."""

    key: str
    variants: tuple[clients.Variant, ...]
    records: int  # per transaction
    transactions: int  # timed, per run
    kind: str  # report.THROUGHPUT or report.LATENCY
    unit: str
    placement: str  # ROUND_ROBIN or CLIENT_PARTITIONER
    via_proxy: bool
    rtt_broker: str | None = None  # rtt scenarios: through this broker's RTT proxy, timed

    def partition(self, n: int) -> int | None:
        """Where the `n`-th transaction of a run sends its records."""
        return n % PARTITIONS if self.placement == ROUND_ROBIN else None


@dataclass(frozen=True, slots=True)
class Bench:
    """What every run needs: where the broker and the proxy are, the values, the settings."""

    broker: RunningBroker
    servers: str  # the broker, or with --tls the TLS front before it
    proxy_servers: str | None
    linger_ms: int
    values: list[bytes]
    run_id: str
    tls: _harness.Tls | None = None
    rtt_fronts: dict[str, RttFront] = field(default_factory=dict)
    breakdowns: dict[tuple[str, str], _rtt.Breakdown] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RttFront:
    """A broker of the rtt scenario and the latency proxy (RTT/2 each way) before it."""

    broker: RunningBroker
    proxy: _harness.ProxyProcess
    rtt: float  # nominal seconds
    # One ApiVersions round trip through the proxy (seconds), measured before every run: the
    # proxy's lateness follows the machine's load, which changes during a run.
    samples: list[float] = field(default_factory=list)

    @property
    def measured(self) -> float:
        """The median measured round trip."""
        return statistics.median(self.samples)

    def sample(self) -> None:
        """Measure a round trip through the proxy now, and forget that exchange's timings."""
        self.samples.append(_harness.measured_round_trip(self.proxy.host, self.proxy.port, 20))
        self.proxy.take_timings()


def rtt_key(kind: str) -> str:
    """The rtt scenario's key on broker ``kind``."""
    return f"rtt-{kind}"


def ratio_specs(asyncio: bool = False) -> list[report.RatioSpec]:
    """The issue's targets (issue 3, "Benchmark", raised by issue 14; issue 13 with --asyncio),
    and a few comparisons without one."""
    spec = report.RatioSpec
    if asyncio:
        return [
            spec("bulk", "eos-aio-send", "aiokafka-send", 2.0),
            spec("bulk", "eos-aio-send", "eos-send", 0.9, note="(async / sync eosclient)"),
            spec("bulk", "eos-aio-send", "ck-aio-produce"),
            spec("bulk", "eos-aio-batch", "aiokafka-send"),
            spec("bulk", "eos-aio-batch", "eos-batch", 0.9,
                 note="(async / sync eosclient, send_batch)"),
            spec("small", "eos-aio", "aiokafka", 2.0),
            spec("small", "eos-aio", "eos-plain", 0.9, note="(async / sync eosclient)"),
            spec("small", "eos-aio", "ck-aio"),
        ]
    return [
        spec("spread", "eos-send", "ck-produce", 0.8, note="(issue 29, at 1,000 partitions)"),
        spec("bulk", "eos-send", "ck-produce", 0.8, note="(issue 14)"),
        spec("bulk", "eos-send", "kp-send", 10.0),
        spec("bulk", "eos-batch", "ck-produce", 1.5, note="(issue 14)"),
        spec("bulk", "eos-batch", "ck-batch"),
        spec("bulk", "eos-batch", "kp-send"),
        spec("small", "eos-plain", "ck", 2.0, note="(2x the better peer)"),
        spec("small", "eos-plain", "kp", 2.0, note="(2x the better peer)"),
        spec("small", "eos-prereg", "ck", 2.0, note="(2x the better peer)"),
        spec("small", "eos-prereg", "kp", 2.0, note="(2x the better peer)"),
        spec("latency", "eos-prereg", report.RTT, 2.3, "<=", "(median)"),
        spec("latency", "eos-prereg", report.MEASURED_RTT),
        spec("latency", "eos-plain", report.RTT),
        spec("latency", "eos-prereg", "ck", direction="<=", note="(lower is better)"),
        spec("latency", "eos-prereg", "kp", direction="<=", note="(lower is better)"),
        *(s for kind in RTT_BROKERS for s in rtt_ratio_specs(kind)),
    ]


def rtt_ratio_specs(kind: str) -> list[report.RatioSpec]:
    """Issue 14's targets at a 5 ms RTT: <= 3.2 RTT, and 1.35x faster than confluent-kafka."""
    spec, key = report.RatioSpec, rtt_key(kind)
    rtt, measured = report.rtt_of(key), report.measured_rtt_of(key)
    return [
        spec(key, "eos-prereg", measured, 3.2, "<=", "(median; see README)"),
        spec(key, "eos-plain", measured, 3.2, "<=", "(median; see README)"),
        spec(key, "ck", measured),
        spec(key, "kp", measured),
        spec(key, "eos-prereg", rtt, note="(nominal: the proxy's lateness included)"),
        spec(key, "eos-plain", rtt),
        spec(key, "ck", rtt),
        spec(key, "kp", rtt),
        spec(key, "ck", "eos-prereg", 1.35, note="(eosclient faster)"),
        spec(key, "ck", "eos-plain", 1.35, note="(eosclient faster)"),
        spec(key, "kp", "eos-prereg", note="(eosclient faster)"),
    ]


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    """The scenarios selected on the command line, sized by it."""
    bulk, small = ((clients.ASYNC_BULK_VARIANTS, clients.ASYNC_SMALL_VARIANTS) if args.asyncio
                   else (clients.BULK_VARIANTS, clients.SMALL_VARIANTS))
    every = [
        Scenario("bulk", bulk, args.records, args.bulk_transactions,
                 report.THROUGHPUT, "records/s", CLIENT_PARTITIONER, via_proxy=False),
        Scenario("small", small, 1, args.small_transactions,
                 report.THROUGHPUT, "transactions/s", ROUND_ROBIN, via_proxy=False),
        Scenario("latency", small, 1, args.latency_transactions,
                 report.LATENCY, "per transaction", ROUND_ROBIN, via_proxy=True),
    ]
    every.append(Scenario("spread", clients.SPREAD_VARIANTS, args.records, args.bulk_transactions,
                          report.THROUGHPUT, "records/s", SPREAD, via_proxy=False))
    chosen = [s for s in every if s.key in args.scenario]
    if "rtt" in args.scenario:
        chosen += [Scenario(rtt_key(kind), clients.SMALL_VARIANTS, 1, args.rtt_transactions,
                            report.LATENCY, "per transaction", ROUND_ROBIN, via_proxy=True,
                            rtt_broker=kind) for kind in args.rtt_broker]
    return chosen


# --- one run ------------------------------------------------------------------------------------


def run_once(
    bench: Bench, scenario: Scenario, variant: clients.Variant, repeat: int
) -> list[float]:
    """Warm up, time `scenario.transactions` transactions, close, check; return the durations.

    Raises:
        BenchmarkError: the log does not hold what the run should have written, or the run hung.
        Exception: whatever the client raised.
    """
    topic = f"bench-{bench.run_id}-{scenario.key}-{variant.key}-{repeat}"
    front = bench.rtt_fronts[scenario.rtt_broker] if scenario.rtt_broker else None
    if front:
        front.sample()
    broker = front.broker if front else bench.broker
    create_topic(broker, topic, PARTITIONS)
    servers = bench.proxy_servers if scenario.via_proxy else bench.servers
    if front:
        servers = front.proxy.bootstrap_servers
    assert servers is not None
    tls = bench.tls
    settings = clients.Settings(bootstrap_servers=servers,
                                linger_ms=RTT_LINGER_MS if front else bench.linger_ms,
                                security=tls.settings if tls else {},
                                kafka_python_security=tls.kafka_python if tls else {},
                                spread_over=PARTITIONS if scenario.placement == SPREAD else 0)
    with _harness.watchdog(RUN_TIMEOUT):
        durations, window = _timed_session(variant.open(settings, f"{topic}-txn"), topic,
                                           scenario, bench)
    if front:
        breakdown = bench.breakdowns.setdefault((scenario.key, variant.key), _rtt.Breakdown())
        breakdown.add(front.proxy.take_timings(), *window, len(durations), front.rtt)
    _harness.check_landed(
        broker.host, broker.port, topic, PARTITIONS,
        expected=(scenario.transactions + 1) * scenario.records,
        transactions=scenario.transactions + 1,
    )
    return durations


def _timed_session(
    session: clients.Session, topic: str, scenario: Scenario, bench: Bench
) -> tuple[list[float], tuple[float, float]]:
    """The timed transactions' durations, and the window they ran in (``time.monotonic()``,
    the proxy's clock)."""
    values = bench.values[: scenario.records]
    clock = time.perf_counter
    durations = []
    try:
        session.transaction(topic, values, scenario.partition(0))  # warm-up, untimed
        first = time.monotonic()
        for n in range(1, scenario.transactions + 1):
            partition = scenario.partition(n)
            start = clock()
            session.transaction(topic, values, partition)
            durations.append(clock() - start)
        last = time.monotonic()
    except BaseException:
        with contextlib.suppress(Exception):
            session.close()
        raise
    session.close()
    return durations, (first, last)


def record(outcome: report.Outcome, scenario: Scenario, durations: Sequence[float]) -> None:
    """Add one run's durations to `outcome`."""
    if scenario.kind == report.LATENCY:
        outcome.latencies.extend(durations)
    else:
        outcome.runs.append(len(durations) * scenario.records / sum(durations))


def run_scenario(bench: Bench, scenario: Scenario, repeats: int) -> list[report.Outcome]:
    """Run every variant of `scenario` `repeats` times, interleaved; a failed variant stops."""
    outcomes = [
        report.Outcome(scenario.key, scenario.kind, scenario.unit, v.key, v.family, v.label)
        for v in scenario.variants
    ]
    for outcome, variant in zip(outcomes, scenario.variants, strict=True):
        if variant.missing:
            outcome.errors.append(f"{variant.family}: {variant.missing}")
    for repeat in range(repeats):
        for outcome, variant in zip(outcomes, scenario.variants, strict=True):
            if outcome.errors:
                continue
            _harness.progress(f"{scenario.key}: {variant.label} (repeat {repeat + 1}/{repeats})")
            try:
                record(outcome, scenario, run_once(bench, scenario, variant, repeat))
            except Exception as exc:
                outcome.errors.append(f"failed: {type(exc).__name__}: {exc}"[:160])
            gc.collect()
    return outcomes


# --- the whole run ------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the brokers (and the proxies), run the scenarios, stop everything; return the
    results."""
    values = [os.urandom(VALUE_SIZE) for _ in range(args.records)]
    with contextlib.ExitStack() as stack:
        _harness.progress("starting noida-db")
        broker = stack.enter_context(start_broker("noida"))
        proxy = _harness.ProxyProcess(broker.host, broker.port, args.proxy_latency_ms / 1e3)
        stack.callback(proxy.stop)
        servers, tls = broker.bootstrap_servers, None
        if args.tls:
            servers, tls = _harness.tls_front(stack, broker.host, broker.port)
        bench = Bench(broker, servers, proxy.bootstrap_servers, args.linger_ms, values,
                      uuid.uuid4().hex[:8], tls)
        round_trips = {
            "direct_ms": _harness.measured_round_trip(broker.host, broker.port) * 1e3,
            "proxy_ms": _harness.measured_round_trip(proxy.host, proxy.port) * 1e3,
        }
        if "rtt" in args.scenario:
            for kind in args.rtt_broker:
                bench.rtt_fronts[kind] = _rtt_front(stack, kind, broker, args.rtt_ms / 1e3)
        outcomes = []
        for scenario in scenarios(args):
            outcomes.extend(run_scenario(bench, scenario, args.repeat))
        for kind, front in bench.rtt_fronts.items():
            round_trips[f"{rtt_key(kind)}_ms"] = front.measured * 1e3
    return {"outcomes": outcomes, "round_trips": round_trips, "breakdowns": bench.breakdowns,
            "rtt_fronts": {rtt_key(k): (f.rtt, f.measured) for k, f in bench.rtt_fronts.items()}}


def _rtt_front(stack: contextlib.ExitStack, kind: str, noida: RunningBroker,
               rtt: float) -> RttFront:
    """The rtt scenario's broker ``kind`` (noida-db: the one already running) and its proxy."""
    broker = noida
    if kind != "noida":
        _harness.progress(f"starting {BROKER_NAMES[kind]}")
        broker = stack.enter_context(start_broker(kind))  # type: ignore[arg-type]
    proxy = _harness.ProxyProcess(broker.host, broker.port, rtt / 2, precise=True)
    stack.callback(proxy.stop)
    front = RttFront(broker, proxy, rtt)
    front.sample()
    return front


def environment() -> dict[str, str]:
    """Client versions and where they ran."""
    return {
        **clients.versions(),
        "noida-db": importlib.metadata.version("noida-db"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load average at start": f"{os.getloadavg()[0]:.2f}",
    }


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """The sizes and settings of this run."""
    names = ("records", "bulk_transactions", "small_transactions", "latency_transactions",
             "rtt_transactions", "repeat", "linger_ms", "proxy_latency_ms", "rtt_ms",
             "rtt_broker", "scenario", "tls", "asyncio")
    return {name: getattr(args, name) for name in names} | {
        "partitions": PARTITIONS, "value_bytes": VALUE_SIZE, "broker": "noida-db"}


def render(env: dict[str, str], settings: dict[str, Any], results: dict[str, Any],
           ratios: list[report.Ratio], rtts: dict[str, float]) -> str:
    """The printed report: versions, settings, results, where the round trips went, ratios."""
    outcomes: list[report.Outcome] = results["outcomes"]
    trips = results["round_trips"]
    rtt = rtts[report.RTT]
    lines = ["", "versions: " + "; ".join(f"{k} {v}" for k, v in env.items()),
             "settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()),
             f"round trip: nominal {rtt * 1e3:.2f} ms through the proxy; ApiVersions measured"
             f" {trips['proxy_ms']:.2f} ms through it, {trips['direct_ms']:.2f} ms direct"]
    for key, (nominal, measured) in results["rtt_fronts"].items():
        lines.append(f"{key}: nominal {nominal * 1e3:.2f} ms through its proxy, linger.ms="
                     f"{RTT_LINGER_MS}; ApiVersions measured {measured * 1e3:.2f} ms through it "
                     "(median of one measurement before each run)")
    rows = [[o.scenario, o.label, report.format_outcome(o, rtts.get(report.rtt_of(o.scenario),
                                                                      rtt))] for o in outcomes]
    lines += ["", report.table(rows, ["scenario", "client", "result"]), ""]
    breakdowns: dict[tuple[str, str], _rtt.Breakdown] = results["breakdowns"]
    if breakdowns:
        labels = {(o.scenario, o.key): o.label for o in outcomes}
        rows = [[scenario, labels[(scenario, key)], b.summary()]
                for (scenario, key), b in breakdowns.items()]
        lines += ["where the round trips went, per transaction (from the proxy's timings):",
                  report.table(rows, ["scenario", "client", "requests and time"]), ""]
    rows = [report.format_ratio(r) for r in ratios]
    lines += [report.table(rows, ["scenario", "ratio", "value", "target", "verdict"]), ""]
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line; sizes left out come from `--quick` or the defaults."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=10_000, help="records per bulk transaction")
    parser.add_argument("--bulk-transactions", type=int, help="timed bulk transactions per run")
    parser.add_argument("--small-transactions", type=int, help="timed 1-record transactions")
    parser.add_argument("--latency-transactions", type=int, help="timed transactions via proxy")
    parser.add_argument("--repeat", type=int, help="runs per variant, interleaved")
    parser.add_argument("--linger-ms", type=int, default=5, help="linger.ms for every client")
    parser.add_argument("--proxy-latency-ms", type=float, default=1.0, help="added each way")
    parser.add_argument("--rtt-transactions", type=int,
                        help="timed transactions per run of the rtt scenario")
    parser.add_argument("--rtt-ms", type=float, default=5.0,
                        help="the rtt scenario's round trip (half of it added each way)")
    parser.add_argument("--rtt-broker", action="append", choices=list(RTT_BROKERS),
                        help="run the rtt scenario on this broker (repeatable; default both)")
    parser.add_argument("--scenario", action="append",
                        choices=["bulk", "small", "latency", "rtt", "spread"],
                        help="run only this scenario (repeatable; spread only when named)")
    parser.add_argument("--partitions", type=int, default=4,
                        help="partitions of every topic (the scale figures: 4, 100, 1000; "
                        "with --scenario spread)")
    parser.add_argument("--tls", action="store_true",
                        help="bulk and small through a TLS front, every client with the same "
                        "TLS settings (needs the test extra)")
    parser.add_argument("--asyncio", action="store_true",
                        help="the asyncio producers (eosclient.aio, aiokafka, confluent-kafka's "
                        "AIOProducer) beside the sync eosclient")
    parser.add_argument("--quick", action="store_true", help="a small run (~30 s)")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    args = parser.parse_args(argv)
    _harness.fill_defaults(args, QUICK if args.quick else DEFAULTS)
    global PARTITIONS  # noqa: PLW0603 - one setting read by every run, set before they start
    PARTITIONS = args.partitions
    args.scenario = args.scenario or (["bulk", "small"] if args.tls
                                      else ["bulk", "small", "latency", "rtt"])
    args.rtt_broker = args.rtt_broker or list(RTT_BROKERS)
    if args.tls and {"latency", "rtt"} & set(args.scenario):
        parser.error("--tls runs the bulk and small scenarios (latency and rtt are measured in "
                     "plaintext)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON if asked."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # SIGTERM unwinds like Ctrl-C, so the broker and the proxy are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    env, settings = environment(), settings_of(args)
    started = time.monotonic()
    results = run(args)
    rtt = 2 * args.proxy_latency_ms / 1e3
    rtts = {report.RTT: rtt, report.MEASURED_RTT: results["round_trips"]["proxy_ms"] / 1e3}
    for key, (nominal, measured) in results["rtt_fronts"].items():
        rtts |= {report.rtt_of(key): nominal, report.measured_rtt_of(key): measured}
    ratios = report.compute_ratios(results["outcomes"], ratio_specs(args.asyncio), rtts)
    print(render(env, settings, results, ratios, rtts))
    print(f"(whole run: {time.monotonic() - started:.0f} s)")
    if args.json:
        report.write_json(args.json, {
            "environment": env, "settings": settings, "nominal_rtt_ms": rtt * 1e3,
            "round_trips": results["round_trips"],
            "results": [report.outcome_json(o, rtts.get(report.rtt_of(o.scenario), rtt))
                        for o in results["outcomes"]],
            "where_round_trips_went": [
                {"scenario": scenario, "variant": key, **b.per_transaction()}
                for (scenario, key), b in results["breakdowns"].items()],
            "ratios": [report.ratio_json(r) for r in ratios],
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())
