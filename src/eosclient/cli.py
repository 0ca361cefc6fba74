"""The ``eosclient`` command line.

Subcommands:

``eosclient broker --kind {noida,tansu} [--port N] [--data-dir DIR] [--log-dir DIR]``
    Run one broker in the foreground on 127.0.0.1 until Ctrl-C or SIGTERM (needs the ``broker``
    extra).

Each subcommand is an ``add_*_command(subparsers)`` function that sets ``handler`` to a function
taking the parsed arguments and returning the exit status.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Final

from eosclient.testing.brokers import BROKER_KINDS, BrokerError, RunningBroker, start_broker

__all__ = ["main"]

_Handler = Callable[[argparse.Namespace], int]
_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_WATCH_INTERVAL: Final = 0.2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status."""
    parser = argparse.ArgumentParser(prog="eosclient", description="Exactly-once Kafka tools.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_broker_command(subparsers)
    args = parser.parse_args(argv)
    handler: _Handler = args.handler
    return handler(args)


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
