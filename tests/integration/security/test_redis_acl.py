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

import pytest
import redis

from dedup import DedupConfig, DedupError, RedisConfig
from dedup.keys import ACL_COMMANDS, ACL_MIGRATE_COMMANDS, acl_key_patterns, acl_setuser_line
from tests.integration.security.acl import assert_refused_naming, every_call, make_user, new_query
from tests.integration.sinks.pipeline import (
    assert_pipeline_exact,
    check_exact,
    fill_input,
    kafka_stream,
    run_available_now,
    sink_options,
)

pytestmark = [pytest.mark.integration, pytest.mark.redis]

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
        made.append(f"dedup-{app_id}")
        return make_user([admin], redis_url, app_id, line)

    yield make
    for user in made:
        admin.execute_command("ACL", "DELUSER", user)
    admin.close()


@pytest.mark.slow
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


def test_the_documented_line_lets_every_call_of_a_pipeline_through(
        redis_url: str, app_id: str, acl_user: MakeUser) -> None:
    redis.Redis.from_url(redis_url).script_flush()  # SCRIPT LOAD is needed, and allowed
    every_call(acl_user(app_id, acl_setuser_line(app_id)), app_id, new_query())


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
    query = new_query()
    assert_refused_naming(url, app_id, query, missing)
    admin.execute_command("ACL", "SETUSER", f"dedup-{app_id}", missing)
    every_call(url, app_id, query)
    admin.close()


def test_migrate_catalog_as_an_acl_user_needs_the_documented_commands_beyond_the_line(
        redis_url: str, acl_user: MakeUser) -> None:
    """``dedup migrate-catalog`` lists a format-1 catalog's ID sets (SCAN), reads each
    (SSCAN) and carries its expiry over (EXPIRETIME): the line without those is refused
    naming the first; with ``ACL_MIGRATE_COMMANDS`` added the migration completes."""
    import time

    from dedup.migrate import migrate_catalog
    from tests.integration.dedup.test_catalog_migration import _old_catalog

    app_id = f"acl-{uuid.uuid4().hex[:10]}"
    _old_catalog(redis.Redis.from_url(redis_url), app_id, time.time())
    url = acl_user(app_id, acl_setuser_line(app_id))
    config = DedupConfig(app_id, RedisConfig(url, require_persistence=False), num_shards=2)
    with pytest.raises(DedupError, match=r"\+scan to its ACL") as caught:
        migrate_catalog(config)
    assert "\n" not in str(caught.value)
    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("ACL", "SETUSER", f"dedup-{app_id}",
                          *(f"+{command}" for command in ACL_MIGRATE_COMMANDS))
    admin.close()
    report = migrate_catalog(config)
    assert (report.ids, report.decisions) == (6_000, 2)
