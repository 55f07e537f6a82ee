"""``dedup forget-query``: drop the decisions of a query whose checkpoint is gone.

A query that stopped in the middle of a batch leaves that batch's claims in
the catalog; only that query, restarted from its checkpoint, can replay them
and emit its records. Until then another query on the app id is refused. When
the checkpoint is gone for good, this command drops the query's decisions so
others may proceed; the IDs it claimed stay claimed (their records, if never
emitted, count as seen).
"""

from __future__ import annotations

import argparse
from typing import Any

from dedup.cli.catalog_args import add_catalog_arguments, catalog_config


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "forget-query", parents=[parent],
        help="drop the decisions of a query whose checkpoint is gone",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_catalog_arguments(parser)
    parser.add_argument("--query-id", required=True,
                        help="the streaming query id named by the refusal")
    parser.set_defaults(handler=forget_query_command)


def forget_query_command(args: argparse.Namespace) -> int:
    from dedup.catalog import RedisCatalog

    config = catalog_config(args)
    removed = RedisCatalog(config).forget_query(args.query_id)
    print(f"forgot query {args.query_id} of app id {config.app_id}: {removed} decision(s) "
          "dropped")
    return 0
