"""Hostile sink options (issue 50): ``SinkConfig.from_options`` builds a config or raises
one :class:`~sinks.SinkConfigError` line, and no password shows in either.

The plain tests are examples the fuzzing found; the property runs the generated options
of :func:`benchmarks.fuzz_cases.sink_options`.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from benchmarks.fuzz_cases import PASSWORD, sink_option_problems, sink_options
from sinks import SinkConfig, SinkConfigError

BASE = {"app.id": "fuzz-app", "kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out",
        "redis.url": "redis://127.0.0.1:1/0", "kafka.sasl.password": PASSWORD}


def _refused(options: dict[str, Any]) -> str:
    with pytest.raises(SinkConfigError) as refused:
        SinkConfig.from_options(options)
    message = str(refused.value)
    assert "\n" not in message and PASSWORD not in message, message
    return message


@pytest.mark.parametrize("url", [f"redis//u:{PASSWORD}@h:1/0", f"http:u:{PASSWORD}@h:1",
                                 f"redis://u:{PASSWORD}@[h:1/0"])
def test_a_malformed_redis_url_option_is_refused_without_its_password(url: str) -> None:
    assert "option redis.url" in _refused({**BASE, "redis.url": url})


def test_an_output_name_ending_in_a_newline_is_refused() -> None:
    # the pattern's $ matched before a trailing newline (from_options strips the option,
    # a SinkConfig built in code does not)
    with pytest.raises(SinkConfigError, match=r"output\.name"):
        SinkConfig(app_id="fuzz-app", bootstrap_servers="127.0.0.1:9092",
                   strong_productions=False, output_name="out\n")


def test_an_app_id_ending_in_a_newline_is_refused() -> None:
    assert "app.id" in _refused({**BASE, "app.id": "fuzz-app\n"})


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(sink_options())
def test_any_sink_options_build_or_are_refused_in_one_line(options: dict[Any, Any]) -> None:
    assert sink_option_problems(options) == [], options
