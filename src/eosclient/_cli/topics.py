"""``eosclient topics {create,list,describe,delete}``."""

from __future__ import annotations

import argparse

from eosclient._cli.common import (
    EXIT_OK,
    Subparsers,
    add_connection_args,
    at_least,
    client_settings,
    guarded,
    print_rows,
    properties,
)
from eosclient.admin import Admin
from eosclient.errors import EosError

__all__ = ["add_command"]

_UNKNOWN_TOPIC = 3


def add_command(subparsers: Subparsers) -> None:
    """Add ``eosclient topics``."""
    parser = subparsers.add_parser("topics", help="create, list, describe and delete topics",
                                   description="Create, list, describe and delete topics.")
    commands = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = commands.add_parser("create", help="create a topic")
    create.add_argument("topic", help="the topic's name")
    create.add_argument("-p", "--partitions", type=at_least(1), default=1, help="(1)")
    create.add_argument("-r", "--replication-factor", type=at_least(1), default=1, help="(1)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a topic setting, e.g. cleanup.policy=compact (repeatable)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed if the topic exists already")
    add_connection_args(create)
    create.set_defaults(handler=guarded("topics create", _create))

    listing = commands.add_parser("list", help="list the topics, one a line")
    listing.add_argument("--internal", action="store_true", help="include internal topics")
    add_connection_args(listing)
    listing.set_defaults(handler=guarded("topics list", _list))

    describe = commands.add_parser("describe", help="partitions, leaders and replicas")
    describe.add_argument("topic", nargs="+", help="the topics")
    describe.add_argument("--format", choices=("table", "json"), default="table")
    add_connection_args(describe)
    describe.set_defaults(handler=guarded("topics describe", _describe))

    delete = commands.add_parser("delete", help="delete topics")
    delete.add_argument("topic", nargs="+", help="the topics")
    delete.add_argument("--if-exists", action="store_true",
                        help="succeed for a topic that does not exist")
    add_connection_args(delete)
    delete.set_defaults(handler=guarded("topics delete", _delete))


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(config=client_settings(args))


def _create(args: argparse.Namespace) -> int:
    config = {k: "" if v is None else str(v) for k, v in properties(args.config).items()}
    with _admin(args) as admin:
        created = admin.create_topic(args.topic, args.partitions,
                                     replication_factor=args.replication_factor, config=config,
                                     if_not_exists=args.if_not_exists, timeout=args.timeout)
    if not created:
        print(f"topic {args.topic!r} exists already", flush=True)
        return EXIT_OK
    print(f"created topic {args.topic!r} ({args.partitions} partitions)", flush=True)
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        names = admin.list_topics(internal=args.internal, timeout=args.timeout)
    for name in names:
        print(name)
    return EXIT_OK


def _describe(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        described = admin.describe_topics(args.topic, timeout=args.timeout)
    rows = [{"topic": d.name, "partition": p.partition, "leader": p.leader,
             "replicas": list(p.replicas), "isr": list(p.isr)}
            for d in described for p in d.partitions]
    print_rows(rows, ("topic", "partition", "leader", "replicas", "isr"), args.format)
    return EXIT_OK


def _delete(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        for name in args.topic:
            try:
                admin.delete_topic(name, timeout=args.timeout)
            except EosError as exc:
                if not (args.if_exists and exc.code == _UNKNOWN_TOPIC):
                    raise
                print(f"topic {name!r} does not exist", flush=True)
                continue
            print(f"deleted topic {name!r}", flush=True)
    return EXIT_OK
