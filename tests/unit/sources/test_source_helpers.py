"""Argument checks of the source helpers that need no SparkSession."""

from __future__ import annotations

from typing import Any

import pytest

from sources import read_files, read_kafka
from sources.exceptions import SourceConfigError


class _NoSpark:
    """Fails the test if a helper touches Spark before checking its arguments."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Spark was used ({name}) before the arguments were checked")


def test_read_kafka_refuses_uncommitted_reads_and_missing_topic() -> None:
    with pytest.raises(SourceConfigError, match="read_committed"):
        read_kafka(_NoSpark(), "127.0.0.1:9092", "t",  # type: ignore[arg-type]
                   options={"kafka.isolation.level": "read_uncommitted"})
    with pytest.raises(SourceConfigError, match="at least one topic"):
        read_kafka(_NoSpark(), "127.0.0.1:9092", " , ")  # type: ignore[arg-type]


def test_read_files_checks() -> None:
    with pytest.raises(SourceConfigError, match="needs a schema"):
        read_files(_NoSpark(), "/tmp/x")  # type: ignore[arg-type]
    with pytest.raises(SourceConfigError, match="unknown file format"):
        read_files(_NoSpark(), "/tmp/x", format="xml", schema="a int")  # type: ignore[arg-type]
    with pytest.raises(SourceConfigError, match="needs a Kafka source"):
        read_files(_NoSpark(), "/tmp/x", schema="a int",  # type: ignore[arg-type]
                   id_strategy="header")
