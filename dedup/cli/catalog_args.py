"""The arguments naming one app id's catalog, shared by the commands that work on it
offline (``forget-query``, ``migrate-catalog``)."""

from __future__ import annotations

import argparse

from dedup.config import DedupConfig, RedisConfig, validate_app_id


def add_catalog_arguments(parser: argparse.ArgumentParser) -> None:
    """``--app-id``, ``--num-shards`` and ``--redis-url``."""
    parser.add_argument("--app-id", required=True, help="the pipeline's app id")
    parser.add_argument("--num-shards", type=int, required=True,
                        help="the app id's num_shards (dedup.num_shards)")
    parser.add_argument("--redis-url", help="the catalog's Redis (default: the local services "
                        "of 'dedup services up')")


def catalog_config(args: argparse.Namespace) -> DedupConfig:
    """The app id's :class:`DedupConfig` from the arguments, its Redis checked reachable
    (persistence is not checked: these commands only read and rewrite the catalog)."""
    from dedup.cli.checks import check_redis
    from dedup.cli.pipeline import resolve_redis_url

    app_id = validate_app_id(args.app_id)
    url = resolve_redis_url(args.redis_url)
    check_redis(url, what="--redis-url")
    return DedupConfig(app_id, RedisConfig(url, require_persistence=False),
                       num_shards=args.num_shards)
