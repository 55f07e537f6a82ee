"""Redis ACL users of the tests (docs/operations.md, "Redis ACL"): made from a line, and
every Redis call of a pipeline made as one."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dedup import DedupConfig, RedisCatalog, RedisConfig, ShardClaimer
from dedup.bloom import FilterCache
from sinks.checkpoint import CheckpointStore

NOW = 1_800_000_000.0


def make_user(admins: Sequence[Any], url: str, app_id: str, line: str) -> str:
    """Run ``line`` (an ``ACL SETUSER`` line of user ``dedup-<app_id>``) through each
    client of ``admins`` (every node of a cluster: ACLs are per node) and return ``url``
    with that user and a fresh password in it."""
    user, password = f"dedup-{app_id}", uuid.uuid4().hex
    words = line.replace("<password>", password).split()
    assert words[:3] == ["ACL", "SETUSER", user], words[:3]
    for admin in admins:
        admin.execute_command(*words)
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{hosts}"))


def new_query() -> str:
    return f"q-{uuid.uuid4().hex[:12]}"


def every_call(url: str, app_id: str, query: str) -> None:
    """The catalog's and the sink's Redis calls of a pipeline, as a user at ``url``, for
    streaming query ``query`` (safe to repeat: a refused run's retry goes on from it)."""
    config = DedupConfig(app_id, RedisConfig(url), num_shards=2)
    catalog = RedisCatalog(config)
    catalog.check_setup()
    claimer = ShardClaimer(config, catalog, FilterCache())
    for batch in range(6):  # past the journal's last four versions: it trims (HSTRLEN)
        claimer.claim(query, batch, 0, [f"a{batch}", "b"], query, now=NOW, strict=True)
        catalog.commit_progress(query, batch)
    assert catalog.knows_query(query)
    catalog.collect_garbage(query, 5)
    store = CheckpointStore(RedisConfig(url), app_id, "main")
    store.check_persistence()
    store.take_lease(query, 30)
    store.join_query(query, "run-1", 0, "topic", "cluster")
    assert store.put_if_absent(query, 0, 1, b"rows")[0] == b"rows"
    assert store.put_if_absent(query, 0, 1, b"other") == (b"rows", False)
    store.record_intent(query, 0, 1)
    store.record_committed(query, 0, 1)
    assert store.read_marker_copy(1, query)[0] == (query, 0)
    store.set_marker_retention(60)
    assert store.marker_retention_ms() == 3_600_000
    store.put_if_absent(query, 1, 1, b"rows")
    store.delete(query, 1, 1)
    store.collect_garbage(query, 1)
    store.release_lease(query)
    catalog.release(query)
    catalog.forget_query(query)


def assert_refused_naming(url: str, app_id: str, query: str, missing: str) -> None:
    """A pipeline's calls as the user at ``url`` (whose line lacks ``missing``) are
    refused in one line that names ``missing`` and the docs, never the password."""
    import pytest

    from dedup import DedupError

    with pytest.raises(DedupError) as caught:
        every_call(url, app_id, query)
    message = str(caught.value)
    assert "\n" not in message, message
    assert missing in message and "docs/operations.md, Redis ACL" in message, message
    assert url.split(":")[2].split("@")[0] not in message  # never the password
