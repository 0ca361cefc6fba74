"""The nemesis: several ``eosclient copy`` processes in one group under a seeded random
schedule of composed faults, then an independent check of the output and of liveness.

Theory of operation. :func:`make_schedule` turns a seed into a :class:`Schedule`: faults at
times (seconds into the fault window) drawn from ``random.Random(seed)`` alone, so the same
seed gives the same schedule on every machine and broker. A fault is one of

* ``kill``: SIGKILL a worker, start it again ``hold`` seconds later (never for good: see
  below);
* ``pause``: SIGSTOP a worker for ``hold`` seconds, longer than the session timeout, then
  SIGCONT (a GC pause or a frozen VM: the group moves on without it);
* ``zombie``: SIGSTOP a worker, start a replacement under the same ``group.instance.id`` and
  transactional.id, SIGCONT the old one ``hold`` seconds later: the old one must end fenced
  and exit, the replacement must live;
* ``join``: an extra member (a transactional.id of its own, a dynamic member: no
  ``group.instance.id``) joins, and leaves (SIGTERM: LeaveGroup) ``hold`` seconds later
  (None: it stays);
* ``cut``: the proxy cuts every connection; ``drop``: the proxy loses the broker's answer to
  the next request of one API (the broker acted, the client never hears).

:func:`run_nemesis` builds a :class:`~eosclient.testing._scenario_run.Run` (input topic
pre-filled with part of the records, empty output topic, the proxy every worker talks
through), starts ``workers`` ``eosclient copy`` processes (worker ``wN`` has transactional.id
and ``group.instance.id`` ``<group>-wN``, as docs/processor.md recommends), keeps writing the
rest of the input in committed transactions at a steady pace, and plays the schedule once the
group has committed its first records (Tansu holds each join for about half the session
timeout). Then it stops the faults, lets the survivors drain, writes one probe record per
input partition and waits until the group commits past it (every partition owned by a live
worker and progressing), stops the workers and runs the checker on both topics, straight from
the broker. A sampler records each worker's committed records and the group's committed
offsets twice a second; the output log itself (producer id per batch) says which worker wrote
each input partition's records when.
:func:`write_report` draws all of it on one HTML page.

Why no worker is killed for good, and extra members are dynamic: neither broker here aborts a
transaction that outlives ``transaction.timeout.ms``, so a transactional.id that never comes
back holds the last stable offset of every output partition it wrote to for ever; and neither
removed a static member that stopped heartbeating within 45 s of a 6 s session timeout, so its
partitions stay assigned to nobody alive. Both are for the coordinator to do, not the client; a
real deployment's supervisor restarts what dies, and so does the nemesis.

What fails a run (:meth:`NemesisResult.problems`): any checker count, a worker that died
without the schedule killing it (or a zombie's replacement, fenced by its zombie), a zombie
that did not end fenced, a partition whose committed offset did not reach the input's end, a
probe record not committed by a live worker.

Where each part lives: ``_schedule`` (a seed's faults, and the steps they expand into),
``_result`` (what a run records, and what fails it), ``_run`` (the feeder, the workers, the
sampler: one run), ``_report`` (the HTML page), ``_cli`` (the table and the command line).

From a shell (starts its own broker; one row per seed, a report per seed)::

    python -m eosclient.testing.nemesis --broker noida --seeds 1-20 --duration 60 \\
        --records 20000 --report-dir nemesis-reports
"""

from __future__ import annotations

from eosclient.testing.nemesis._cli import format_row, format_table, main
from eosclient.testing.nemesis._report import write_report
from eosclient.testing.nemesis._result import Event, Instance, NemesisResult, Sample, Write
from eosclient.testing.nemesis._run import run_nemesis
from eosclient.testing.nemesis._schedule import (
    DROP_APIS,
    FAULT_KINDS,
    Fault,
    Schedule,
    make_schedule,
)

__all__ = ["DROP_APIS", "FAULT_KINDS", "Event", "Fault", "Instance", "NemesisResult", "Sample",
           "Schedule", "Write", "format_row", "format_table", "main", "make_schedule",
           "run_nemesis", "write_report"]
