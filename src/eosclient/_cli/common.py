"""What every ``eosclient`` subcommand shares.

Exit codes (docs/cli.md lists them for users):

* 0: done;
* 1: the operation failed (the broker refused, a timeout, a topic or id that does not exist);
* 2: a usage error (a bad option or setting); nothing was sent;
* 3: the broker does not support the operation (UnsupportedVersionError, naming the API);
* 130: interrupted (Ctrl-C, SIGTERM).

Errors are one line on stderr, ``eosclient <command>: <Kind>: <message>``, then each cause the
same way; never a traceback for a user's mistake or a broker's refusal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Final, TypeAlias

from eosclient.errors import ConfigError, EosError, UnsupportedVersionError, UsageError

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNSUPPORTED",
    "EXIT_USAGE",
    "LOG_LEVELS",
    "Handler",
    "Subparsers",
    "add_cluster_args",
    "add_connection_args",
    "at_least",
    "client_settings",
    "config_file",
    "explain",
    "guarded",
    "log_to_stderr",
    "print_rows",
    "properties",
    "resolve_bootstrap",
    "seconds",
    "shared_settings",
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNSUPPORTED: Final = 3
EXIT_INTERRUPTED: Final = 130
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
BOOTSTRAP_ENV: Final = "EOSCLIENT_BOOTSTRAP_SERVERS"

Handler = Callable[[argparse.Namespace], int]
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_connection_args(parser: argparse.ArgumentParser, *, timeout: float = 30.0) -> None:
    """:func:`add_cluster_args`, then ``--timeout`` and ``--log-level``."""
    add_cluster_args(parser)
    parser.add_argument("--timeout", type=seconds, default=timeout, metavar="SECONDS",
                        help=f"how long each step may take before it fails ({timeout:g})")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="error",
                        help="eosclient's log lines on stderr from this level on (error: "
                        "only the one-line error a failure ends with)")


def add_cluster_args(parser: argparse.ArgumentParser, *, clients: str = "the client") -> None:
    """``-b/--bootstrap-servers``, ``-X`` and ``--config-file``: how every command that talks
    to a cluster is told where it is and how to connect.

    ``-b`` is optional to argparse (so the usage line is the same whether the environment
    variable is set or not); :func:`resolve_bootstrap` fills it from
    ``$EOSCLIENT_BOOTSTRAP_SERVERS`` after parsing, or ends with a usage error naming both.
    """
    parser.add_argument("-b", "--bootstrap-servers", metavar="HOST:PORT[,...]",
                        help=f"the brokers to start from (default: ${BOOTSTRAP_ENV})")
    parser.add_argument("-X", dest="property", action="append", default=[], metavar="KEY=VALUE",
                        help=f"a setting of {clients} by Kafka's dotted key (repeatable): "
                        "security.protocol, ssl.*, sasl.*, ... Secrets given here show in the "
                        "process list: put them in --config-file")
    parser.add_argument("--config-file", type=Path, metavar="PATH",
                        help=f"settings of {clients}, one KEY=VALUE a line (a Java .properties "
                        "file, as Kafka's --command-config; # starts a comment); -X wins over it")
    parser.set_defaults(cluster_parser=parser)


def resolve_bootstrap(args: argparse.Namespace) -> None:
    """Fill ``args.bootstrap_servers`` from ``$EOSCLIENT_BOOTSTRAP_SERVERS`` when ``-b`` was
    not given, for a command made with :func:`add_cluster_args` (others are left alone).

    Raises:
        SystemExit: neither is given (status 2, argparse's usage error, naming both).
    """
    parser: argparse.ArgumentParser | None = getattr(args, "cluster_parser", None)
    if parser is None or args.bootstrap_servers:
        return
    args.bootstrap_servers = os.environ.get(BOOTSTRAP_ENV) or None
    if args.bootstrap_servers is None:
        parser.error(f"no brokers: give -b/--bootstrap-servers HOST:PORT or set "
                     f"{BOOTSTRAP_ENV}")


def shared_settings(args: argparse.Namespace) -> dict[str, object]:
    """The dotted-key settings of ``--config-file`` and ``-X`` (``-X`` wins), without
    ``bootstrap.servers``.

    Raises:
        ValueError: an item is not KEY=VALUE, or the config file cannot be read.
    """
    settings = config_file(args.config_file) if args.config_file else {}
    settings.update(properties(args.property))
    return settings


def client_settings(args: argparse.Namespace) -> dict[str, object]:
    """The dotted-key settings the options name, ``bootstrap.servers`` included.

    Raises:
        ValueError: an item is not KEY=VALUE, or the config file cannot be read.
    """
    settings = shared_settings(args)
    settings["bootstrap.servers"] = args.bootstrap_servers
    return settings


def guarded(command: str, handler: Handler) -> Handler:
    """``handler`` with the exit codes and one-line errors above, and its log level set."""

    def run(args: argparse.Namespace) -> int:
        try:
            with log_to_stderr(getattr(args, "log_level", "error")), _stop_raises():
                return handler(args)
        except KeyboardInterrupt:
            print(f"eosclient {command}: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except BrokenPipeError:  # `eosclient consume ... | head`: the reader is done
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK
        except UnsupportedVersionError as exc:
            print(f"eosclient {command}: the broker does not support this: {explain(exc)}",
                  file=sys.stderr)
            return EXIT_UNSUPPORTED
        except (ConfigError, UsageError, ValueError, TypeError) as exc:
            print(f"eosclient {command}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except EosError as exc:
            print(f"eosclient {command}: {explain(exc)}", file=sys.stderr)
            return EXIT_FAILED
        except OSError as exc:  # a file that cannot be read, a full disk
            print(f"eosclient {command}: {exc}", file=sys.stderr)
            return EXIT_FAILED

    return run


@contextmanager
def _stop_raises() -> Iterator[None]:
    """Let SIGTERM interrupt like Ctrl-C (KeyboardInterrupt), so clean-up runs for it too."""
    if sys.platform == "win32" or not _main_thread():
        yield
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main_thread() -> bool:
    import threading  # noqa: PLC0415

    return threading.current_thread() is threading.main_thread()


def print_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: str) -> None:
    """Rows as an aligned table under upper-case headers, or as JSON lines (``fmt="json"``)."""
    if fmt == "json":
        for row in rows:
            print(json.dumps(row, separators=(",", ":")))
        return
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    heads = [c.upper().replace("_", "-") for c in columns]
    widths = [max(len(x) for x in col) for col in zip(heads, *cells, strict=False)]
    for line in (heads, *cells):
        print("  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def at_least(least: int) -> Callable[[str], int]:
    """An argparse type: an int of at least ``least``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least:,}, not {value:,}")
        return value

    return parse


