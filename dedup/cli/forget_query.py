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

from dedup.config import DedupConfig, RedisConfig, validate_app_id


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "forget-query", parents=[parent],
        help="drop the decisions of a query whose checkpoint is gone",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--app-id", required=True, help="the pipeline's app id")
    parser.add_argument("--query-id", required=True,
                        help="the streaming query id named by the refusal")
    parser.add_argument("--num-shards", type=int, required=True,
                        help="the app id's num_shards (dedup.num_shards)")
    parser.add_argument("--redis-url", help="the catalog's Redis (default: the local services "
                        "of 'dedup services up')")
    parser.set_defaults(handler=forget_query_command)


def forget_query_command(args: argparse.Namespace) -> int:
    from dedup.catalog import RedisCatalog
    from dedup.cli.checks import check_redis
    from dedup.cli.pipeline import resolve_redis_url

    app_id = validate_app_id(args.app_id)
    url = resolve_redis_url(args.redis_url)
    check_redis(url, what="--redis-url")
    catalog = RedisCatalog(DedupConfig(app_id, RedisConfig(url, require_persistence=False),
                                       num_shards=args.num_shards))
    removed = catalog.forget_query(args.query_id)
    print(f"forgot query {args.query_id} of app id {app_id}: {removed} decision(s) dropped")
    return 0
