"""Upgrade an app id's catalog in place from format 1 (sets of ID strings, earlier
releases) to format 3 (16-byte digests, :data:`dedup.catalog.CATALOG_FORMAT`). A catalog
of format 2 needs nothing (:data:`dedup.catalog.READABLE_FORMATS`).

The pipeline must be stopped: the migration holds the app id's lease while it runs
(a query that starts meanwhile is refused), and refuses while a batch some query
claimed was never committed (only that query, on the release that claimed it, can
replay it). Every ID of every live time bucket is imported with the bucket's expiry,
then the old set is deleted; the catch-up journal and the decisions of committed
batches (both in the old format) are dropped and each shard gets a new epoch, so
every Bloom filter is rebuilt from the migrated catalog. The format is recorded last:
until then the app id stays refused, and a migration that stopped half way is simply
run again (importing an ID twice adds it once).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any

from dedup.catalog import CATALOG_FORMAT, READABLE_FORMATS, RedisCatalog, _text, id_digests
from dedup.config import DedupConfig
from dedup.exceptions import AppIdInUseError, CatalogStateError, ShardCountMismatchError
from dedup.keys import (
    decisions_key,
    index_key,
    journal_key,
    meta_key,
    old_id_sets_pattern,
    state_key,
)
from dedup.redis_client import client_and_scripts, redis_errors

__all__ = ["MIGRATION_QUERY_ID", "MigrationReport", "migrate_catalog"]

MIGRATION_QUERY_ID = "catalog-migration"
"""The owner name the migration holds the app id's lease under."""


@dataclass(frozen=True)
class MigrationReport:
    """What :func:`migrate_catalog` did: ``ids`` imported (an ID already there counts
    once), old ``buckets`` converted, ``decisions`` dropped; ``already`` when the
    catalog was in a format this release reads before the call (nothing done)."""

    app_id: str
    already: bool
    ids: int = 0
    buckets: int = 0
    decisions: int = 0


def migrate_catalog(config: DedupConfig, chunk: int = 10_000,
                    say: Callable[[str], None] | None = None) -> MigrationReport:
    """Convert ``config.app_id``'s catalog from format 1 to format 3, in place.

    Safe to repeat and to resume after a crash: an ID imported twice is stored
    once, and a catalog already in format 2 or 3 is left alone.

    Raises
    ------
    AppIdInUseError
        A query holds the app id's lease (stop it first), or left a batch
        unfinished (restart it on the release that claimed the batch, or
        ``dedup forget-query``).
    ShardCountMismatchError
        ``config.num_shards`` is not the app id's recorded count.
    CatalogStateError
        The app id has no catalog, or one in a format this release does not know.
    CatalogUnavailableError
        Redis is unreachable; nothing is lost, run it again.
    """
    say = say or (lambda _line: None)
    cfg, app = config, config.app_id
    client, scripts = client_and_scripts(cfg.redis)
    with redis_errors(cfg.redis, "reading the catalog's format"):
        meta = {_text(k): _text(v) for k, v in client.hgetall(meta_key(app)).items()}
    if not meta:
        raise CatalogStateError(f"app id {app!r} has no catalog in this Redis (no "
                                f"{meta_key(app)}): check --app-id and --redis-url")
    recorded = int(meta.get("num_shards") or cfg.num_shards)
    if recorded != cfg.num_shards:
        raise ShardCountMismatchError(f"app id {app!r} was created with num_shards={recorded}, "
                                      f"not {cfg.num_shards}: use --num-shards {recorded}")
    found = meta.get("catalog_format")
    if found in READABLE_FORMATS:  # format 2 is read as it is
        return MigrationReport(app, already=True)
    if found is not None:
        raise CatalogStateError(f"app id {app!r}: catalog format {found} is unknown to this "
                                f"release (it reads formats {' and '.join(READABLE_FORMATS)})")
    catalog = RedisCatalog(cfg)
    # Taking the lease refuses a running query and any batch left unfinished.
    catalog.take_lease(MIGRATION_QUERY_ID)
    try:
        _refuse_batch_job_claims(catalog)
        ids = buckets = decisions = 0
        for shard in range(cfg.num_shards):
            pattern = old_id_sets_pattern(app, shard)
            with redis_errors(cfg.redis, "listing the old ID sets"):
                old_keys = sorted(client.scan_iter(match=pattern, count=1000))
            for key in old_keys:
                bucket = int(_text(key).rsplit(":", 1)[1])
                ids += _import_set(cfg, client, scripts, key, index_key(app, shard, bucket),
                                   bucket, chunk)
                buckets += 1
                catalog.take_lease(MIGRATION_QUERY_ID)  # renew: a large catalog takes long
            decisions += _reset_shard(cfg, client, shard)
            say(f"shard {shard}: {len(old_keys)} bucket(s) converted, {ids} ID(s) so far")
        with redis_errors(cfg.redis, "recording the catalog's format"):
            client.hset(meta_key(app), "catalog_format", CATALOG_FORMAT)
    finally:
        catalog.release(MIGRATION_QUERY_ID)
    return MigrationReport(app, already=False, ids=ids, buckets=buckets, decisions=decisions)


