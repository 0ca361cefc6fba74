"""``eosclient txn {list,describe,hanging,abort}``: transactions, as Kafka's
``kafka-transactions.sh`` (KIP-664) shows and ends them.

``abort`` takes either a transactional id (InitProducerId to its coordinator: the open
transaction is aborted and its producer fenced, as Kafka 4.0's ``forceTerminateTransaction``;
an id the cluster does not know is refused first, since InitProducerId would register it)
or a partition and the producer's id, epoch and coordinator epoch (an ABORT marker written by
WriteTxnMarkers to the partition's leader, KIP-664's abort); ``--start-offset`` finds those
three with DescribeProducers. A broker without the API exits 3, naming it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

from eosclient._admin.hanging import OPEN_STATES
from eosclient._cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    Subparsers,
    add_connection_args,
    at_least,
    client_settings,
    guarded,
    print_rows,
    seconds,
)
from eosclient._core.types import TopicPartition
from eosclient.admin import Admin
from eosclient.errors import EosError, UnsupportedVersionError

__all__ = ["add_command"]

_TRANSACTIONAL_ID_NOT_FOUND: Final = 105


def add_command(subparsers: Subparsers) -> None:
    """Add ``eosclient txn``."""
    parser = subparsers.add_parser(
        "txn", help="list, describe, find hanging and abort transactions (KIP-664)",
        description="Transactions as their coordinators and partition leaders see them.")
    commands = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = commands.add_parser("list", help="every transactional id the brokers know")
    listing.add_argument("--state", action="append", default=[],
                         help="only ids in this state, Kafka's spelling: Ongoing, Empty, "
                         "CompleteCommit, ... (repeatable)")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    add_connection_args(listing)
    listing.set_defaults(handler=guarded("txn list", _list))

    describe = commands.add_parser("describe", help="transactional ids' current transactions")
    describe.add_argument("transactional_id", nargs="+", help="the ids")
    describe.add_argument("--format", choices=("table", "json"), default="table")
    add_connection_args(describe)
    describe.set_defaults(handler=guarded("txn describe", _describe))

    hanging = commands.add_parser(
        "hanging", help="transactions open too long, or open where no coordinator knows",
        description="Transactions open longer than --max-open, and producers with a "
        "transaction open in a partition that no coordinator lists there. Exit 0 either way; "
        "the list is on stdout.")
    hanging.add_argument("--max-open", type=seconds, default=900.0, metavar="SECONDS",
                         help="open longer than this counts as hanging (900: Kafka's "
                         "transaction.max.timeout.ms)")
    hanging.add_argument("-t", "--topic", action="append",
                         help="only look at these topics' partitions (default: all)")
    hanging.add_argument("--format", choices=("table", "json"), default="table")
    add_connection_args(hanging)
    hanging.set_defaults(handler=guarded("txn hanging", _hanging))

    abort = commands.add_parser(
        "abort", help="abort a transaction",
        description="Abort by transactional id (the coordinator aborts and fences its "
        "producer), or in one partition by producer (an ABORT marker via WriteTxnMarkers).")
    abort.add_argument("--transactional-id", help="abort this id's open transaction")
    abort.add_argument("-t", "--topic", help="the partition's topic (marker form)")
    abort.add_argument("-p", "--partition", type=at_least(0), help="the partition")
    abort.add_argument("--start-offset", type=at_least(0),
                       help="the transaction's first offset in the partition (finds the "
                       "producer with DescribeProducers)")
    abort.add_argument("--producer-id", type=at_least(0))
    abort.add_argument("--producer-epoch", type=at_least(0))
    abort.add_argument("--coordinator-epoch", type=at_least(0))
    add_connection_args(abort)
    abort.set_defaults(handler=guarded("txn abort", _abort))


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(config=client_settings(args))


def _list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        listed = admin.list_transactions(states=args.state, timeout=args.timeout)
    rows = [{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
             "state": t.state, "coordinator": t.coordinator} for t in listed]
    print_rows(rows, ("transactional_id", "producer_id", "state", "coordinator"), args.format)
    return EXIT_OK


def _describe(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        described = admin.describe_transactions(args.transactional_id, timeout=args.timeout)
    rows = [{"transactional_id": d.transactional_id, "state": d.state,
             "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
             "timeout_ms": d.timeout_ms, "start_time_ms": d.start_time_ms,
             "partitions": [f"{tp.topic}-{tp.partition}" for tp in d.partitions],
             "coordinator": d.coordinator} for d in described]
    print_rows(rows, ("transactional_id", "state", "producer_id", "producer_epoch",
                      "timeout_ms", "start_time_ms", "partitions", "coordinator"), args.format)
    return EXIT_OK


def _hanging(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        found = admin.find_hanging_transactions(max_open_ms=int(args.max_open * 1000),
                                                topics=args.topic, timeout=args.timeout)
    rows = [{"topic": h.partition.topic if h.partition else None,
             "partition": h.partition.partition if h.partition else None,
             "transactional_id": h.transactional_id, "producer_id": h.producer_id,
             "producer_epoch": h.producer_epoch, "coordinator_epoch": h.coordinator_epoch,
             "start_offset": h.start_offset, "open_ms": h.open_ms, "reason": h.reason}
            for h in found]
    print_rows(rows, ("topic", "partition", "transactional_id", "producer_id",
                      "producer_epoch", "coordinator_epoch", "start_offset", "open_ms",
                      "reason"), args.format)
    print(f"{len(rows)} hanging transactions", file=sys.stderr, flush=True)
    return EXIT_OK


def _abort(args: argparse.Namespace) -> int:
    marker = (args.topic, args.partition)
    if args.transactional_id is not None:
        if any(v is not None for v in (*marker, args.start_offset, args.producer_id)):
            raise ValueError("give --transactional-id alone, or a partition and its producer")
        return _abort_by_id(args)
    if None in marker:
        raise ValueError("give --transactional-id, or --topic and --partition with "
                         "--start-offset or --producer-id, --producer-epoch and "
                         "--coordinator-epoch")
    tp = TopicPartition(args.topic, args.partition)
    with _admin(args) as admin:
        if args.start_offset is not None:
            producers = admin.describe_producers([tp], timeout=args.timeout)[tp]
            match = [s for s in producers if s.transaction_start_offset == args.start_offset]
            if not match:
                print(f"eosclient txn abort: no producer has a transaction open at offset "
                      f"{args.start_offset} of {tp.topic}-{tp.partition}", flush=True)
                return EXIT_FAILED
            ids = (match[0].producer_id, match[0].producer_epoch, match[0].coordinator_epoch)
        else:
            given = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
            if None in given:
                raise ValueError("--producer-id, --producer-epoch and --coordinator-epoch go "
                                 "together (or give --start-offset)")
            ids = given
        admin.abort_transaction(tp, *ids, timeout=args.timeout)
    print(f"wrote an ABORT marker for producer {ids[0]} into {tp.topic}-{tp.partition}",
          flush=True)
    return EXIT_OK


def _abort_by_id(args: argparse.Namespace) -> int:
    """InitProducerId for a transactional id, after asking whether the cluster knows it.

    InitProducerId registers an id its coordinator does not know: aborting a mistyped id
    said "aborted the open transaction" and left the id behind in ``txn list``. So the id is
    described first (DescribeTransactions registers nothing): an unknown id fails with nothing
    sent, and the message says what was there. A broker without DescribeTransactions (Tansu)
    cannot say; the message then says that the id may be new now.
    """
    txn_id = args.transactional_id
    with _admin(args) as admin:
        try:
            (described,) = admin.describe_transactions([txn_id], timeout=args.timeout)
        except UnsupportedVersionError:
            state = None
        except EosError as exc:
            if exc.code != _TRANSACTIONAL_ID_NOT_FOUND:
                raise
            print(f"eosclient txn abort: nothing to abort: no coordinator knows transactional "
                  f"id {txn_id!r} (nothing was sent that would register it)", file=sys.stderr,
                  flush=True)
            return EXIT_FAILED
        else:
            state = described.state
        admin.force_terminate_transaction(txn_id, timeout=args.timeout)
    if state is None:
        print(f"aborted any open transaction of {txn_id!r} and fenced its producer; the broker "
              "cannot say whether the id existed (it lacks DescribeTransactions): if it did "
              "not, it is registered now", flush=True)
    elif state in OPEN_STATES:
        print(f"aborted the open transaction of {txn_id!r} (its producer is fenced)", flush=True)
    else:
        print(f"{txn_id!r} had no open transaction ({state}): nothing was aborted; its "
              "producer is fenced", flush=True)
    return EXIT_OK
