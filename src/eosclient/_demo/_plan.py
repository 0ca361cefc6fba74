"""The faults the demo injects, as data: which request, what the proxy does, what must follow.

Each fault is one proxy :class:`~eosclient.testing.proxy.Rule`; ``nth`` places it in the run (the
n-th request of that API on the processor's connections), drawn from the seed so that a run can
be repeated. Two stages: the first processor meets the first list and is then killed; the
restarted one meets the second.

The kill itself is not a proxy fault: the demo waits for :func:`kill_trigger` to fire (the
processor's transaction is open, its records in the log, its commit held) and SIGKILLs the
process then.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from eosclient.errors import ApiKey
from eosclient.testing.proxy import Cut, Delay, DropResponse, RewriteError, Rule

__all__ = ["Fault", "kill_trigger", "plan"]

_HOLD = 30.0  # seconds: far longer than the kill takes
ILLEGAL_GENERATION = 22  # KIP-447: TxnOffsetCommit from a stale group generation


@dataclass(frozen=True, eq=False)
class Fault:
    """One injected fault.

    Attributes:
        label: What happens, in a few words.
        expect: What the processor must do about it.
        rule: The proxy rule that injects it (``rule.fired`` says whether it did).
    """

    label: str
    expect: str
    rule: Rule


def plan(rng: random.Random) -> tuple[list[Fault], list[Fault]]:
    """The faults for the first processor, and for the one restarted after the kill."""
    first = [
        Fault("connection cut after the broker wrote a Produce",
              "resend the batch with its sequence; the broker keeps one copy",
              Rule(api_key=ApiKey.PRODUCE, nth=rng.randint(3, 8), action=Cut("after"))),
        Fault("EndTxn answer lost after the broker committed",
              "resume the same commit; never redo it",
              Rule(api_key=ApiKey.END_TXN, nth=rng.randint(10, 20), action=DropResponse())),
    ]
    second = [
        Fault("consumer connection cut after a Fetch was answered",
              "reconnect and fetch again from the position; skip nothing",
              Rule(api_key=ApiKey.FETCH, nth=rng.randint(5, 15), action=Cut("after"))),
        Fault("TxnOffsetCommit answered ILLEGAL_GENERATION",
              "abort the transaction, rewind, process its records again",
              Rule(api_key=ApiKey.TXN_OFFSET_COMMIT, nth=rng.randint(5, 15),
                   action=RewriteError(ILLEGAL_GENERATION))),
    ]
    return first, second


def kill_trigger() -> Rule:
    """A rule that holds the processor's next EndTxn request in the proxy: the transaction's
    records are in the broker's log, its offsets sent, its commit on the wire.

    The demo kills the processor while the request is held, so the commit never reaches the
    coordinator: the restarted instance's InitProducerId aborts the transaction, and its records,
    already in the log, must stay invisible to read_committed readers (the checker counts any
    that are read) and be copied again, once.
    """
    return Rule(api_key=ApiKey.END_TXN, action=Delay(_HOLD))
