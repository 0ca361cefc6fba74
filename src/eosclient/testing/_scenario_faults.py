"""The fault drivers of :mod:`eosclient.testing.scenarios`: what each scenario does to a run.

Each driver takes a :class:`~eosclient.testing._scenario_run.Run` and a deadline, starts the
run's processors, injects its faults (which request, and when, drawn from ``run.rng``), counts
each fault that actually happened with ``run.fault(kind)``, waits until the group has committed
the whole input (or the deadline passes), and stops the processors. Drivers assert nothing: the
checker and :class:`~eosclient.testing.scenarios.ScenarioResult` judge the run afterwards.

Where a fault lands is given as "the n-th request of this API", with n drawn from a range scaled
by the expected number of transactions, so the same seed hits the same place in the request
stream on every run (as far as batching, which depends on timing, allows).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Final

from eosclient.consumer import ConsumerRecord
from eosclient.errors import ApiKey
from eosclient.processor import OutputRecord
from eosclient.testing._scenario_run import Child, Run, Worker
from eosclient.testing.proxy import (
    Action,
    Cut,
    Delay,
    DropResponse,
    ErrorResponse,
    RewriteError,
    Rule,
)

__all__ = ["DRIVERS", "ERROR_FAULTS", "Driver"]

Driver = Callable[[Run, float], None]

_KILL_HOLD: Final = 0.5  # a Produce or EndTxn held this long: the child is killed meanwhile
_CHILD_STARTS: Final = 5  # copies started after the kills, each after the last one failed
_RESTART_HOLD: Final = 1.0  # the next transaction's registration, held while the broker restarts
_ZOMBIE_HOLD: Final = 3.0  # the paused instance's Produce is held this long
# Seconds of transform time for the whole input (rebalance), by broker. Tansu's pace dates from
# joins of ~23 s; it holds a join for about half the session timeout, 3 s at the runs' 6 s.
_REBALANCE_PACE: Final = {"noida": 4.0, "tansu": 90.0}
_COORDINATOR_APIS: Final = (ApiKey.INIT_PRODUCER_ID,
                            ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
                            ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT, ApiKey.HEARTBEAT,
                            ApiKey.OFFSET_FETCH)

# Per injected error code: the (API, action) pairs a real broker could plausibly answer with it.
# ErrorResponse: the broker never saw the request; RewriteError: it acted, the answer says not.
ERROR_FAULTS: Final[dict[int, tuple[tuple[ApiKey, Action], ...]]] = {
    # OUT_OF_ORDER_SEQUENCE_NUMBER: a gap in the partition's sequence (KIP-360: abort, bump).
    45: ((ApiKey.PRODUCE, ErrorResponse(45)),),
    # DUPLICATE_SEQUENCE_NUMBER: the batch was already written (success without an offset).
    46: ((ApiKey.PRODUCE, RewriteError(46)),),
    # INVALID_PRODUCER_EPOCH on Produce: the coordinator bumped on a timeout (KIP-588: abort).
    47: ((ApiKey.PRODUCE, ErrorResponse(47)),),
    # CONCURRENT_TRANSACTIONS: the previous transaction is still completing; retry.
    51: tuple((api, ErrorResponse(51)) for api in (
        ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
        ApiKey.END_TXN)),
    # UNKNOWN_PRODUCER_ID: the partition forgot the producer (KIP-360: abort, bump).
    59: ((ApiKey.PRODUCE, ErrorResponse(59)),),
    # COORDINATOR_LOAD_IN_PROGRESS and NOT_COORDINATOR, from either coordinator.
    14: tuple((api, ErrorResponse(14)) for api in _COORDINATOR_APIS),
    16: tuple((api, ErrorResponse(16)) for api in _COORDINATOR_APIS),
}

# Abortable answers for random aborts: each loses the transaction, never the producer.
_ABORTABLE: Final[tuple[tuple[ApiKey, Action], ...]] = (
    (ApiKey.PRODUCE, ErrorResponse(45)),
    (ApiKey.PRODUCE, ErrorResponse(59)),
    (ApiKey.PRODUCE, ErrorResponse(47)),
    (ApiKey.TXN_OFFSET_COMMIT, RewriteError(22)),  # ILLEGAL_GENERATION (KIP-447)
    (ApiKey.END_TXN, ErrorResponse(120)),  # TRANSACTION_ABORTABLE (KIP-890)
)


def _transactions(run: Run) -> int:
    """Roughly how many transactions the run takes without faults."""
    return max(4, run.records // run.max_records_per_transaction)


def _nth(run: Run, api: ApiKey) -> int:
    """A seeded n for "the n-th request of ``api``", within the first ~half of the run.

    Each API named here is sent about once per transaction (one Produce request carries every
    partition of the single broker).
    """
    return run.rng.randint(1, max(1, _transactions(run) // 2))


def _wait_fired(run: Run, rule: Rule, deadline: float, alive: Callable[[], bool]) -> bool:
    """Wait until ``rule`` fired; False at the deadline, when ``alive()`` turns False, or
    when the input is all committed (the rule can no longer fire)."""
    while time.monotonic() < deadline and alive():
        if run.proxy.wait_fired(rule, 1.0) or run.progress() >= 1.0:
            break
    return rule.fired > 0


def _rules(run: Run, choices: Sequence[tuple[ApiKey, Action]], count: int) -> list[Rule]:
    """``count`` seeded rules, each one pair of ``choices`` on its seeded n-th request."""
    rules = []
    for _ in range(count):
        api, action = run.rng.choice(choices)
        rules.append(run.proxy.add_rule(Rule(api_key=api, nth=_nth(run, api), action=action)))
    return rules


def _finish(run: Run, workers: Sequence[Worker | Child], deadline: float) -> None:
    """Wait until the input is committed (or the deadline, or every processor ended), then
    stop every processor."""
    try:
        run.wait_progress(1.0, deadline, lambda: any(w.alive for w in workers))
    finally:
        for worker in workers:
            worker.stop()


def _with_rules(run: Run, deadline: float, kind: str,
                choices: Sequence[tuple[ApiKey, Action]], count: int) -> None:
    """One worker through the proxy, ``count`` seeded rules; count the ones that fired."""
    rules = _rules(run, choices, count)
    _finish(run, [run.worker()], deadline)
    run.fault(kind, sum(rule.fired for rule in rules))


def _fault_count(run: Run) -> int:
    return max(2, _transactions(run) // 10)


# -- the drivers ----------------------------------------------------------------------------------


def sigkill(run: Run, deadline: float) -> None:
    """SIGKILL ``eosclient copy`` mid-transaction and restart it (2-3 times): while the proxy
    holds a Produce of the transaction (its records may not be written), or its EndTxn (its
    records are written, the commit never reaches the broker); seeded."""
    for _ in range(run.rng.randint(2, 3)):
        left = 1.0 - run.progress()
        if left <= 0:
            break
        api = run.rng.choice((ApiKey.PRODUCE, ApiKey.END_TXN))
        child = run.child()
        rule = run.proxy.add_rule(Rule(api_key=api, action=Delay(_KILL_HOLD), nth=run.rng.randint(
            1, max(1, int(left * _transactions(run)) // 2))))
        fired = _wait_fired(run, rule, deadline, lambda: child.alive)  # noqa: B023
        child.kill()
        run.proxy.clear_rules()
        if fired:
            run.fault(f"sigkill-at-{api.label}")
    for _ in range(_CHILD_STARTS):  # a supervisor: a copy that fails is started again
        _finish(run, [run.child()], deadline)
        if run.progress() >= 1.0 or time.monotonic() >= deadline:
            return


def broker_restart(run: Run, deadline: float) -> None:
    """Restart the broker (SIGTERM; noida-db keeps its data) between two transactions: the
    next transaction's registration (AddPartitionsToTxn, AddOffsetsToTxn) is held in the proxy
    while the broker restarts, so it reaches the new broker process over a new connection."""
    _restart_on(run, deadline, [ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN],
                Delay(_RESTART_HOLD))


def broker_restart_mid_txn(run: Run, deadline: float) -> None:
    """Restart the broker (SIGTERM) while a Produce of an open transaction is in flight."""
    _restart_on(run, deadline, [ApiKey.PRODUCE], Delay(0))


def _restart_on(run: Run, deadline: float, apis: Sequence[ApiKey], action: Action) -> None:
    """Restart the broker when the seeded n-th request of ``apis[0]`` arrives (once or twice);
    the same n-th request of the other ``apis`` gets ``action`` too."""
    worker = run.worker()
    try:
        for n in sorted({_nth(run, apis[0]) for _ in range(run.rng.randint(1, 2))}):
            rules = [run.proxy.add_rule(Rule(api_key=api, nth=n, action=action)) for api in apis]
            if not _wait_fired(run, rules[0], deadline, lambda: worker.alive):
                break
            run.broker.restart()
            run.fault("broker-restart")
            run.proxy.clear_rules()
    finally:
        _finish(run, [worker], deadline)


def cut(run: Run, deadline: float) -> None:
    """Cut connections before the broker saw a request, or after it answered."""
    apis = (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.END_TXN,
            ApiKey.TXN_OFFSET_COMMIT, ApiKey.ADD_OFFSETS_TO_TXN)
    choices = [(api, Cut(when)) for api in apis for when in ("before", "after")]
    _with_rules(run, deadline, "cut", choices, _fault_count(run))


def drop(api: ApiKey) -> Driver:
    """A driver dropping ``api``'s response after the broker acted on the request."""

    def driver(run: Run, deadline: float) -> None:
        _with_rules(run, deadline, f"drop-{api.label}", [(api, DropResponse())],
                    _fault_count(run))

    driver.__doc__ = f"Drop {api.label} responses after the broker acted."
    return driver


