"""``eosclient consume``: read a topic, read_committed by default, to stdout.

Without ``--group`` the command assigns itself the topic's partitions (or those given with
``-p``) and starts where ``--from``, ``--offset`` or ``--timestamp`` says; nothing is
committed. With ``--group`` it joins the group (which assigns the partitions), starts at the
group's committed offsets (``--from`` for partitions without one), and commits what it has
written out after each batch and when it stops, so the group's lag tracks it.

It stops after ``--max-messages`` records, at the end of every partition (``-e``: the end
measured when it started, the LSO under read_committed), after ``--idle-timeout`` seconds
without a record, or on Ctrl-C or SIGTERM (exit 130).

Formats: ``raw`` writes each value and a newline (``KEY<SEP>VALUE`` with ``-K SEP``); ``json``
writes one JSON object a line with the record's topic, partition, offset, timestamp, key, value
and headers. Keys, values and header values are text when they are UTF-8, else
``{"base64": "..."}``; a missing key or value is null.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import json
import sys
import time
from typing import Any, BinaryIO, Final

from eosclient._cli.common import (
    EXIT_OK,
    Subparsers,
    add_connection_args,
    at_least,
    client_settings,
    guarded,
    seconds,
)
from eosclient._core.decode import ConsumerRecord
from eosclient._core.types import TopicPartition
from eosclient.admin import Admin
from eosclient.consumer import ReadCommittedConsumer
from eosclient.errors import EosError

__all__ = ["add_command"]

_POLL: Final = 0.5  # seconds per poll: how soon Ctrl-C and the stop conditions are noticed


def add_command(subparsers: Subparsers) -> None:
    """Add ``eosclient consume``."""
    parser = subparsers.add_parser(
        "consume", help="read a topic to stdout (read_committed by default)",
        description="Read records to stdout, one a line: committed records only, unless "
        "--isolation-level read_uncommitted.")
    parser.add_argument("-t", "--topic", required=True, help="the topic")
    parser.add_argument("-p", "--partition", type=at_least(0), action="append",
                        help="only this partition (repeatable; without --group)")
    parser.add_argument("-g", "--group", help="join this consumer group and commit what is "
                        "written out (default: no group, no commits)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from", dest="start", choices=("beginning", "end"),
                       default="beginning",
                       help="where to start (beginning); with --group, for partitions the "
                       "group has no offset for")
    start.add_argument("-o", "--offset", type=int,
                       help="start at this offset in every partition; negative: that many "
                       "offsets before the end, where transaction markers take offsets too "
                       "(without --group)")
    start.add_argument("--timestamp", metavar="MS|ISO-8601",
                       help="start at the first record at or after this time: epoch "
                       "milliseconds or e.g. 2026-01-31T12:00:00+00:00 (without --group)")
    parser.add_argument("-c", "--max-messages", type=at_least(1), metavar="N",
                        help="stop after N records")
    parser.add_argument("-e", "--exit-at-end", action="store_true",
                        help="stop at the end of every partition, as it was at the start "
                        "(without --group)")
    parser.add_argument("--idle-timeout", type=seconds, metavar="SECONDS",
                        help="stop after this long without a record")
    parser.add_argument("--format", choices=("raw", "json"), default="raw",
                        help="raw values (default) or JSON lines with the metadata")
    parser.add_argument("-K", "--key-separator", metavar="SEP",
                        help="raw format: write KEY<SEP>VALUE")
    parser.add_argument("--isolation-level", choices=("read_committed", "read_uncommitted"),
                        default="read_committed", help="(read_committed)")
    add_connection_args(parser)
    parser.set_defaults(handler=guarded("consume", _consume))


def _consume(args: argparse.Namespace) -> int:
    if args.group and (args.partition or args.offset is not None or args.timestamp
                       or args.exit_at_end):
        raise ValueError("with --group the group assigns partitions and starts at its "
                         "committed offsets: -p, --offset, --timestamp and -e are for use "
                         "without it")
    timestamp = _timestamp_ms(args.timestamp) if args.timestamp else None
    settings = client_settings(args)
    consumer_settings = {**settings, "isolation.level": args.isolation_level,
                         "auto.offset.reset": "earliest" if args.start == "beginning"
                         else "latest"}
    if args.group:
        consumer_settings["group.id"] = args.group
    written = _Written()
    with ReadCommittedConsumer(config=consumer_settings) as consumer:
        ends: dict[TopicPartition, int | None] = {}
        if args.group:
            consumer.subscribe([args.topic])
        else:
            with Admin(config=settings) as admin:
                tps = _partitions(admin, args)
                consumer.assign(tps)
                _seek(consumer, admin, args, tps, timestamp)
                if args.exit_at_end:
                    ends = admin.list_offsets(tps, "latest", isolation_level=args.isolation_level,
                                              timeout=args.timeout)
        try:
            _loop(consumer, args, ends, written)
        finally:
            if args.group and written.next_offsets:
                with contextlib.suppress(EosError):
                    consumer.commit(written.next_offsets, timeout=args.timeout)
    print(f"consumed {written.count:,} records", file=sys.stderr, flush=True)
    return EXIT_OK


def _loop(consumer: ReadCommittedConsumer, args: argparse.Namespace,
          ends: dict[TopicPartition, int | None], written: _Written) -> None:
    out = sys.stdout.buffer
    last_record = time.monotonic()
    while not _at_end(consumer, ends, args.timeout):
        if args.max_messages is not None and written.count >= args.max_messages:
            return
        left = None if args.max_messages is None else args.max_messages - written.count
        records = consumer.poll(_POLL, max_records=left)
        if records:
            last_record = time.monotonic()
            for record in records:
                _write(out, record, args)
                written.add(record)
            out.flush()
            if args.group:
                consumer.commit(written.next_offsets, timeout=args.timeout)
        elif args.idle_timeout is not None and time.monotonic() - last_record > \
                args.idle_timeout:
            return


def _at_end(consumer: ReadCommittedConsumer, ends: dict[TopicPartition, int | None],
            timeout: float) -> bool:
    return bool(ends) and all(end is None or consumer.position(tp, timeout) >= end
                              for tp, end in ends.items())


def _partitions(admin: Admin, args: argparse.Namespace) -> list[TopicPartition]:
    (described,) = admin.describe_topics([args.topic], timeout=args.timeout)
    numbers = [p.partition for p in described.partitions]
    chosen = args.partition or numbers
    unknown = sorted(set(chosen) - set(numbers))
    if unknown:
        raise ValueError(f"topic {args.topic!r} has partitions 0..{len(numbers) - 1}, "
                         f"not {unknown[0]}")
    return [TopicPartition(args.topic, p) for p in chosen]


def _seek(consumer: ReadCommittedConsumer, admin: Admin, args: argparse.Namespace,
          tps: list[TopicPartition], timestamp: int | None) -> None:
    if timestamp is not None:
        found = admin.list_offsets(tps, timestamp, isolation_level=args.isolation_level,
                                   timeout=args.timeout)
        ends = admin.list_offsets(tps, "latest", isolation_level=args.isolation_level,
                                  timeout=args.timeout)
        for tp in tps:
            offset = found[tp]
            consumer.seek(tp, (ends[tp] or 0) if offset is None else offset)
    elif args.offset is not None and args.offset >= 0:
        for tp in tps:
            consumer.seek(tp, args.offset)
    elif args.offset is not None:
        starts = admin.list_offsets(tps, "earliest", timeout=args.timeout)
        ends = admin.list_offsets(tps, "latest", isolation_level=args.isolation_level,
                                  timeout=args.timeout)
        for tp in tps:
            consumer.seek(tp, max(starts[tp] or 0, (ends[tp] or 0) + args.offset))
    elif args.start == "end":
        consumer.seek_to_end(tps)
    else:
        consumer.seek_to_beginning(tps)


def _timestamp_ms(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--timestamp: expected epoch milliseconds or an ISO 8601 time, "
                         f"got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as the shell user reads clocks
    return int(moment.timestamp() * 1000)


def _write(out: BinaryIO, record: ConsumerRecord, args: argparse.Namespace) -> None:
    if args.format == "json":
        line = json.dumps({
            "topic": record.topic, "partition": record.partition, "offset": record.offset,
            "timestamp_ms": record.timestamp_ms, "key": _text(record.key),
            "value": _text(record.value),
            "headers": [[k, _text(v)] for k, v in record.headers]},
            separators=(",", ":"), ensure_ascii=False)
        out.write(line.encode() + b"\n")
        return
    if args.key_separator is not None:
        out.write((record.key or b"") + args.key_separator.encode())
    out.write((record.value or b"") + b"\n")


def _text(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


class _Written:
    """How many records went out, and the offset after the last one per partition."""

    def __init__(self) -> None:
        self.count = 0
        self.next_offsets: dict[TopicPartition, int] = {}

    def add(self, record: ConsumerRecord) -> None:
        self.count += 1
        self.next_offsets[TopicPartition(record.topic, record.partition)] = record.offset + 1