def explain(exc: BaseException) -> str:
    """``Kind: message``, then each cause the same way: the root cause is often the answer
    (a timeout caused by a refused connection, say)."""
    parts, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__
    return "; caused by ".join(parts)


def properties(items: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` strings as a config dict (integers as int, ``KEY=`` as None: unset; the
    config checks the rest).

    Raises:
        ValueError: an item without ``=``.
    """
    found: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        key, value = key.strip(), value.strip()
        # Every ssl.*/sasl.* setting is text: a password of digits stays one.
        text = key.startswith(("ssl.", "sasl."))
        found[key] = (int(value) if value.lstrip("-").isdigit() and not text
                      else value or None)
    return found


def config_file(path: Path) -> dict[str, object]:
    """The ``KEY=VALUE`` lines of a properties file (blank lines and ``#``/``!`` comments
    skipped), as :func:`properties` reads them.

    Raises:
        ValueError: the file cannot be read, or a line is not ``KEY=VALUE``.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read --config-file {str(path)!r}: {exc.strerror}") from None
    kept = [line.strip() for line in lines]
    return properties([line for line in kept if line and line[0] not in "#!"])


@contextmanager
def log_to_stderr(level: str) -> Iterator[None]:
    """Send the ``eosclient`` loggers' lines from ``level`` on to stderr, one line each, until
    the block ends (``main()`` may run in-process, as in tests: nothing is left behind)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("eosclient")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
