"""Sink option names: Spark's dotted style, old snake_case spellings deprecated."""

from __future__ import annotations

import dataclasses
import re
import warnings

import pytest

from sinks import ExactlyOnceKafkaForeachBatch, SinkConfig, SinkConfigError

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out",
        "redis.url": "redis://127.0.0.1:6379/0"}

# old spelling -> (dotted name, a value that differs from the default)
RENAMED = {
    "app_id": ("app.id", "app-renamed"),
    "strong_productions": ("strong.productions", "false"),
    "record_id_column": ("record.id.column", "rid"),
    "dead_letter_topic": ("dead.letter.topic", "dlq"),
    "marker_topic": ("marker.topic", "markers"),
    "redis.require_persistence": ("redis.require.persistence", "false"),
    "failpoint.dir": ("fail.point.dir", "/tmp/fp"),
}


def _fields(cfg: SinkConfig) -> tuple[object, ...]:
    return (cfg.app_id, cfg.strong_productions, cfg.record_id_column, cfg.dead_letter_topic,
            cfg.marker_topic, cfg.redis.require_persistence if cfg.redis else None,
            cfg.fail_point_dir)


def test_dotted_names_parse() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names warn about nothing
        cfg = SinkConfig.from_options({**BASE, **{new: value for new, value in RENAMED.values()}})
    assert _fields(cfg) == ("app-renamed", False, "rid", "dlq", "markers", False, "/tmp/fp")


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_each_old_name_still_works_and_warns_once(old: str) -> None:
    new, value = RENAMED[old]
    base = {**BASE, "app.id": "app-1"} if old != "app_id" else dict(BASE)
    with pytest.warns(DeprecationWarning) as caught:
        cfg = SinkConfig.from_options({**base, old: value})
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert messages == [f"sink option {old!r} is deprecated; use {new!r}"]
    assert cfg == SinkConfig.from_options({**base, new: value})


def test_old_names_are_case_insensitive_like_every_option() -> None:
    with pytest.warns(DeprecationWarning, match="'strong_productions' is deprecated"):
        cfg = SinkConfig.from_options({**BASE, "app.id": "a", "STRONG_PRODUCTIONS": "false"})
    assert not cfg.strong_productions


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_both_spellings_with_different_values_are_refused(old: str) -> None:
    new, value = RENAMED[old]
    base = {**BASE, "app.id": "app-1"} if old != "app_id" else dict(BASE)
    both = rf"{re.escape(old)}.*{re.escape(new)}"
    with pytest.warns(DeprecationWarning), pytest.raises(SinkConfigError, match=both):
        SinkConfig.from_options({**base, old: value, new: value + "x"})


def test_both_spellings_with_one_value_are_accepted() -> None:
    with pytest.warns(DeprecationWarning, match="'app_id' is deprecated; use 'app.id'"):
        cfg = SinkConfig.from_options({**BASE, "app_id": "same", "app.id": "same"})
    assert cfg.app_id == "same"


def test_foreach_batch_query_id_is_dotted_and_the_old_name_warns() -> None:
    options = {**BASE, "app.id": "app-q"}
    assert ExactlyOnceKafkaForeachBatch({**options, "query.id": "orders"}).fixed_query_id == \
        "orders"
    with pytest.warns(DeprecationWarning) as caught:
        sink = ExactlyOnceKafkaForeachBatch({**options, "query_id": "orders"})
    assert sink.fixed_query_id == "orders"
    assert [str(w.message) for w in caught] == [
        "sink option 'query_id' is deprecated; use 'query.id'"]
    with pytest.warns(DeprecationWarning), \
            pytest.raises(SinkConfigError, match=r"query_id.*query\.id"):
        ExactlyOnceKafkaForeachBatch({**options, "query_id": "a", "query.id": "b"})


def test_option_errors_use_the_dotted_names() -> None:
    with pytest.raises(SinkConfigError, match=r"app\.id"):
        SinkConfig.from_options(BASE)
    with pytest.raises(SinkConfigError, match=r"strong\.productions"):
        SinkConfig.from_options({**BASE, "app.id": "a", "strong.productions": "maybe"})
    with pytest.raises(SinkConfigError, match=r"strong\.productions=false"):
        SinkConfig.from_options({**BASE, "app.id": "a", "redis.url": ""})


def test_the_old_fail_point_field_name_is_still_accepted() -> None:
    with pytest.warns(DeprecationWarning, match="failpoint_dir.*fail_point_dir"):
        cfg = SinkConfig(app_id="a", bootstrap_servers="b:1", strong_productions=False,
                         failpoint_dir="/tmp/fp")
    assert cfg.fail_point_dir == "/tmp/fp"
    assert cfg == SinkConfig(app_id="a", bootstrap_servers="b:1", strong_productions=False,
                             fail_point_dir="/tmp/fp")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a copy does not re-pass the old name
        assert dataclasses.replace(cfg, fail_point_dir="/z").fail_point_dir == "/z"
    with pytest.warns(DeprecationWarning), pytest.raises(SinkConfigError, match="fail_point_dir"):
        SinkConfig(app_id="a", bootstrap_servers="b:1", strong_productions=False,
                   failpoint_dir="/x", fail_point_dir="/y")
