"""``eosclient demo``: an exactly-once copy through injected faults, checked, on a local broker.

Five phases, each shown as it happens:

1. start an embedded broker (noida-db by default; Tansu with ``--broker tansu``) and a
   fault-injecting Kafka proxy in front of it;
2. write the input: committed transactions across the partitions, with aborted transactions
   between them whose records no reader may ever see;
3. run the processor, ``eosclient copy`` as a child process, through the proxy; the proxy cuts a
   connection after a Produce, rewrites a TxnOffsetCommit answer to an abortable error and drops
   an EndTxn answer after the broker committed; then the process is SIGKILLed while a
   transaction is open;
4. start it again with the same transactional.id: it fences the dead instance, the broker
   aborts what that left open, the group (static membership) hands it the partitions at once;
   a consumer connection is cut once more; it copies the rest;
5. read both topics back with read_committed and count lost, duplicated, aborted-but-read,
   unexpected and out-of-order records: all must be zero.

Then a short report, and exit status 0 (exactly once) or 1. The broker, the proxy and the
processes are stopped on every way out, Ctrl-C included.

The fault phases are data (:mod:`eosclient._demo._plan`): proxy rules with where they strike.
"""

from eosclient._demo._progress import Screen
from eosclient._demo._report import DemoResult, exit_status, render
from eosclient._demo._run import DemoOptions, run

__all__ = ["DemoOptions", "DemoResult", "Screen", "exit_status", "render", "run"]
