"""A pipeline run as a Redis ACL user that has exactly the documented line of its app id
(docs/operations.md, "Redis ACL"), on the session's real Redis.

The line is enough: the streaming pipeline (dedup, then the exactly-once Kafka sink with
strong productions, so the sink's Redis keys are used too) writes exactly the expected
output. And each part of it is needed: a user missing one key pattern or one command is
refused in one line that names what to grant, and granting that, as the line says,
lets the same calls through.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from dedup import DedupConfig, DedupError, RedisCatalog, RedisConfig, ShardClaimer
from dedup.bloom import FilterCache
from dedup.keys import ACL_COMMANDS, acl_key_patterns, acl_setuser_line
from sinks.checkpoint import CheckpointStore
from tests.integration.sinks.pipeline import (
    assert_pipeline_exact,
    check_exact,
    fill_input,
    kafka_stream,
    run_available_now,
    sink_options,
)

pytestmark = [pytest.mark.integration, pytest.mark.redis]

NOW = 1_800_000_000.0
# WAIT is sent only to a Redis with replicas (a claim then waits for them): the
# session's Redis has none, so no call here can be refused it.
NOT_SENT_WITHOUT_REPLICAS = ("wait",)

MakeUser = Callable[[str, str], str]


@pytest.fixture
def acl_user(redis_url: str) -> Iterator[MakeUser]:
    """``make(app_id, line)``: run ``line`` (an ``ACL SETUSER`` line) as the default user
    and return the URL that connects as the user it made; every user made is deleted."""
    admin = redis.Redis.from_url(redis_url)
    made: list[str] = []

    def make(app_id: str, line: str) -> str:
        user, password = f"dedup-{app_id}", uuid.uuid4().hex
        words = line.replace("<password>", password).split()
        assert words[:3] == ["ACL", "SETUSER", user], words[:3]
        admin.execute_command(*words)
        made.append(user)
        parts = urlsplit(redis_url)
        return f"redis://{user}:{password}@{parts.hostname}:{parts.port}/0"

    yield make
    for user in made:
        admin.execute_command("ACL", "DELUSER", user)
    admin.close()


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.parametrize("one_pass", [False, True], ids=["two-step", "one-pass"])
def test_a_pipeline_as_an_acl_user_with_the_documented_line_is_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, acl_user: MakeUser, one_pass: bool) -> None:
    """Both library forms (one pass is the one ``dedup run`` uses by default)."""
    url = acl_user(app_id, acl_setuser_line(app_id))
    if not one_pass:
        assert_pipeline_exact(spark, kafka_bootstrap, app_id, url, tmp_checkpoint)
        return
    import sinks
    from dedup import with_record_id
    from sinks import deduplicate_to_kafka

    sinks.register(spark)
    topics, expected = fill_input(kafka_bootstrap, app_id)
    df = with_record_id(kafka_stream(spark, kafka_bootstrap, topics.source),
                        strategy="column", column="key")
    writer = deduplicate_to_kafka(df, DedupConfig(app_id, RedisConfig(url), num_shards=2),
                                  sink_options(kafka_bootstrap, topics, app_id, url))
    query, finished = run_available_now(
        lambda: writer.option("checkpointLocation", tmp_checkpoint)
        .trigger(availableNow=True).start(), 150)
    assert query.exception() is None, query.exception()
    assert finished, "the query did not finish"
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


def _every_call(url: str, app_id: str, query: str) -> None:
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


def _query() -> str:
    return f"q-{uuid.uuid4().hex[:12]}"


def test_the_documented_line_lets_every_call_of_a_pipeline_through(
        redis_url: str, app_id: str, acl_user: MakeUser) -> None:
    redis.Redis.from_url(redis_url).script_flush()  # SCRIPT LOAD is needed, and allowed
    _every_call(acl_user(app_id, acl_setuser_line(app_id)), app_id, _query())


@pytest.mark.parametrize("missing", [
    *(f"~{pattern}" for pattern in acl_key_patterns("APP")),
    *(f"+{command}" for command in ACL_COMMANDS if command not in NOT_SENT_WITHOUT_REPLICAS),
])
def test_a_user_missing_one_part_of_the_line_is_refused_naming_it(
        redis_url: str, missing: str, acl_user: MakeUser) -> None:
    """Each key pattern and each command of the line, left out alone: the first call that
    needs it is refused in one line that names it; granting it, as the line says, lets
    every call through."""
    app_id = f"acl-{uuid.uuid4().hex[:10]}"
    missing = missing.replace("APP", app_id)
    line = acl_setuser_line(app_id)
    assert f" {missing} " in f"{line} "
    url = acl_user(app_id, f"{line} ".replace(f" {missing} ", " ").strip())
    admin = redis.Redis.from_url(redis_url)
    admin.script_flush()  # else another user's SCRIPT LOAD would stand in for this one's
    query = _query()
    with pytest.raises(DedupError) as caught:
        _every_call(url, app_id, query)
    message = str(caught.value)
    assert "\n" not in message, message
    assert missing in message and "docs/operations.md, Redis ACL" in message, message
    assert url.split(":")[2].split("@")[0] not in message  # never the password
    admin.execute_command("ACL", "SETUSER", f"dedup-{app_id}", missing)
    _every_call(url, app_id, query)
    admin.close()
