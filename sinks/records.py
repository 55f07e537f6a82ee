"""The sink's input: schema check on the driver, Arrow batches to Kafka records.

The accepted columns are those of Spark's Kafka sink: ``value`` (string or
binary, required), ``key`` (string or binary), ``topic`` (string),
``partition`` (int), ``headers`` (array of struct<key: string, value:
binary>), plus the record ID column (string or binary). When the record ID
column is absent, the writer derives a 128-bit ID (BLAKE2b-128, hex) from the
record's topic, key and value bytes: equal records then share an ID, which is
right for content-addressed data and wrong when equal payloads are distinct
events (add an ID column with ``dedup.with_record_id`` in that case).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from sinks.config import SinkConfig
from sinks.exceptions import SinkRecordError, SinkSchemaError

ERROR_HEADER = "dedup-sink-error"


class OutRecord(NamedTuple):
    """One Kafka record as the sink will produce it (and checkpoints it)."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    record_id: bytes


@dataclass(frozen=True)
class InputLayout:
    """Which optional columns the input has (checked once on the driver)."""

    has_key: bool = False
    has_topic: bool = False
    has_partition: bool = False
    has_headers: bool = False
    has_record_id: bool = False


def check_schema(schema: Any, config: SinkConfig) -> InputLayout:
    """Check a Spark ``StructType`` against what the sink accepts.

    Raises :class:`SinkSchemaError` naming the column and the fix. Pure.
    """
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructType,
    )

    fields = {f.name: f.dataType for f in schema.fields}

    def need(name: str, allowed: tuple[type, ...], fix: str) -> bool:
        if name not in fields:
            return False
        if not isinstance(fields[name], allowed):
            raise SinkSchemaError(
                f"column {name!r} has type {fields[name].simpleString()}; the sink needs {fix}"
            )
        return True

    if "value" not in fields:
        raise SinkSchemaError(
            "the sink needs a 'value' column (string or binary), like Spark's Kafka sink: "
            "select or alias one, e.g. to_json(struct(*)).alias('value')"
        )
    need("value", (StringType, BinaryType), "string or binary: cast it, e.g. col('value')"
         ".cast('string')")
    has_key = need("key", (StringType, BinaryType), "string or binary: cast it")
    has_topic = need("topic", (StringType,), "string")
    has_partition = need("partition", (IntegerType,), "int: cast it with .cast('int')")
    has_headers = False
    if "headers" in fields:
        htype = fields["headers"]
        ok = (isinstance(htype, ArrayType) and isinstance(htype.elementType, StructType)
              and [f.name for f in htype.elementType.fields] == ["key", "value"]
              and isinstance(htype.elementType.fields[0].dataType, StringType)
              and isinstance(htype.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise SinkSchemaError(
                f"column 'headers' has type {htype.simpleString()}; the sink needs "
                "array<struct<key:string,value:binary>> as Spark's Kafka sink does"
            )
        has_headers = True
    has_id = need(config.record_id_column, (StringType, BinaryType),
                  "string or binary (see dedup.with_record_id)")
    if not has_topic and not config.topic:
        raise SinkSchemaError(
            "no output topic: set option topic, or add a string column 'topic'"
        )
    return InputLayout(has_key, has_topic, has_partition, has_headers, has_id)


def derive_record_id(topic: str, key: bytes | None, value: bytes | None) -> bytes:
    """128-bit content ID (hex) of a record without an ID column."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (topic.encode(), key, value):
        if part is None:
            digest.update(b"\xff\xff\xff\xff")
        else:
            digest.update(len(part).to_bytes(4, "big"))
            digest.update(part)
    return digest.hexdigest().encode()


def _column(batch: Any, name: str, present: bool) -> list[Any]:
    """The column as Python values; strings come out as UTF-8 bytes (cast in Arrow,
    which is much cheaper than encoding value by value)."""
    import pyarrow as pa

    if not present:
        return [None] * batch.num_rows
    index = batch.schema.get_field_index(name)
    if index < 0:  # -1 would silently read the last column
        raise SinkSchemaError(
            f"column {name!r} is missing from a batch the sink received (it has "
            f"{', '.join(batch.schema.names)}); the input layout and the data disagree"
        )
    column = batch.column(index)
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    return list(column.to_pylist())


def to_records(batches: Iterable[Any], config: SinkConfig, layout: InputLayout,
               batch_id: int, partition_id: int) -> tuple[list[OutRecord], list[OutRecord]]:
    """Turn Arrow record batches into ``(records, dead_letters)``.

    A record with a null record ID or no topic goes to the dead-letter topic
    when one is configured, and otherwise raises :class:`SinkRecordError`
    naming the column and batch. Nothing is dropped silently.
    """
    records: list[OutRecord] = []
    dead: list[OutRecord] = []
    for batch in batches:
        values = _column(batch, "value", True)
        keys = _column(batch, "key", layout.has_key)
        topics = [t.decode() if t is not None else None
                  for t in _column(batch, "topic", layout.has_topic)]
        parts = _column(batch, "partition", layout.has_partition)
        headers = _column(batch, "headers", layout.has_headers)
        ids = _column(batch, config.record_id_column, layout.has_record_id)
        for value, key, topic, part, hdrs, rid in zip(values, keys, topics, parts, headers,
                                                      ids, strict=True):
            vbytes, kbytes = value, key
            hdr = tuple((str(h["key"]), h["value"]) for h in hdrs) if hdrs else ()
            target = topic or config.topic
            problem = None
            if target is None:
                problem = "column 'topic' is null and option topic is not set"
            if layout.has_record_id:
                rid_bytes = rid
                if not rid_bytes:
                    problem = f"record ID column {config.record_id_column!r} is null or empty"
            else:
                rid_bytes = derive_record_id(target or "", kbytes, vbytes)
            if problem is None:
                records.append(OutRecord(str(target), part, kbytes, vbytes, hdr,
                                         rid_bytes or b""))
                continue
            if config.dead_letter_topic is None:
                raise SinkRecordError(
                    f"{problem} (batch {batch_id}, partition {partition_id}): fix the input or "
                    "set option dead.letter.topic to route such records there"
                )
            dead.append(OutRecord(config.dead_letter_topic, None, kbytes, vbytes,
                                  (*hdr, (ERROR_HEADER, problem.encode())),
                                  rid_bytes or b""))
    return records, dead


def iter_rows_as_batches(rows: Iterable[Any], columns: list[str]) -> Iterator[Any]:
    """Adapt an iterator of Spark ``Row`` to one Arrow batch (for the Row code path)."""
    import pyarrow as pa

    data: dict[str, list[Any]] = {name: [] for name in columns}
    for row in rows:
        mapping = row.asDict(recursive=True)
        for name in columns:
            data[name].append(mapping.get(name))
    yield pa.RecordBatch.from_pydict(data) if columns else pa.RecordBatch.from_pydict({})
