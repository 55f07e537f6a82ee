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

import functools
import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple, cast

from dedup.constants import RECORD_ID_HEADER
from sinks.config import SinkConfig
from sinks.exceptions import RecordTooLargeError, SinkRecordError, SinkSchemaError

ERROR_HEADER = "dedup-sink-error"
RECORD_FRAMING_BYTES = 61 + 36
"""A record batch's header (61 bytes) and the most a record's own framing takes (36:
librdkafka's bound of its varints and attributes). With :func:`record_bytes` an upper
bound of both checks a record meets: librdkafka's against the producer's
``message.max.bytes`` when it is produced, and the broker's against the topic's
``max.message.bytes`` (a batch of one record, uncompressed)."""
HEADER_FRAMING_BYTES = 10
"""The two varints of one header, at most."""


class OutRecord(NamedTuple):
    """One Kafka record as the sink will produce it (and checkpoints it)."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    record_id: bytes


_as_record = cast(Callable[[tuple[Any, ...]], OutRecord],
                  functools.partial(tuple.__new__, OutRecord))
"""An :class:`OutRecord` of its six fields as one tuple, made in C: ``OutRecord(...)`` runs
a Python ``__new__`` per record."""


@dataclass(frozen=True)
class InputLayout:
    """Which optional columns the input has (checked once on the driver)."""

    has_key: bool = False
    has_topic: bool = False
    has_partition: bool = False
    has_headers: bool = False
    has_record_id: bool = False


@dataclass(frozen=True)
class SizeLimit:
    """The largest record Kafka takes on one topic, and whose limit that is."""

    topic: str
    topic_bytes: int | None
    """The topic's ``max.message.bytes``; None when unknown (not readable) or not
    checked before sending (a compressing producer: it bounds compressed batches)."""
    producer_bytes: int
    """The producer's ``message.max.bytes`` (option ``kafka.message.max.bytes``)."""

    @property
    def bytes(self) -> int:
        if self.topic_bytes is None:
            return self.producer_bytes
        return min(self.topic_bytes, self.producer_bytes)

    def __str__(self) -> str:
        topic = "unknown" if self.topic_bytes is None else str(self.topic_bytes)
        return f"max.message.bytes {topic}, option kafka.message.max.bytes {self.producer_bytes}"

    def raise_to(self, size: int) -> str:
        """What to raise so that a record of ``size`` bytes fits: '' when it fits."""
        parts = []
        if self.topic_bytes is not None and size > self.topic_bytes:
            parts.append(f"max.message.bytes of topic {self.topic!r} to at least {size} "
                         f"(now {self.topic_bytes})")
        if size > self.producer_bytes:
            parts.append(f"option kafka.message.max.bytes to at least {size} "
                         f"(now {self.producer_bytes})")
        return " and ".join(parts)


TopicLimits = Callable[[str, bool], SizeLimit]
"""``limits(topic, fresh)``: the :class:`SizeLimit` of ``topic``, read again from Kafka
when ``fresh`` (else as known)."""


def _headers_bytes(headers: Iterable[tuple[str, bytes | None]]) -> int:
    return sum(HEADER_FRAMING_BYTES + len(name.encode()) + len(data or b"")
               for name, data in headers)


def record_bytes(key: bytes | None, value: bytes | None,
                 headers: tuple[tuple[str, bytes | None], ...], record_id: bytes) -> int:
    """An upper bound of the bytes Kafka counts for a record (framing included, and the
    record ID header the sink adds), uncompressed. Pure."""
    return (RECORD_FRAMING_BYTES + len(key or b"") + len(value or b"")
            + _headers_bytes(((RECORD_ID_HEADER, record_id), *headers)))


def _longest(column: list[Any]) -> int:
    return max(map(len, filter(None, column)), default=0)


