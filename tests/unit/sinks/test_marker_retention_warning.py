"""The start warning about batch markers kept only in Kafka names the fix that removes
the risk: a Redis copy needs both ``redis.url`` and strong productions."""

from __future__ import annotations

import logging

import pytest

from sinks.admin import warn_marker_retention
from sinks.config import SinkConfig

REDIS = "redis://127.0.0.1:9/0"


def _warnings(caplog: pytest.LogCaptureFixture, **options: str) -> list[str]:
    config = SinkConfig.from_options({"kafka.bootstrap.servers": "127.0.0.1:9",
                                      "app.id": "marker-retention-warning", **options})
    with caplog.at_level(logging.WARNING, logger="sinks.admin"):
        warn_marker_retention(config, "10080")
    return [r.getMessage() for r in caplog.records if r.name == "sinks.admin"]


def test_weak_productions_with_a_redis_are_told_to_turn_strong_productions_on(
        caplog: pytest.LogCaptureFixture) -> None:
    # redis.url is set: advice to set it would, followed, leave the markers in Kafka only.
    [message] = _warnings(caplog, **{"redis.url": REDIS, "strong.productions": "false"})
    assert "strong.productions=false" in message
    assert "without redis.url" not in message
    assert "strong.productions=true" in message


def test_no_redis_is_told_to_set_redis_url_and_strong_productions(
        caplog: pytest.LogCaptureFixture) -> None:
    # Weak productions are the only form without a Redis: both settings are needed.
    [message] = _warnings(caplog, **{"strong.productions": "false"})
    assert "without redis.url" in message
    assert "Set options redis.url and strong.productions=true" in message


def test_strong_productions_with_a_redis_keep_a_copy_and_are_not_warned(
        caplog: pytest.LogCaptureFixture) -> None:
    assert _warnings(caplog, **{"redis.url": REDIS}) == []
