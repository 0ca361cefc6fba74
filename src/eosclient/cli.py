"""The ``eosclient`` command line (docs/cli.md is the user's guide).

``eosclient topics|produce|consume|groups|txn`` live in :mod:`eosclient._cli`, one module per
command group, with what every command shares (connection options, exit codes, one-line
errors) in ``eosclient._cli.common``; ``eosclient --version`` prints the version. The rest are
here:

``eosclient broker --kind {noida,tansu} [--port N] [--data-dir DIR] [--log-dir DIR]``
    Run one broker in the foreground on 127.0.0.1 until Ctrl-C or SIGTERM (needs the ``broker``
    extra).

``eosclient verify --input T --output T [--match {header,value}]``
    Check that the output topic holds every input record exactly once (see
    :mod:`eosclient.testing.checker`): exit 0 when nothing is wrong, 1 on any anomaly (or when a
    topic cannot be read), 2 on a usage error.

``eosclient copy --input T --output T --group G --transactional-id ID``
    Copy records exactly once with :class:`~eosclient.ExactlyOnceProcessor` (like Kafka's
    TransactionalMessageCopier), printing a progress line when it has moved; SIGINT or SIGTERM
    commits what is open and exits 0. Exit 1 when the processor fails (fenced, say).
    ``--log-level debug`` logs a line per committed transaction on stderr.

Every command that talks to a cluster (all but ``broker`` and ``demo``, which start their own)
takes the same ``-b/--bootstrap-servers`` (or ``$EOSCLIENT_BOOTSTRAP_SERVERS``), ``-X
KEY=VALUE`` and ``--config-file`` (``eosclient._cli.common.add_cluster_args``), and ``main``
fills ``-b`` from the environment after parsing.

``eosclient demo [--records N] [--partitions N] [--broker {noida,tansu}] [--seed N] [--quiet]``
    Copy records exactly once through injected faults (a SIGKILL and restart among them) on a
    local broker, check the copy and print a report (see :mod:`eosclient._demo`): exit 0 when
    the copy is exactly once, 1 when not.

Each subcommand is an ``add_*_command(subparsers)`` function that sets ``handler`` to a function
taking the parsed arguments and returning the exit status.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Final

from eosclient import __version__
from eosclient._cli import consume, groups, produce, topics, txn
from eosclient._cli.common import LOG_LEVELS as _LOG_LEVELS
from eosclient._cli.common import add_cluster_args as _add_cluster_args
from eosclient._cli.common import at_least as _at_least
from eosclient._cli.common import client_settings as _client_settings
from eosclient._cli.common import explain as _explain
from eosclient._cli.common import log_to_stderr as _log_to_stderr
from eosclient._cli.common import properties as _properties
from eosclient._cli.common import resolve_bootstrap as _resolve_bootstrap
from eosclient._cli.common import seconds as _seconds
from eosclient._cli.common import shared_settings as _shared_settings
from eosclient.aio.processor import AsyncExactlyOnceProcessor
from eosclient.errors import ConfigError, EosError
from eosclient.processor import ExactlyOnceProcessor, ProcessorStats
from eosclient.testing.brokers import BROKER_KINDS, BrokerError, RunningBroker, start_broker
from eosclient.testing.checker import compare, input_seen, output_seen, read_topic

__all__ = ["build_parser", "main"]

_Handler = Callable[[argparse.Namespace], int]
_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_WATCH_INTERVAL: Final = 0.2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status."""
    args = build_parser().parse_args(argv)
    _resolve_bootstrap(args)
    handler: _Handler = args.handler
    return handler(args)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line's parser: each subcommand sets ``handler``."""
    parser = argparse.ArgumentParser(prog="eosclient", description="Exactly-once Kafka tools.",
                                     epilog="Exit codes: 0 done, 1 failed, 2 usage error, 3 not "
                                     "supported by the broker, 130 interrupted.")
    parser.add_argument("--version", action="version", version=f"eosclient {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_broker_command(subparsers)
    topics.add_command(subparsers)
    produce.add_command(subparsers)
    consume.add_command(subparsers)
    groups.add_command(subparsers)
    txn.add_command(subparsers)
    add_verify_command(subparsers)
    add_copy_command(subparsers)
    add_demo_command(subparsers)
    return parser


def add_broker_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``eosclient broker``."""
    parser = subparsers.add_parser(
        "broker",
        help="run a local broker in the foreground",
        description="Run noida-db or Tansu on 127.0.0.1 until Ctrl-C or SIGTERM.",
    )
    parser.add_argument("--kind", choices=BROKER_KINDS, required=True, help="which broker")
    parser.add_argument("--port", type=int, help="port to listen on (default: a free one)")
    parser.add_argument(
        "--data-dir", type=Path, help="noida-db data directory (default: temporary, removed)"
    )
    parser.add_argument(
        "--log-dir", type=Path, help="where the broker log goes (default: temporary, removed)"
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for it to start (30)"
    )
    parser.set_defaults(handler=_run_broker)


def add_verify_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``eosclient verify``."""
    parser = subparsers.add_parser(
        "verify",
        help="check that a copy is exactly once",
        description="Read both topics with read_committed and report lost, duplicated, "
        "aborted-but-read and out-of-order records. Exit 0 if there are none, else 1.",
    )
    parser.add_argument("--input", required=True, help="the input topic")
    parser.add_argument("--output", required=True, help="the output topic")
    parser.add_argument(
        "--match", choices=("header", "value"), default="header",
        help="match output to input by the eos.src header (default) or by value",
    )
    parser.add_argument(
        "--aborted-ids", type=Path, help="a file of record ids that were aborted, one a line"
    )
    parser.add_argument("--timeout", type=_seconds, default=60.0, metavar="SECONDS",
                        help="seconds per topic (60)")
    _add_cluster_args(parser)
    parser.set_defaults(handler=_run_verify)


def _run_verify(args: argparse.Namespace) -> int:
    try:
        settings = _client_settings(args)
        aborted = _aborted_ids(args.aborted_ids)
        inputs = [input_seen(r, args.match)
                  for r in read_topic(None, args.input, timeout=args.timeout, config=settings)]
        outputs = [output_seen(r, args.match)
                   for r in read_topic(None, args.output, timeout=args.timeout, config=settings)]
        report = compare(inputs, outputs, aborted=aborted, input_topic=args.input,
                         output_topic=args.output)
    except (ConfigError, ValueError) as exc:
        print(f"eosclient verify: {exc}", file=sys.stderr)
        return 2
    except (EosError, OSError) as exc:
        print(f"eosclient verify: {_explain(exc)}", file=sys.stderr)
        return 1
    print(report, flush=True)
    return 0 if report.ok else 1


def add_copy_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``eosclient copy``."""
    parser = subparsers.add_parser(
        "copy",
        help="copy a topic exactly once",
        description="Copy records from input topics to an output topic in transactions, "
        "until Ctrl-C or SIGTERM (or a limit below).",
    )
    parser.add_argument("--input", required=True, action="append", help="an input topic")
    parser.add_argument("--output", required=True, help="the output topic")
    parser.add_argument("--group", required=True, help="the consumer group id")
    parser.add_argument("--transactional-id", required=True, help="stable across restarts")
    parser.add_argument("--max-records-per-transaction", type=_at_least(1), default=500)
    parser.add_argument("--commit-interval-ms", type=_at_least(0), default=100)
    parser.add_argument("--max-consecutive-aborts", type=_at_least(0), default=10,
                        help="give up after this many aborted transactions in a row (10); "
                        "0: never")
    parser.add_argument("--max-records", type=_at_least(0),
                        help="stop after this many input records")
    parser.add_argument("--idle-timeout", type=_seconds,
                        help="stop after this many seconds without records, counted from the "
                        "start; exit 1 if no input partition was ever assigned by then")
    parser.add_argument("--progress-interval", type=_seconds, default=1.0,
                        help="seconds between progress lines (1)")
    _add_cluster_args(parser, clients="both clients")
    parser.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                        help="a consumer setting by Kafka's dotted key (repeatable); KEY= "
                        "unsets it (group.instance.id=: a dynamic member)")
    parser.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE",
                        help="a producer setting by Kafka's dotted key (repeatable)")
    parser.add_argument("--log-level", choices=_LOG_LEVELS, default="warning",
                        help="eosclient's log lines on stderr from this level on (warning); "
                        "debug adds one line per committed transaction")
    parser.add_argument("--asyncio", action="store_true",
                        help="run eosclient.aio's AsyncExactlyOnceProcessor on an event loop "
                        "(one thread for both clients) instead of ExactlyOnceProcessor")
    parser.set_defaults(handler=_run_copy)


def _run_copy(args: argparse.Namespace) -> int:
    with _log_to_stderr(args.log_level):
        return _copy(args)


def _copy(args: argparse.Namespace) -> int:
    try:
        shared = _shared_settings(args)
        make = AsyncExactlyOnceProcessor if args.asyncio else ExactlyOnceProcessor
        processor = make(
            bootstrap_servers=args.bootstrap_servers, input_topics=args.input,
            output_topic=args.output, group_id=args.group,
            transactional_id=args.transactional_id,
            max_records_per_transaction=args.max_records_per_transaction,
            commit_interval_ms=args.commit_interval_ms,
            max_consecutive_aborts=args.max_consecutive_aborts or None,
            config=shared,
            consumer_config=_properties(args.consumer_property),
            producer_config=_properties(args.producer_property))
    except ValueError as exc:
        print(f"eosclient copy: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    reporter = threading.Thread(target=_report, args=(processor, stop, args.progress_interval),
                                daemon=True)
    with _signals_call(processor.stop):
        reporter.start()
        try:
            if isinstance(processor, AsyncExactlyOnceProcessor):
                stats = asyncio.run(processor.run(max_records=args.max_records,
                                                  idle_timeout=args.idle_timeout))
            else:
                stats = processor.run(max_records=args.max_records,
                                      idle_timeout=args.idle_timeout)
        except EosError as exc:
            failed: EosError | None = exc
        else:
            failed = None
        finally:
            # The last word waits for the progress lines to end: written between a progress
            # line and its newline, it ended up inside that line (the nemesis read a zombie's
            # FencedError as progress, and the zombie as not fenced).
            stop.set()
            reporter.join()
    if isinstance(failed, ConfigError):
        print(f"eosclient copy: {failed}", file=sys.stderr)
        return 2
    if failed is not None:
        print(f"eosclient copy: {_explain(failed)}", file=sys.stderr)
        return 1
    print(f"done: {stats}", flush=True)
    return 0


def _report(processor: ExactlyOnceProcessor | AsyncExactlyOnceProcessor, stop: threading.Event,
            interval: float) -> None:
    last = ""
    while not stop.wait(interval):
        # A line only when the counts moved: an idle copy printed the same line every second.
        line = _progress_line(processor.stats)
        if line != last:
            print(f"{line}\n", end="", flush=True)  # one write: a line is never split
            last = line


def _progress_line(stats: ProcessorStats) -> str:
    """The stats without their rate, which changes while nothing happens (the clock runs)."""
    return (f"records in {stats.records_in}, out {stats.records_out}, transactions committed "
            f"{stats.transactions_committed}, aborted {stats.transactions_aborted}")


@contextmanager
def _signals_call(action: Callable[[], None]) -> Iterator[None]:
    """Let SIGINT and SIGTERM call ``action`` (a graceful stop) instead of killing the process."""

    def handle(signum: int, frame: FrameType | None) -> None:
        action()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def add_demo_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``eosclient demo``."""
    parser = subparsers.add_parser(
        "demo",
        help="copy a topic exactly once through injected faults, on a local broker, and check it",
        description="Start a local broker and a fault-injecting proxy, write input records, "
        "copy them with the exactly-once processor through faults (a lost EndTxn answer, an "
        "abortable error, cut connections, a SIGKILL and a restart), check the copy and print "
        "a report. Exit 0 if the copy is exactly once, 1 if not.",
    )
    parser.add_argument("--records", type=_at_least(1000), default=50_000,
                        help="input records, 1,000 or more (50,000)")
    parser.add_argument("--partitions", type=_at_least(1), default=4,
                        help="partitions of each topic (4)")
    parser.add_argument("--broker", choices=BROKER_KINDS, default="noida",
                        help="noida (default) or tansu (its group join takes ~25 s)")
    parser.add_argument("--seed", type=int, help="where the faults strike (default: random)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds the whole run may take (300)")
    parser.add_argument("--quiet", action="store_true", help="print the report only")
    parser.set_defaults(handler=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from eosclient import _demo  # noqa: PLC0415 - the demo's modules load only for the demo

    options = _demo.DemoOptions(records=args.records, partitions=args.partitions,
                                broker=args.broker, seed=args.seed, timeout=args.timeout)
    screen = _demo.Screen(sys.stdout, quiet=args.quiet)
    with _signals_raise():
        try:
            result = _demo.run(options, screen)
        except KeyboardInterrupt:
            print("\neosclient demo: interrupted; the broker and processors are stopped",
                  file=sys.stderr)
            return 130
    print(_demo.render(result), flush=True)
    return _demo.exit_status(result)


@contextmanager
def _signals_raise() -> Iterator[None]:
    """Let SIGTERM and SIGHUP interrupt like Ctrl-C, so that the clean-up runs for them too."""

    def handle(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _aborted_ids(path: Path | None) -> list[str]:
    if path is None:
        return []
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def _run_broker(args: argparse.Namespace) -> int:
    # Catch the stop signals before the broker exists: a signal that killed this process while
    # the broker starts or stops would leave the broker running in its own session.
    stop = threading.Event()
    with _signals_set(stop):
        try:
            broker = start_broker(
                args.kind,
                port=args.port,
                data_dir=args.data_dir,
                log_dir=args.log_dir,
                timeout=args.timeout,
            )
        except (BrokerError, ValueError) as exc:
            print(f"eosclient broker: {exc}", file=sys.stderr)
            return 1
        with broker:
            _print_address(broker)
            status = _serve(broker, stop)
    print("broker stopped", flush=True)
    return status


def _print_address(broker: RunningBroker) -> None:
    print(f"bootstrap servers: {broker.bootstrap_servers}", flush=True)
    print(f"log: {broker.log_path}", flush=True)
    if broker.data_dir is not None:
        print(f"data dir: {broker.data_dir}", flush=True)
    print(f"pid: {broker.pid}", flush=True)
    print("press Ctrl-C to stop", flush=True)


def _serve(broker: RunningBroker, stop: threading.Event) -> int:
    """Wait for ``stop`` (status 0) or for the broker to die (status 1)."""
    while not stop.wait(_WATCH_INTERVAL):
        if not broker.running:
            print(f"eosclient broker: the broker exited\n{broker.log_tail()}", file=sys.stderr)
            return 1
    return 0


@contextmanager
def _signals_set(event: threading.Event) -> Iterator[None]:
    """Let SIGINT, SIGTERM and SIGHUP set ``event`` instead of killing this process.

    The broker runs in a session of its own, so the terminal's signals never reach it: it must be
    stopped from here, or it would outlive the command.
    """

    def handle(signum: int, frame: FrameType | None) -> None:
        event.set()

    previous = {sig: signal.signal(sig, handle) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    raise SystemExit(main())
