"""One pass takes the app id and the Redis from the DedupConfig; a disagreeing option is refused.

Building the front end contacts nothing (the catalog's client opens lazily), so
these need no services.
"""

from __future__ import annotations

import pytest

from dedup.config import DedupConfig, RedisConfig
from sinks import DedupKafkaForeachBatch, SinkConfigError, deduplicate_to_kafka

REDIS = "redis://127.0.0.1:6399/0"
KAFKA = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "unit-one-pass-out"}


def _config(app_id: str = "unit-one-pass") -> DedupConfig:
    return DedupConfig(app_id=app_id, redis=RedisConfig(url=REDIS, failover_wait=3.0,
                                                        require_persistence=False))


def test_the_sink_takes_app_id_and_redis_from_the_dedup_config() -> None:
    config = _config()
    front = DedupKafkaForeachBatch(config, KAFKA)
    assert front.sink.config.app_id == config.app_id
    assert front.sink.config.redis == config.redis  # the whole RedisConfig, not only its url


def test_agreeing_options_are_accepted() -> None:
    config = _config("unit-one-pass-same")
    front = DedupKafkaForeachBatch(config, {**KAFKA, "app.id": config.app_id,
                                            "redis.url": REDIS,
                                            "redis.require.persistence": "false"})
    assert front.sink.config.app_id == config.app_id
    assert front.sink.config.redis == config.redis


def test_a_disagreeing_app_id_is_refused_naming_both() -> None:
    config = _config("unit-one-pass-a")
    with pytest.raises(SinkConfigError, match=r"option app\.id='unit-one-pass-b'.*"
                                              r"DedupConfig\.app_id='unit-one-pass-a'.*"
                                              r"remove option app\.id"):
        deduplicate_to_kafka(None, config, {**KAFKA, "app.id": "unit-one-pass-b"})


def test_a_disagreeing_redis_is_refused_naming_both_without_secrets() -> None:
    config = DedupConfig(app_id="unit-one-pass-r",
                         redis=RedisConfig(url="redis://:s3cret@127.0.0.1:6399/0"))
    other = "redis://:other-secret@127.0.0.1:6399/1"
    with pytest.raises(SinkConfigError, match=r"option redis\.url=.*/1.*"
                                              r"DedupConfig\.redis\.url=.*/0.*"
                                              r"remove option redis\.url") as caught:
        deduplicate_to_kafka(None, config, {**KAFKA, "redis.url": other})
    assert "secret" not in str(caught.value)
    assert "\n" not in str(caught.value)
    with pytest.raises(SinkConfigError, match=r"redis\.require\.persistence"):
        deduplicate_to_kafka(None, config, {**KAFKA, "redis.require.persistence": "false"})
