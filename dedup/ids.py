"""Record IDs: the stable, unique key the dedup operator and the sink rely on.

Five strategies, all computed with Spark's native expressions (no Python UDF):

``column``
    An ID the producer already put in the record (an event UUID). Catches
    every kind of duplicate -- producer retries, source replays, upstream
    re-sends -- as long as the producer reuses the ID on a resend.
``hash``
    128 bits of SHA-256 over chosen columns (``to_json`` of a struct, so
    column boundaries and nulls are unambiguous). Catches any duplicate whose
    chosen columns are byte-identical: producer retries and source replays
    alike. It cannot tell apart two genuinely different records with the same
    content (they collapse into one: choose columns that include a timestamp
    or sequence number), and misses a duplicate whose content changed on the
    resend (a new ingestion timestamp, for instance).
``kafka``
    ``topic/partition/offset`` of a Kafka source record. Catches source
    replays (Spark re-reading the same offsets after a failure or a restart
    from an older checkpoint) but NOT producer retries: a record a producer
    sent twice sits at two offsets and gets two IDs.
``key``
    The Kafka record key (the ``key`` column, as UTF-8 text). Right when
    producers key each event by a unique event id.
``header``
    A Kafka header (the ``headers`` column), by default the one the
    exactly-once sink writes (:data:`dedup.constants.RECORD_ID_HEADER`), so a
    downstream pipeline dedups on the IDs of the upstream one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from dedup.constants import DEFAULT_ID_COLUMN, RECORD_ID_HEADER
from dedup.exceptions import ConfigError, RecordIdError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Strategy = Literal["column", "hash", "kafka", "key", "header"]
STRATEGIES: tuple[str, ...] = ("column", "hash", "kafka", "key", "header")
# Tags (see tag_record_id) an earlier release recorded in Redis for a strategy
# whose tag is now another; recorded tags are compared in today's vocabulary.
_OLD_TAGS: dict[str, str] = {"kafka-key": "key", "coordinates": "kafka", "columns": "hash"}
MAX_ID_LENGTH = 1024
"""Longest accepted record ID, in characters."""
KAFKA_COORDINATE_COLUMNS = ("topic", "partition", "offset")


def strategy_name(strategy: str) -> str:
    """``strategy`` if it names one of :data:`STRATEGIES`. Pure; safe to repeat.

    Raises
    ------
    ConfigError
        Unknown strategy (the message lists the names).
    """
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown record id strategy {strategy!r}; use one of "
                          f"{', '.join(STRATEGIES)}")
    return strategy


def canonical_tag(tag: str) -> str:
    """A strategy tag (as recorded per app id) in today's vocabulary.

    ``kafka-key`` (what the sources wrote for ``key``) becomes ``key``, an old
    strategy name its new one (``columns:a,b`` -> ``hash:a,b``); the part after
    ``:`` (column names, header name) is kept. Pure; safe to repeat.
    """
    head, sep, rest = tag.partition(":")
    return _OLD_TAGS.get(head, head) + sep + rest


def _missing(df: DataFrame, names: Sequence[str], what: str) -> None:
    available = df.columns
    absent = [name for name in names if name not in available]
    if absent:
        raise RecordIdError(
            f"{what}: column(s) {absent} not in the DataFrame; available columns: "
            f"{available}"
        )


def with_record_id(
    df: DataFrame,
    strategy: str = "hash",
    columns: Sequence[str] | None = None,
    column: str | None = None,
    output_column: str = DEFAULT_ID_COLUMN,
    header: str = RECORD_ID_HEADER,
) -> DataFrame:
    """Add a record ID column (string, >= 128 bits for ``hash``) to ``df``.

    Works on batch and streaming DataFrames; it is a pure projection, safe to
    call repeatedly (the same record always gets the same ID).

    Parameters
    ----------
    df:
        Input DataFrame.
    strategy:
        ``"column"``: use the existing ``column`` (cast to string). Catches
        producer retries and source replays if the producer reuses its IDs.
        ``"hash"``: first 32 hex digits (128 bits) of SHA-256 over
        ``to_json(struct(columns))`` (all columns but ``output_column`` when
        ``columns`` is None or empty). Catches byte-identical duplicates,
        whatever their cause; merges different records with identical
        content; misses resends whose content changed.
        ``"kafka"``: ``topic/partition/offset`` of the Kafka source. Catches
        source replays only, never producer retries (a retried send lands at
        a new offset).
        ``"key"``: the ``key`` column as text (Kafka's record key).
        ``"header"``: the first header named ``header`` of the ``headers``
        column (Kafka's ``array<struct<key, value>>``); a record without it
        gets a null ID, which the operator rejects rather than dropping it.
    columns:
        Columns hashed by ``"hash"``.
    column:
        Existing ID column for ``"column"``.
    output_column:
        Name of the ID column written (replaced if present).
    header:
        Header name for ``"header"``.

    Returns
    -------
    DataFrame
        ``df`` plus ``output_column``. Nulls and malformed IDs are rejected
        later by the operator, per batch, with a
        :class:`~dedup.exceptions.RecordIdError`.

    Raises
    ------
    ConfigError
        Unknown strategy or missing argument.
    RecordIdError
        A needed column does not exist (the message lists the available ones).
    """
    from pyspark.sql import functions as sf

    name = strategy_name(strategy)
    if name == "column":
        if not column:
            raise ConfigError("with_record_id(strategy='column') needs column=<existing id column>")
        _missing(df, [column], "with_record_id(strategy='column')")
        return tag_record_id(df, output_column, sf.col(column).cast("string"), f"column:{column}")
    if name == "hash":
        chosen = list(columns) if columns else [c for c in df.columns if c != output_column]
        if not chosen:
            raise ConfigError("with_record_id(strategy='hash') needs at least one column to hash")
        _missing(df, chosen, "with_record_id(strategy='hash')")
        # to_json of a struct keeps field names and nulls, so ("ab", "c") and
        # ("a", "bc") hash differently, unlike a plain concat.
        digest = sf.sha2(sf.to_json(sf.struct(*[sf.col(c) for c in chosen])), 256)
        return tag_record_id(df, output_column, sf.substring(digest, 1, 32),
                             "hash:" + ",".join(chosen))
    if name == "kafka":
        _missing(df, KAFKA_COORDINATE_COLUMNS, "with_record_id(strategy='kafka') (read the "
                 "DataFrame with spark.readStream.format('kafka') and keep these columns)")
        coordinates = sf.concat_ws("/", sf.col("topic"), sf.col("partition").cast("string"),
                                   sf.col("offset").cast("string"))
        return tag_record_id(df, output_column, coordinates, "kafka")
    if name == "key":
        _missing(df, ["key"], "with_record_id(strategy='key') (a Kafka source DataFrame)")
        return tag_record_id(df, output_column, sf.col("key").cast("string"), "key")
    _missing(df, ["headers"], "with_record_id(strategy='header') (a Kafka source DataFrame "
             "read with includeHeaders=true)")
    # headers is array<struct<key: string, value: binary>>; take the first match.
    # try_element_at: no match is a null ID (element_at fails the query in ANSI mode,
    # Spark 4's default, on every restart).
    matching = sf.filter(sf.col("headers"), lambda h: h["key"] == sf.lit(header))
    first = sf.try_element_at(matching, sf.lit(1))
    return tag_record_id(df, output_column, first["value"].cast("string"), f"header:{header}")


ID_STRATEGY_METADATA = "dedup.id_strategy"
"""Column metadata key naming how a record ID column was derived."""


def tag_record_id(df: DataFrame, output_column: str, value: Any, strategy: str) -> DataFrame:
    """``df`` with ``output_column = value``, remembering ``strategy`` in the column's metadata.

    The dedup operator records the strategy per app id on first use and refuses
    a later run whose IDs are derived another way (the same records would get
    new IDs and pass as new). Pure projection; safe to repeat.
    """
    return df.withColumn(output_column,
                         value.alias(output_column, metadata={ID_STRATEGY_METADATA: strategy}))


def record_id_strategy(df: DataFrame, id_column: str) -> str:
    """How ``df[id_column]`` was derived (``""`` when not by this toolkit)."""
    metadata = df.schema[id_column].metadata or {}
    return str(metadata.get(ID_STRATEGY_METADATA, ""))


KAFKA_TOPIC_IDS_METADATA = "dedup.kafka_topic_ids"
"""Column metadata key holding, for coordinate IDs, the Kafka topic ids (JSON) of the
topics the coordinates belong to."""


def tag_kafka_topic_ids(df: DataFrame, id_column: str, topic_ids: Mapping[str, str],
                        ) -> DataFrame:
    """``df`` whose coordinate IDs (strategy ``kafka``) name the topics they belong to.

    A topic deleted and created again, or one of the same name on another Kafka
    cluster, numbers its offsets from 0 again: its records get the coordinates of
    the old topic's records and would be dropped as their duplicates. The dedup
    operator records each topic's id (``topic_ids``: name -> Kafka topic id) per app id
    and refuses another topic under a recorded name. Pure projection; safe to repeat.
    """
    metadata = {ID_STRATEGY_METADATA: "kafka",
                KAFKA_TOPIC_IDS_METADATA: json.dumps(dict(sorted(topic_ids.items())))}
    return df.withColumn(id_column, df[id_column].alias(id_column, metadata=metadata))


def kafka_topic_ids(df: DataFrame, id_column: str) -> dict[str, str]:
    """The topic ids :func:`tag_kafka_topic_ids` put on ``df[id_column]`` ({} if none)."""
    metadata = df.schema[id_column].metadata or {}
    raw = metadata.get(KAFKA_TOPIC_IDS_METADATA)
    return {str(k): str(v) for k, v in json.loads(raw).items()} if raw else {}