def delay_end_txn(run: Run, deadline: float) -> None:
    """Hold EndTxn (the request, or the broker's answer) past the client's request timeout."""
    timeout = float(str(run.producer_config.get("request.timeout.ms", 1000))) / 1000
    choices = [(ApiKey.END_TXN, Delay(timeout * 1.5, direction))
               for direction in ("request", "response")]
    _with_rules(run, deadline, "delay-EndTxn", choices, _fault_count(run))


def error(code: int) -> Driver:
    """A driver injecting error ``code`` as :data:`ERROR_FAULTS` says."""

    def driver(run: Run, deadline: float) -> None:
        _with_rules(run, deadline, f"error-{code}", ERROR_FAULTS[code], _fault_count(run))

    driver.__doc__ = f"Inject error {code}."
    return driver


def zombie(run: Run, deadline: float) -> None:
    """Hold one Produce of an instance (its transaction open), start another instance with the
    same transactional.id and group.instance.id, then release the Produce: the first instance
    is a zombie now, and must be fenced without committing anything."""
    old = run.worker(restart=False)
    new: Worker | None = None
    try:
        rule = run.proxy.add_rule(Rule(api_key=ApiKey.PRODUCE, nth=_nth(run, ApiKey.PRODUCE),
                                       action=Delay(_ZOMBIE_HOLD)))
        if _wait_fired(run, rule, deadline, lambda: old.alive):
            run.fault("zombie")
        before = run.progress()
        new = run.worker(direct=True, restart=False)
        run.wait_progress(min(1.0, before + 0.05), deadline)
    finally:
        _finish(run, [w for w in (new, old) if w is not None], deadline)


