"""``eosclient groups {list,describe}``: consumer groups and their lag against the LSO."""

from __future__ import annotations

import argparse
import json

from eosclient._cli.common import (
    EXIT_OK,
    Subparsers,
    add_connection_args,
    client_settings,
    guarded,
    print_rows,
)
from eosclient.admin import Admin

__all__ = ["add_command"]


def add_command(subparsers: Subparsers) -> None:
    """Add ``eosclient groups``."""
    parser = subparsers.add_parser("groups", help="list consumer groups, describe their lag",
                                   description="List consumer groups; describe one's members "
                                   "and its lag against the last stable offset.")
    commands = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = commands.add_parser("list", help="every group: id, state, protocol type")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    add_connection_args(listing)
    listing.set_defaults(handler=guarded("groups list", _list))

    describe = commands.add_parser(
        "describe", help="a group's members and lag per partition",
        description="The group's state and members, then per partition its committed offset, "
        "the last stable offset (where read_committed readers end) and the lag between them.")
    describe.add_argument("group", help="the group id")
    describe.add_argument("--format", choices=("table", "json"), default="table")
    add_connection_args(describe)
    describe.set_defaults(handler=guarded("groups describe", _describe))


def _list(args: argparse.Namespace) -> int:
    with Admin(config=client_settings(args)) as admin:
        groups = admin.list_groups(timeout=args.timeout)
    rows = [{"group": g.group_id, "state": g.state, "protocol_type": g.protocol_type}
            for g in groups]
    print_rows(rows, ("group", "state", "protocol_type"), args.format)
    return EXIT_OK


def _describe(args: argparse.Namespace) -> int:
    with Admin(config=client_settings(args)) as admin:
        group = admin.describe_group(args.group, timeout=args.timeout)
    owners = {tp: m.member_id for m in group.members for tp in m.partitions}
    rows = [{"topic": tp.topic, "partition": tp.partition, "committed": lag.committed,
             "last_stable_offset": lag.last_stable_offset, "lag": lag.lag,
             "member": owners.get(tp)} for tp, lag in group.offsets.items()]
    if args.format == "json":
        print(json.dumps({"group": group.group_id, "state": group.state,
                          "protocol_type": group.protocol_type, "protocol": group.protocol,
                          "members": [{"member_id": m.member_id,
                                       "group_instance_id": m.group_instance_id,
                                       "client_id": m.client_id, "host": m.host,
                                       "partitions": [list(tp) for tp in m.partitions]}
                                      for m in group.members],
                          "offsets": rows, "total_lag": group.total_lag},
                         separators=(",", ":")))
        return EXIT_OK
    print(f"group {group.group_id}: {group.state}, {len(group.members)} members, "
          f"total lag {group.total_lag:,}")
    if rows:
        print_rows(rows, ("topic", "partition", "committed", "last_stable_offset", "lag",
                          "member"), "table")
    return EXIT_OK
