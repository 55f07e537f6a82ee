"""One record-ID vocabulary: the core's names; the sources' old names are gone."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import sources
from dedup.exceptions import ConfigError
from dedup.ids import STRATEGIES, canonical_tag, strategy_name
from sources import read_files, read_kafka
from sources.exceptions import SourceConfigError


class _NoSpark:
    """Fails the test if a helper touches Spark before checking its arguments."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Spark was used ({name}) before the arguments were checked")


def test_one_set_of_names() -> None:
    assert STRATEGIES == ("column", "hash", "kafka", "key", "header")
    assert (*STRATEGIES, "none") == sources.ID_STRATEGIES
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [strategy_name(name) for name in STRATEGIES] == list(STRATEGIES)


@pytest.mark.parametrize("old", ["coordinates", "columns"])
def test_old_names_are_refused(old: str) -> None:
    with pytest.raises(ConfigError, match=rf"unknown record id strategy {old!r}; use one of "
                                          "column, hash, kafka, key, header"):
        strategy_name(old)
    with pytest.raises(SourceConfigError, match=f"unknown record id strategy {old!r}"):
        read_kafka(_NoSpark(), "127.0.0.1:9092", "t", id_strategy=old)  # type: ignore[arg-type]


def test_unknown_name_lists_the_names() -> None:
    with pytest.raises(ConfigError, match=r"unknown record id strategy 'uuid'.*column.*header"):
        strategy_name("uuid")
    with pytest.raises(SourceConfigError, match="unknown record id strategy 'uuid'"):
        read_kafka(_NoSpark(), "127.0.0.1:9092", "t", id_strategy="uuid")  # type: ignore[arg-type]


@pytest.mark.parametrize(("tag", "canonical"), [
    ("kafka-key", "key"),          # what sources wrote for its 'key' strategy
    ("coordinates", "kafka"),
    ("columns:a,b", "hash:a,b"),
    ("kafka", "kafka"),
    ("key", "key"),
    ("hash:a,b", "hash:a,b"),
    ("column:event_id", "column:event_id"),
    ("header:dedup-record-id", "header:dedup-record-id"),
    ("", ""),
])
def test_recorded_tags_compare_in_todays_vocabulary(tag: str, canonical: str) -> None:
    assert canonical_tag(tag) == canonical


def test_files_refuse_kafka_strategies_by_any_name() -> None:
    for name in ("kafka", "key", "header"):
        with pytest.raises(SourceConfigError, match="needs a Kafka source"):
            read_files(_NoSpark(), "/tmp/x", schema="a int",  # type: ignore[arg-type]
                       id_strategy=name)



def test_attach_record_id_is_gone() -> None:
    assert not hasattr(sources, "attach_record_id")
