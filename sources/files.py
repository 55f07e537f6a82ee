"""Read files as a stream (Spark's file source) with record IDs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dedup.constants import DEFAULT_ID_COLUMN
from dedup.ids import with_record_id
from sources._ids import KAFKA_ONLY, source_strategy
from sources.exceptions import SourceConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

FILE_FORMATS = ("json", "parquet", "csv", "text", "orc")


def read_files(
    spark: SparkSession,
    path: str,
    format: str = "json",
    schema: StructType | str | None = None,
    id_strategy: str | None = "hash",
    *,
    id_column: str = DEFAULT_ID_COLUMN,
    key_column: str | None = None,
    columns: Sequence[str] | None = None,
    max_files_per_trigger: int | None = None,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """A streaming DataFrame over the files arriving in ``path``, with a record ID column.

    Parameters
    ----------
    path:
        Folder (or glob) watched by Spark's file source.
    format:
        ``json``, ``parquet``, ``csv``, ``text`` or ``orc``.
    schema:
        Required for streaming reads (a ``StructType`` or a DDL string).
    id_strategy:
        A strategy of :func:`dedup.with_record_id`: ``column`` (``key_column``
        holds the ID) or ``hash`` (of ``columns``, all when None); or
        ``"none"`` / ``None``: no ID column. A file's record read twice (a
        replay) gets the same ID either way.
    max_files_per_trigger:
        Spark's ``maxFilesPerTrigger``.
    options:
        Extra reader options (``header`` for csv, ...).

    Raises
    ------
    SourceConfigError
        Unknown format, missing schema or a Kafka-only strategy.
    """
    strategy = source_strategy(id_strategy, key_column)
    if format not in FILE_FORMATS:
        raise SourceConfigError(
            f"unknown file format {format!r}; use one of {', '.join(FILE_FORMATS)}"
        )
    if schema is None:
        raise SourceConfigError(
            "read_files needs a schema (a DDL string such as 'id string, amount double'): "
            "Spark cannot infer one for a stream"
        )
    if strategy in KAFKA_ONLY:
        raise SourceConfigError(
            f"id strategy {id_strategy!r} needs a Kafka source; for files use "
            "'column' or 'hash'"
        )
    reader = spark.readStream.format(format).schema(schema).options(**dict(options or {}))
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", str(int(max_files_per_trigger)))
    df = reader.load(path)
    if strategy is None:
        return df
    return with_record_id(df, strategy, columns=columns, column=key_column,
                          output_column=id_column)
