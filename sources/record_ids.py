"""Attach record IDs to a source DataFrame by a named strategy.

The strategies of the sources are the core's (:func:`dedup.ids.with_record_id`)
plus two that only make sense for Kafka input:

``coordinates`` (alias ``kafka``)
    ``topic/partition/offset``. Catches source replays, not producer retries.
``key``
    The Kafka record key (as UTF-8 text). Right when producers key each event
    by a unique event id.
``header``
    A Kafka header, by default the one our exactly-once sink writes
    (:data:`dedup.constants.RECORD_ID_HEADER`), so a downstream pipeline
    dedups on the IDs of the upstream one.
``column``
    An existing ID column.
``columns`` (alias ``hash``)
    128 bits of SHA-256 over chosen columns (all when none are named).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dedup.constants import DEFAULT_ID_COLUMN, RECORD_ID_HEADER
from sources.exceptions import SourceConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ID_STRATEGIES = ("coordinates", "key", "header", "column", "columns", "none")
_ALIASES = {"kafka": "coordinates", "hash": "columns"}


def normalize_strategy(strategy: str) -> str:
    """Map aliases to canonical names; raise naming the choices for an unknown one."""
    name = _ALIASES.get(strategy, strategy)
    if name not in ID_STRATEGIES:
        raise SourceConfigError(
            f"unknown id strategy {strategy!r}; use one of {', '.join(ID_STRATEGIES)}"
        )
    return name


def attach_record_id(
    df: DataFrame,
    strategy: str,
    *,
    column: str | None = None,
    columns: Sequence[str] | None = None,
    header: str = RECORD_ID_HEADER,
    output_column: str = DEFAULT_ID_COLUMN,
) -> DataFrame:
    """``df`` plus ``output_column`` holding each record's ID (a pure projection).

    ``key`` and ``header`` need Kafka's ``key`` / ``headers`` columns; a record
    without the header gets a null ID, which the dedup operator rejects with a
    clear error rather than dropping it.
    """
    from pyspark.sql import functions as sf

    from dedup.ids import tag_record_id, with_record_id

    name = normalize_strategy(strategy)
    if name == "none":
        return df
    if name == "coordinates":
        return with_record_id(df, strategy="kafka", output_column=output_column)
    if name == "column":
        if not column:
            raise SourceConfigError("id strategy 'column' needs the name of the ID column")
        return with_record_id(df, strategy="column", column=column, output_column=output_column)
    if name == "columns":
        return with_record_id(df, strategy="hash", columns=list(columns) if columns else None,
                              output_column=output_column)
    if name == "key":
        _require(df, "key", name)
        return tag_record_id(df, output_column, sf.col("key").cast("string"), "kafka-key")
    _require(df, "headers", name)
    # headers is array<struct<key: string, value: binary>>; take the first match.
    matching = sf.filter(sf.col("headers"), lambda h: h["key"] == sf.lit(header))
    return tag_record_id(df, output_column, sf.element_at(matching, 1)["value"].cast("string"),
                         f"header:{header}")


def _require(df: DataFrame, column: str, strategy: str) -> None:
    if column not in df.columns:
        raise SourceConfigError(
            f"id strategy {strategy!r} needs column {column!r} (a Kafka source DataFrame); "
            f"available columns: {df.columns}"
        )
