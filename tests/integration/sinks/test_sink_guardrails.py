"""Unsafe settings are refused at start, against the real broker and Redis, with the fix named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sinks
from dedup.exceptions import RedisPermissionError
from dedup.local.services import RedisServer
from sinks import SinkConfig, UnsafeSinkSettingError
from sinks.admin import broker_transaction_max_timeout_ms, check_transaction_timeout
from sinks.checkpoint import CheckpointStore

pytestmark = [pytest.mark.integration]


@pytest.mark.kafka
def test_transaction_timeout_above_broker_max_is_refused(kafka_bootstrap: str,
                                                        app_id: str) -> None:
    limit = broker_transaction_max_timeout_ms({"bootstrap.servers": kafka_bootstrap})
    assert limit is not None and limit > 0
    ok = SinkConfig(app_id=app_id, bootstrap_servers=kafka_bootstrap, strong_productions=False,
                    producer_config={"transaction.timeout.ms": str(limit)})
    check_transaction_timeout(ok)
    too_long = SinkConfig(app_id=app_id, bootstrap_servers=kafka_bootstrap,
                          strong_productions=False,
                          producer_config={"transaction.timeout.ms": str(limit + 1)})
    with pytest.raises(UnsafeSinkSettingError, match=r"transaction\.max\.timeout\.ms"):
        check_transaction_timeout(too_long)


@pytest.mark.kafka
@pytest.mark.spark
def test_query_start_refuses_a_timeout_above_broker_max(spark: Any, kafka_bootstrap: str,
                                                        app_id: str, tmp_checkpoint: str) -> None:
    sinks.register(spark)
    limit = broker_transaction_max_timeout_ms({"bootstrap.servers": kafka_bootstrap})
    assert limit is not None
    df = spark.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS value")
    with pytest.raises(Exception, match=r"transaction\.max\.timeout\.ms") as caught:
        query = (df.writeStream.format("exactly_once_kafka")
                 .option("kafka.bootstrap.servers", kafka_bootstrap).option("topic", "x")
                 .option("app.id", app_id).option("strong.productions", "false")
                 .option("kafka.transaction.timeout.ms", str(limit + 1))
                 .option("checkpointLocation", tmp_checkpoint).start())
        try:
            query.awaitTermination(60)
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
        finally:
            query.stop()
    assert "Lower kafka.transaction.timeout.ms" in str(caught.value)


@pytest.fixture
def redis_without_aof(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis-no-aof", appendonly=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.redis
def test_checkpoint_redis_without_aof_is_refused(redis_without_aof: RedisServer,
                                                 app_id: str) -> None:
    strict = SinkConfig.from_options({"kafka.bootstrap.servers": "127.0.0.1:1", "app.id": app_id,
                                      "redis.url": redis_without_aof.url})
    assert strict.redis is not None
    with pytest.raises(UnsafeSinkSettingError, match="appendonly"):
        CheckpointStore(strict.redis, app_id).check_persistence()
    relaxed = SinkConfig.from_options({"kafka.bootstrap.servers": "127.0.0.1:1",
                                       "app.id": app_id, "redis.url": redis_without_aof.url,
                                       "redis.require.persistence": "false"})
    assert relaxed.redis is not None
    CheckpointStore(relaxed.redis, app_id).check_persistence()


@pytest.mark.redis
def test_checkpoint_redis_refusing_config_get_is_refused(redis_url: str, app_id: str) -> None:
    """A managed Redis that refuses CONFIG GET cannot prove AOF: fail closed, name the opt-out."""
    from urllib.parse import urlsplit

    import redis as redis_py

    admin = redis_py.Redis.from_url(redis_url)
    user, password = f"{app_id}-user", "pw-" + app_id
    admin.acl_setuser(user, enabled=True, passwords=[f"+{password}"], keys=["*"],
                      channels=["*"], commands=["+@all", "-config"])
    try:
        parts = urlsplit(redis_url)
        url = f"redis://{user}:{password}@{parts.hostname}:{parts.port}{parts.path}"
        strict = SinkConfig.from_options({"kafka.bootstrap.servers": "127.0.0.1:1",
                                          "app.id": app_id, "redis.url": url})
        assert strict.redis is not None
        # the user's ACL refuses it: named (+config|get), with the opt-out beside it
        with pytest.raises(RedisPermissionError,
                           match=r"\+config\|get.*redis\.require\.persistence=false") as caught:
            CheckpointStore.for_config(strict).check_persistence()
        assert caught.value.fatal() or not caught.value.retriable()
        relaxed = SinkConfig.from_options({"kafka.bootstrap.servers": "127.0.0.1:1",
                                           "app.id": app_id, "redis.url": url,
                                           "redis.require.persistence": "false"})
        CheckpointStore.for_config(relaxed).check_persistence()
    finally:
        admin.acl_deluser(user)


@pytest.mark.kafka
def test_weak_mode_without_redis_warns_about_marker_retention(
        kafka_bootstrap: str, app_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """Without Redis the batch markers live only in Kafka, which expires them."""
    import logging

    from sinks.admin import prepare

    weak = SinkConfig(app_id=app_id, bootstrap_servers=kafka_bootstrap, strong_productions=False)
    with caplog.at_level(logging.WARNING, logger="sinks.admin"):
        prepare(weak)
    warned = [r.getMessage() for r in caplog.records if "offsets.retention.minutes" in
              r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]
    assert "redis.url" in warned[0]