def _batch_bound(values: list[Any], keys: list[Any], ids: list[Any], headers: list[Any],
                 layout: InputLayout) -> int:
    """An upper bound of :func:`record_bytes` over one batch's records (without a record
    ID column, the derived ID's 32 hex digits)."""
    extra = (max((_headers_bytes((str(h["key"]), h["value"]) for h in hdrs)
                  for hdrs in headers if hdrs), default=0) if layout.has_headers else 0)
    return (RECORD_FRAMING_BYTES + _longest(values) + _longest(keys) + extra
            + _headers_bytes([(RECORD_ID_HEADER, None)])
            + (_longest(ids) if layout.has_record_id else 32))


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
               batch_id: int, partition_id: int, limits: TopicLimits | None = None,
               ) -> tuple[list[OutRecord], list[OutRecord]]:
    """Turn Arrow record batches into ``(records, dead_letters)``.

    A record with a null record ID or no topic, or (with ``limits``) larger than its
    topic takes, goes to the dead-letter topic when one is configured, and otherwise
    raises :class:`SinkRecordError` (:class:`RecordTooLargeError`) naming the record,
    the batch and the fix. Nothing is dropped silently. The decision depends on the
    rows, ``config`` and the limits only: every attempt of a batch decides the same
    while the limits stay. A dead letter larger than the dead-letter topic takes
    raises :class:`RecordTooLargeError` too.
    """
    records: list[OutRecord] = []
    dead: list[OutRecord] = []
    known: dict[str, SizeLimit] = {}
    fresh: set[str] = set()

    def limit_of(topic: str, size: int) -> SizeLimit:
        """``topic``'s limit; read again, once per call, before it refuses ``size``."""
        assert limits is not None
        limit = known.get(topic)
        if limit is None:
            limit = known[topic] = limits(topic, False)
        if size > limit.bytes and topic not in fresh:
            fresh.add(topic)  # raised since it was read?
            limit = known[topic] = limits(topic, True)
        return limit

    for batch in batches:
        values = _column(batch, "value", True)
        keys = _column(batch, "key", layout.has_key)
        topics = [t.decode() if t is not None else None
                  for t in _column(batch, "topic", layout.has_topic)]
        parts = _column(batch, "partition", layout.has_partition)
        headers = _column(batch, "headers", layout.has_headers)
        ids = _column(batch, config.record_id_column, layout.has_record_id)
        sized = False  # whether any record of this batch may be too large
        if limits is not None and batch.num_rows:
            # One bound for the batch, so that small records cost no per-record sums.
            bound = _batch_bound(values, keys, ids, headers, layout)
            targets = {t or config.topic for t in topics}
            sized = any(bound > limit_of(t, 0).bytes for t in targets if t is not None)
        if (config.topic is not None and not layout.has_topic and not layout.has_headers
                and layout.has_record_id and not sized and all(ids)):
            # The common batch: every record goes to option topic with its own ID and no
            # header, none too large, so the loop below would find no problem; made
            # without a Python step per record (this function 0.91 -> 0.39 us per record,
            # benchmarks/results/NOTES.md, 2026-12-05). The same records, in order.
            records.extend(map(_as_record, zip(repeat(config.topic), parts, keys, values,
                                               repeat(()), ids)))
            continue
        for value, key, topic, part, hdrs, rid in zip(values, keys, topics, parts, headers,
                                                      ids, strict=True):
            vbytes, kbytes = value, key
            hdr = tuple((str(h["key"]), h["value"]) for h in hdrs) if hdrs else ()
            target = topic or config.topic
            problem = None
            limit = None
            if target is None:
                problem = "column 'topic' is null and option topic is not set"
            if layout.has_record_id:
                rid_bytes = rid
                if not rid_bytes:
                    problem = f"record ID column {config.record_id_column!r} is null or empty"
            else:
                rid_bytes = derive_record_id(target or "", kbytes, vbytes)
            if problem is None and any("\x00" in name for name, _ in hdr):
                # librdkafka takes header names as C strings: it would cut this one off
                # at the NUL and write another record than the input's
                problem = ("a header name holds a NUL character, which the Kafka client "
                           "cuts off")
            size = 0
            if sized and problem is None and target is not None:
                size = record_bytes(kbytes, vbytes, hdr, rid_bytes or b"")
                limit = limit_of(target, size)
                if size > limit.bytes:
                    # No limit in it: the dead letter's size must not change with them.
                    problem = (f"record of {size} bytes is larger than topic {target!r} takes "
                               "(its max.message.bytes, or the producer's message.max.bytes)")
            if problem is None:
                records.append(OutRecord(str(target), part, kbytes, vbytes, hdr,
                                         rid_bytes or b""))
                continue
            where = f"batch {batch_id}, partition {partition_id}"
            # a NUL in a header name written out as \x00, the one way it reaches Kafka
            named = tuple((name.replace("\x00", "\\x00"), value) for name, value in hdr)
            letter = OutRecord(config.dead_letter_topic or "", None, kbytes, vbytes,
                               (*named, (ERROR_HEADER, problem.encode())), rid_bytes or b"")
            if limit is not None:  # too large
                name = (rid_bytes or b"").decode(errors="replace")
                letter_size = record_bytes(kbytes, vbytes, letter.headers, letter.record_id)
                if config.dead_letter_topic is None:
                    raise RecordTooLargeError(
                        f"record {name!r} ({where}) takes {size} bytes, more than topic "
                        f"{target!r} takes ({limit}): raise {limit.raise_to(size)}, or set "
                        "option dead.letter.topic to a topic whose max.message.bytes is at "
                        f"least {letter_size}"
                        + (f" (and option kafka.message.max.bytes to at least {letter_size})"
                           if letter_size > limit.producer_bytes else "")
                        + ", where such records then go"
                    )
            elif config.dead_letter_topic is None:
                raise SinkRecordError(
                    f"{problem} ({where}): fix the input or "
                    "set option dead.letter.topic to route such records there"
                )
            if limits is not None:
                letter_size = record_bytes(kbytes, vbytes, letter.headers, letter.record_id)
                dead_limit = limit_of(letter.topic, letter_size)
                if letter_size > dead_limit.bytes:
                    name = (rid_bytes or b"").decode(errors="replace")
                    raise RecordTooLargeError(
                        f"record {name!r} ({where}) goes to the dead-letter topic "
                        f"{letter.topic!r} ({problem}), which takes less than its "
                        f"{letter_size} bytes: raise {dead_limit.raise_to(letter_size)}"
                    )
            dead.append(letter)
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
