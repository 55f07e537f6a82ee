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
    "fail.point.dir": "/tmp/fp",
}


def _fields(cfg: SinkConfig) -> tuple[object, ...]:
    return (cfg.app_id, cfg.strong_productions, cfg.record_id_column, cfg.dead_letter_topic,
            cfg.marker_topic, cfg.redis.require_persistence if cfg.redis else None,
            cfg.fail_point_dir)


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
