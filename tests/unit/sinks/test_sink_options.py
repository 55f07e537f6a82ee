"""Sink option names: Spark's dotted style, one spelling each."""

from __future__ import annotations

import warnings

import pytest

from sinks import ExactlyOnceKafkaForeachBatch, SinkConfig, SinkConfigError

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out",
        "redis.url": "redis://127.0.0.1:6379/0"}

# dotted name -> a value that differs from the default
DOTTED = {
    "app.id": "app-renamed",
    "strong.productions": "false",
    "record.id.column": "rid",
    "dead.letter.topic": "dlq",
    "marker.topic": "markers",
    "redis.require.persistence": "false",
    "fail.points.directory": "/tmp/fp",
}


def _fields(cfg: SinkConfig) -> tuple[object, ...]:
    return (cfg.app_id, cfg.strong_productions, cfg.record_id_column, cfg.dead_letter_topic,
            cfg.marker_topic, cfg.redis.require_persistence if cfg.redis else None,
            cfg.fail_points.directory)


def test_dotted_names_parse() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the names warn about nothing
        cfg = SinkConfig.from_options({**BASE, **DOTTED})
    assert _fields(cfg) == ("app-renamed", False, "rid", "dlq", "markers", False, "/tmp/fp")


def test_names_are_case_insensitive() -> None:
    cfg = SinkConfig.from_options({**BASE, "APP.ID": "a", "Strong.Productions": "false"})
    assert (cfg.app_id, cfg.strong_productions) == ("a", False)


def test_the_snake_case_spellings_of_an_unpublished_release_mean_nothing() -> None:
    """``app_id`` and friends were deprecated before any release was published and are
    gone: the sink ignores unknown options (as Spark's sink does), so the dotted name is
    still missing and its error names it."""
    with pytest.raises(SinkConfigError, match=r"app\.id"):
        SinkConfig.from_options({**BASE, "app_id": "a"})
    cfg = SinkConfig.from_options({**BASE, "app.id": "a", "strong_productions": "false"})
    assert cfg.strong_productions
    sink = ExactlyOnceKafkaForeachBatch({**BASE, "app.id": "a", "query_id": "orders"})
    assert sink.fixed_query_id is None


def test_foreach_batch_query_id_is_dotted() -> None:
    options = {**BASE, "app.id": "app-q"}
    assert ExactlyOnceKafkaForeachBatch({**options, "query.id": "orders"}).fixed_query_id == \
        "orders"


def test_option_errors_use_the_dotted_names() -> None:
    with pytest.raises(SinkConfigError, match=r"app\.id"):
        SinkConfig.from_options(BASE)
    with pytest.raises(SinkConfigError, match=r"strong\.productions"):
        SinkConfig.from_options({**BASE, "app.id": "a", "strong.productions": "maybe"})
    with pytest.raises(SinkConfigError, match=r"strong\.productions=false"):
        SinkConfig.from_options({**BASE, "app.id": "a", "redis.url": ""})


def test_the_old_fail_point_field_name_is_gone() -> None:
    with pytest.raises(TypeError, match="failpoint_dir"):
        SinkConfig(app_id="a", bootstrap_servers="b:1", strong_productions=False,
                   failpoint_dir="/tmp/fp")  # type: ignore[call-arg]


def test_the_sink_speaks_dedup_configs_names_and_units() -> None:
    """``lease.seconds`` and ``fail.points.directory`` are ``DedupConfig``'s
    ``lease_seconds`` and ``fail_points.directory``, same unit and default."""
    from dedup.config import DedupConfig, FailPointConfig

    dedup = DedupConfig(app_id="a")
    cfg = SinkConfig.from_options({**BASE, "app.id": "a"})
    assert cfg.lease_seconds == dedup.lease_seconds
    assert cfg.fail_points == dedup.fail_points == FailPointConfig()
    cfg = SinkConfig.from_options({**BASE, "app.id": "a", "lease.seconds": "0.25",
                                   "fail.points.directory": "/tmp/fp"})
    assert (cfg.lease_seconds, cfg.fail_points.directory) == (0.25, "/tmp/fp")


@pytest.mark.parametrize(("value", "words"), [
    ("soon", r"option lease\.seconds='soon' must be a number of seconds"),
    ("-1", r"option lease\.seconds must be a number of seconds >= 0"),
    ("nan", r"option lease\.seconds must be a number of seconds >= 0"),
])
def test_a_bad_lease_is_refused_naming_the_option(value: str, words: str) -> None:
    with pytest.raises(SinkConfigError, match=words):
        SinkConfig.from_options({**BASE, "app.id": "a", "lease.seconds": value})


def test_one_parser_for_text_settings() -> None:
    from dedup.config import parse_bool, parse_int, parse_seconds
    from dedup.exceptions import ConfigError

    assert [parse_bool("x", v) for v in ("TRUE", " yes", "on", "1", True)] == [True] * 5
    assert [parse_bool("x", v) for v in ("false", "No", "off", "0", False)] == [False] * 5
    assert parse_int("x", " 7 ", minimum=1) == 7
    assert parse_seconds("x", "1.5") == 1.5
    for call in (lambda: parse_bool("x", "maybe"), lambda: parse_int("x", "1.5"),
                 lambda: parse_int("x", "0", minimum=1), lambda: parse_seconds("x", "inf")):
        with pytest.raises(ConfigError, match=r"^x"):
            call()
