"""Hostile ``DedupConfig`` and ``RedisConfig`` arguments (issue 50): each builds a config
or is one :class:`~dedup.exceptions.ConfigError` line that shows no password.

The plain tests are examples the fuzzing found (each once a TypeError, ValueError or
AttributeError, or a message or ``repr`` with the password); the properties run the
generated arguments of :mod:`benchmarks.fuzz_cases`.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from benchmarks.fuzz_cases import (
    PASSWORD,
    dedup_config_problems,
    dedup_kwargs,
    redis_config_problems,
    redis_kwargs,
)
from dedup.config import BloomConfig, DedupConfig, RedisConfig, RetentionConfig, redact_url
from dedup.exceptions import ConfigError

FUZZ = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def _refused(build: Any) -> str:
    with pytest.raises(ConfigError) as refused:
        build()
    message = str(refused.value)
    assert "\n" not in message and PASSWORD not in message, message
    return message


@pytest.mark.parametrize("url", [
    f"u:{PASSWORD}@h:1/0",                       # no scheme: urlsplit saw none
    f"redis//u:{PASSWORD}@h:1/0",                # no ':'
    f"http:u:{PASSWORD}@h:1/0",                  # no '//'
    f"redis://u:{PASSWORD}@[h:1/0",              # an unclosed '[': urlsplit's ValueError
    f"redis+cluster://u:{PASSWORD}/x@h:1/0",     # a '/' in the password: node 'u:P4ss..'
    f"redis://h1:1,h2:2/0?password={PASSWORD}",  # the password as a query argument
])
def test_a_malformed_redis_url_is_refused_without_its_password(url: str) -> None:
    assert "redis url" in _refused(lambda: RedisConfig(url=url))


def test_a_password_query_argument_is_redacted_in_repr() -> None:
    config = RedisConfig(url=f"redis://h:1/0?password={PASSWORD}")
    assert PASSWORD not in repr(config)
    assert redact_url(f"redis://u:{PASSWORD}@h:1/0") == "redis://u:***@h:1/0"


@pytest.mark.parametrize("kwargs", [
    {"url": 5}, {"url": None}, {"socket_timeout": "1"}, {"connect_timeout": None},
    {"replica_timeout": [1]}, {"failover_wait": "20"}, {"options": 8},
])
def test_wrongly_typed_redis_arguments_are_refused(kwargs: dict[str, Any]) -> None:
    _refused(lambda: RedisConfig(**kwargs))


@pytest.mark.parametrize("build", [
    lambda: BloomConfig(error_rate="0.1"),  # type: ignore[arg-type]
    lambda: BloomConfig(capacity=None),  # type: ignore[arg-type]
    lambda: RetentionConfig(bucket_seconds="60"),  # type: ignore[arg-type]
    lambda: RetentionConfig(event_time_column=5),  # type: ignore[arg-type]
    lambda: DedupConfig(app_id="a", lease_seconds=None),  # type: ignore[arg-type]
    lambda: DedupConfig(app_id="a", id_column=5),  # type: ignore[arg-type]
    lambda: DedupConfig(app_id="a", invalid_ids=["fail"]),  # type: ignore[arg-type]
    lambda: DedupConfig(app_id="fuzz-app\n"),
])
def test_wrongly_typed_config_arguments_are_refused(build: Any) -> None:
    _refused(build)


@FUZZ
@given(redis_kwargs())
def test_any_redis_arguments_build_or_are_refused_in_one_line(kwargs: dict[str, Any]) -> None:
    assert redis_config_problems(kwargs) == [], kwargs


@FUZZ
@given(dedup_kwargs())
def test_any_dedup_arguments_build_or_are_refused_in_one_line(kwargs: dict[str, Any]) -> None:
    assert dedup_config_problems(kwargs) == [], kwargs
