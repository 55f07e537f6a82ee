"""Hostile pipeline files (issue 50): a file is a valid config or one refusal line.

The plain tests are examples the fuzzing found, each once a traceback, a leaked
password or a value that passed the checks and broke ``dedup run`` later; the
property runs the generated files of :func:`benchmarks.fuzz_cases.pipeline_files`
(``python -m benchmarks.fuzz`` runs thousands).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from benchmarks.fuzz_cases import PASSWORD, pipeline_files, pipeline_problems
from dedup.cli.config_file import parse_pipeline
from dedup.exceptions import ConfigError

HEAD = 'app_id = "fuzz-app"\n'


def _refusal(text: str) -> str:
    with pytest.raises(ConfigError) as refused:
        parse_pipeline(text, "fuzz.toml")
    message = str(refused.value)
    assert "\n" not in message and PASSWORD not in message, message
    return message


def test_a_number_longer_than_python_reads_is_refused_in_one_line() -> None:
    # tomllib's int() raised a bare ValueError advising sys.set_int_max_str_digits()
    message = _refusal(HEAD + "[run]\nmax_seconds = " + "9" * 5000 + "\n")
    assert "number too long" in message


def test_an_integer_beyond_float_range_for_a_float_setting_is_refused() -> None:
    # float(10**400) raised OverflowError
    assert "run.max_seconds" in _refusal(HEAD + "[run]\nmax_seconds = 1" + "0" * 400 + "\n")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_float_setting_that_is_not_finite_is_refused(value: str) -> None:
    # passed the check, then reached Spark as processingTime "nan seconds"
    assert "finite" in _refusal(HEAD + f"[run]\ntrigger_seconds = {value}\n")


def test_a_redis_url_given_as_an_array_is_refused_without_its_password() -> None:
    # the message repeated the value: the URL with its password
    message = _refusal(HEAD + f'[redis]\nurl = ["redis://u:{PASSWORD}@h:1/0"]\n')
    assert "redis.url" in message


def test_a_wrongly_typed_redis_url_string_is_shown_redacted() -> None:
    message = _refusal(HEAD + '[sink]\ntopic = "out"\n'
                       f'[run]\nremote = "http://u:{PASSWORD}@h:1"\n')
    assert "run.remote" in message


def test_a_list_of_topics_that_are_not_strings_is_refused() -> None:
    assert "source.topics" in _refusal(HEAD + "[source]\ntopics = [1, 2]\n")


def test_an_option_value_that_is_an_array_is_refused() -> None:
    # str() made it "[1, 2]", which the Kafka producer then refused at the first batch
    message = _refusal(HEAD + '[sink]\ntopic = "out"\n[sink.options]\n"kafka.acks" = [1, 2]\n')
    assert "sink.options.kafka.acks" in message


def test_an_app_id_ending_in_a_newline_is_refused() -> None:
    # APP_ID_PATTERN's $ matched before a trailing newline: the app id passed
    assert "app_id" in _refusal('app_id = "fuzz-app\\n"\n')


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pipeline_files())
def test_any_pipeline_file_builds_or_is_refused_in_one_line_without_secrets(text: str) -> None:
    assert pipeline_problems(text) == [], text