def _refuse_batch_job_claims(catalog: RedisCatalog) -> None:
    """Decisions of batch jobs (a token, not a batch number) may still be replayed by
    a retry of that job, which the old format's decisions cannot serve."""
    client, _ = client_and_scripts(catalog.config.redis)
    app = catalog.config.app_id
    with redis_errors(catalog.config.redis, "reading the decisions"):
        for shard in range(catalog.config.num_shards):
            for item in client.hkeys(decisions_key(app, shard)):
                qid, _, batch = _text(item).rpartition(":")
                if not batch.isdigit():
                    raise AppIdInUseError(
                        f"app id {app!r}: the batch job {qid!r} ({batch}) has recorded claims "
                        "that a retry of it would replay: finish it on the release that wrote "
                        f"them, or run `dedup forget-query --app-id {app} --query-id {qid} "
                        f"--num-shards {catalog.config.num_shards}`, then migrate")


def _import_set(cfg: DedupConfig, client: Any, scripts: Mapping[str, Any], key: bytes,
                index: str, bucket: int, chunk: int) -> int:
    """Import one old bucket SET into ``index`` with its expiry, then delete it."""
    with redis_errors(cfg.redis, "converting an old ID set"):
        expire_at = int(client.expiretime(key))
        if expire_at == -2:  # expired meanwhile: nothing to keep
            return 0
        if expire_at < 0:  # every old set had one; the old rule if not
            expire_at = ((bucket + 1) * cfg.retention.bucket_seconds
                         + cfg.retention.horizon_seconds)
        members = (_text(member) for member in client.sscan_iter(key, count=chunk))
        added = 0
        while part := list(islice(members, chunk)):  # streamed: a set may hold millions
            added += int(scripts["import"](keys=[index],
                                           args=[expire_at, b"".join(id_digests(part))]))
        client.delete(key)
    return added


def _reset_shard(cfg: DedupConfig, client: Any, shard: int) -> int:
    """Drop the shard's old-format journal and decisions; new epoch, this format."""
    app = cfg.app_id
    with redis_errors(cfg.redis, "converting a shard's state"):
        state = {_text(k): _text(v) for k, v in
                 client.hgetall(state_key(app, shard)).items()}
        dropped = int(client.hlen(decisions_key(app, shard)))
        client.delete(journal_key(app, shard), decisions_key(app, shard))
        if state and state.get("f") != CATALOG_FORMAT:
            version = int(state.get("version") or 0)
            client.hset(state_key(app, shard), mapping={
                "f": CATALOG_FORMAT, "epoch": uuid.uuid4().hex, "jn": 0, "jlo": version + 1})
    return dropped
