"""Sources that attach record IDs: Kafka, files, and a replayable synthetic stream.

Importing this package does not import PySpark's data source module; the
Spark-facing pieces load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sources._ids import ID_STRATEGIES
from sources.exceptions import SourceConfigError, SourceError
from sources.files import read_files
from sources.kafka import read_kafka
from sources.synthetic_rows import (
    SCHEMA as SYNTHETIC_SCHEMA,
)
from sources.synthetic_rows import (
    SyntheticOptions,
    duplicate_of,
    expected_output,
    original_of,
    synthetic_rows,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SYNTHETIC_FORMAT = "dedup_synthetic"


def register(spark: SparkSession) -> None:
    """Register the synthetic source (``dedup_synthetic``) with ``spark``. Safe to repeat."""
    from sources.synthetic import register_synthetic

    register_synthetic(spark)


def synthetic_stream(spark: SparkSession, options: SyntheticOptions | None = None,
                     **overrides: Any) -> Any:
    """A streaming DataFrame of synthetic rows; see :mod:`sources.synthetic`."""
    from sources.synthetic import synthetic_stream as _stream

    return _stream(spark, options, **overrides)


__all__ = [
    "ID_STRATEGIES",
    "SYNTHETIC_FORMAT",
    "SYNTHETIC_SCHEMA",
    "SourceConfigError",
    "SourceError",
    "SyntheticOptions",
    "duplicate_of",
    "expected_output",
    "original_of",
    "read_files",
    "read_kafka",
    "register",
    "synthetic_rows",
    "synthetic_stream",
]