def rebalance(run: Run, deadline: float) -> None:
    """Instances with their own transactional.ids join the group one by one while the others
    copy (at a seeded 10-30% and 40-60% of the input): each join revokes every partition
    (eager), so each member commits its open transaction and waits until the group shows the
    offsets before the partitions change hands. A join counts once the new instance committed
    records. The copy is paced (``_REBALANCE_PACE`` seconds of transform for the whole input,
    shared by the instances) and heartbeats are frequent, so that joins land mid-stream."""
    pause = _REBALANCE_PACE.get(run.broker.kind, 4.0) / max(run.records, 1)

    def paced(records: list[ConsumerRecord]) -> list[OutputRecord]:
        time.sleep(pause * len(records))
        return [OutputRecord(r.value, r.key, source=r) for r in records]

    def start(n: int) -> Worker:
        return run.worker(transactional_id=f"{run.transactional_id}-{n}", batch_fn=paced,
                          consumer_config={"heartbeat.interval.ms": 200})

    workers = [start(0)]

    def alive() -> bool:
        return all(w.alive for w in workers)

    try:
        for n, (low, high) in enumerate(((0.1, 0.3), (0.4, 0.6)), start=1):
            if not run.wait_progress(run.rng.uniform(low, high), deadline, alive):
                break
            workers.append(start(n))
            while alive() and time.monotonic() < deadline and run.progress() < 1.0:
                if workers[-1].records_in > 0:
                    run.fault("join")
                    break
                time.sleep(0.05)
    finally:
        _finish(run, workers, deadline)


def random_aborts(run: Run, deadline: float) -> None:
    """Seeded abortable errors on Produce, TxnOffsetCommit and EndTxn."""
    _with_rules(run, deadline, "abortable", _ABORTABLE, _fault_count(run))


DRIVERS: Final[dict[str, Driver]] = {
    "sigkill": sigkill,
    "broker-restart": broker_restart,
    "broker-restart-mid-txn": broker_restart_mid_txn,
    "cut": cut,
    "drop-produce": drop(ApiKey.PRODUCE),
    "drop-end-txn": drop(ApiKey.END_TXN),
    "drop-txn-offset-commit": drop(ApiKey.TXN_OFFSET_COMMIT),
    "delay-end-txn": delay_end_txn,
    **{f"error-{code}": error(code) for code in ERROR_FAULTS},
    "zombie": zombie,
    "rebalance": rebalance,
    "random-aborts": random_aborts,
}
