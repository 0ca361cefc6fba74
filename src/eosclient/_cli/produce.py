"""``eosclient produce``: records from lines or files, written in transactions.

Each input (a file, or stdin as ``-``) is read as lines (one record each, the newline dropped)
or, with ``--whole-file``, as one record. One transaction per input by default; with
``--records-per-transaction N`` a transaction also commits after every N records, so a long
stdin stream becomes visible to read_committed readers as it goes. Ctrl-C or SIGTERM aborts the
transaction under way: what it held is never read by a read_committed reader; what committed
before stays. Progress goes to stderr once a second on long work; stdout stays empty.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

from eosclient._cli.common import (
    EXIT_OK,
    Subparsers,
    add_connection_args,
    at_least,
    client_settings,
    guarded,
)
from eosclient.errors import EosError
from eosclient.producer import TransactionalProducer

__all__ = ["add_command"]

_PROGRESS_EVERY: Final = 1.0  # seconds


def add_command(subparsers: Subparsers) -> None:
    """Add ``eosclient produce``."""
    parser = subparsers.add_parser(
        "produce", help="write lines or files to a topic, in transactions",
        description="Write records to a topic in transactions: each line of each input is a "
        "record (or each input one record, with --whole-file). One transaction per input, "
        "or per N records with --records-per-transaction.")
    parser.add_argument("inputs", nargs="*", default=["-"], metavar="FILE",
                        help="files to read; - (the default) is stdin")
    parser.add_argument("-t", "--topic", required=True, help="the topic")
    parser.add_argument("-p", "--partition", type=at_least(0),
                        help="write every record to this partition (default: by key, or spread)")
    parser.add_argument("-K", "--key-separator", metavar="SEP",
                        help="split each line at the first SEP into key and value")
    parser.add_argument("-H", "--header", action="append", default=[], metavar="KEY=VALUE",
                        help="a header on every record (repeatable)")
    parser.add_argument("--whole-file", action="store_true",
                        help="each input is one record, its bytes as they are")
    parser.add_argument("-n", "--records-per-transaction", type=at_least(1), metavar="N",
                        help="also commit after every N records (default: one transaction "
                        "per input)")
    parser.add_argument("--transactional-id",
                        help="the producer's transactional.id (default: a fresh one); give a "
                        "stable one to fence an earlier run that still holds it")
    add_connection_args(parser)
    parser.set_defaults(handler=guarded("produce", _produce))


def _produce(args: argparse.Namespace) -> int:
    separator = args.key_separator.encode() if args.key_separator else None
    if separator == b"":
        raise ValueError("--key-separator must not be empty")
    headers = [_header(item) for item in args.header]
    settings = client_settings(args)
    settings.setdefault("transactional.id", args.transactional_id or
                        f"eosclient-produce-{uuid.uuid4()}")
    progress = _Progress()
    with TransactionalProducer(config=settings) as producer:
        producer.init_transactions(args.timeout)
        for name in args.inputs:
            with _opened(name) as stream:
                records = _records(stream, args.whole_file, separator)
                _write(producer, args, records, headers, progress)
    progress.done(args.topic)
    return EXIT_OK


def _write(producer: TransactionalProducer, args: argparse.Namespace,
           records: Iterator[tuple[bytes | None, bytes]], headers: list[tuple[str, bytes]],
           progress: _Progress) -> None:
    """Write one input: a transaction for it, or one per ``--records-per-transaction``."""
    limit = args.records_per_transaction
    in_txn = 0
    producer.begin_transaction()
    try:
        for key, value in records:
            producer.send(args.topic, value, key, partition=args.partition,
                          headers=headers or None)
            in_txn += 1
            progress.record()
            if limit and in_txn >= limit:
                producer.commit_transaction(args.timeout)
                progress.transaction()
                in_txn = 0
                producer.begin_transaction()
    except BaseException:
        with contextlib.suppress(EosError):  # the first failure is the one to report
            producer.abort_transaction(args.timeout)
        raise
    if in_txn:
        producer.commit_transaction(args.timeout)
        progress.transaction()
    else:
        producer.abort_transaction(args.timeout)  # nothing in it: end it without a marker


def _records(stream: BinaryIO, whole: bool,
             separator: bytes | None) -> Iterator[tuple[bytes | None, bytes]]:
    if whole:
        yield None, stream.read()
        return
    for raw in stream:
        line = raw.removesuffix(b"\n").removesuffix(b"\r")
        if separator is None:
            yield None, line
            continue
        key, found, value = line.partition(separator)
        if not found:
            raise ValueError(f"a line has no key separator {separator.decode()!r}: "
                             f"{line[:60]!r}")
        yield key, value


class _opened:
    """A named input as a binary stream; ``-`` is stdin (left open)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._file: BinaryIO | None = None

    def __enter__(self) -> BinaryIO:
        if self._name == "-":
            return sys.stdin.buffer
        self._file = Path(self._name).open("rb")
        return self._file

    def __exit__(self, *exc_info: object) -> None:
        if self._file is not None:
            self._file.close()


def _header(item: str) -> tuple[str, bytes]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ValueError(f"expected a header KEY=VALUE, got {item!r}")
    return key, value.encode()


class _Progress:
    """Counts, and a line on stderr at most once a second while work goes on."""

    def __init__(self) -> None:
        self.records = 0
        self.transactions = 0
        self._started = self._shown = time.monotonic()

    def record(self) -> None:
        self.records += 1
        now = time.monotonic()
        if now - self._shown >= _PROGRESS_EVERY:
            self._shown = now
            print(f"{self.records:,} records, {self.transactions:,} transactions committed",
                  file=sys.stderr, flush=True)

    def transaction(self) -> None:
        self.transactions += 1

    def done(self, topic: str) -> None:
        took = time.monotonic() - self._started
        print(f"produced {self.records:,} records to {topic!r} in {self.transactions:,} "
              f"transactions ({took:.1f} s)", file=sys.stderr, flush=True)
