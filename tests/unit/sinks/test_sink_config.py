"""Sink options, guardrails that need no broker, schema checks, records, picklability."""

from __future__ import annotations

import pickle

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from dedup.constants import DEFAULT_ID_COLUMN
from sinks import (
    CheckpointStateError,
    ExactlyOnceKafkaForeachBatch,
    ExactlyOnceKafkaStreamWriter,
    SinkConfig,
    SinkConfigError,
    SinkRecordError,
    SinkSchemaError,
    UnsafeSinkSettingError,
)
from sinks.checkpoint import CheckpointStore, decode_batches, encode_batches
from sinks.records import OutRecord, check_schema, derive_record_id, to_records

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out", "app.id": "app-1",
        "redis.url": "redis://127.0.0.1:6379/0"}


def config(**extra: str) -> SinkConfig:
    return SinkConfig.from_options({**BASE, **extra})


def test_options_parse_like_spark_kafka_sink() -> None:
    cfg = config(**{"kafka.acks": "all", "kafka.sasl.password": "hunter2",
                    "STRONG.PRODUCTIONS": "false", "checkpointLocation": "/x"})
    assert cfg.producer_config == {"acks": "all", "sasl.password": "hunter2"}
    assert not cfg.strong_productions
    assert cfg.record_id_column == DEFAULT_ID_COLUMN
    assert cfg.transactional_id(3) == "app-1.p3"
    assert cfg.marker_group(3) == "app-1.sink.p3"
    settings = cfg.producer_settings(3)
    assert settings["transactional.id"] == "app-1.p3" and settings["enable.idempotence"]
    # A fast first connection by default (new producers are frequent); the user's wins.
    assert settings["reconnect.backoff.ms"] == 10
    assert config(**{"kafka.reconnect.backoff.ms": "50"}).producer_settings(0)[
        "reconnect.backoff.ms"] == "50"


def test_secrets_never_in_repr() -> None:
    cfg = config(**{"kafka.sasl.password": "hunter2",
                    "redis.url": "redis://u:topsecret@127.0.0.1:6379/0"})
    assert "hunter2" not in repr(cfg) and "topsecret" not in repr(cfg)


@pytest.mark.parametrize(("options", "words"), [
    ({"app.id": ""}, "app.id"),
    ({"app.id": "bad id!"}, "app.id"),
    ({"kafka.bootstrap.servers": ""}, "kafka.bootstrap.servers"),
    ({"redis.url": ""}, "redis.url"),
    ({"strong.productions": "maybe"}, "strong.productions"),
    ({"kafka.key.serializer": "x"}, "kafka.key.serializer"),
    ({"max.batch.duration.seconds": "soon"}, "max.batch.duration.seconds"),
    ({"max.batch.duration.seconds": "0"}, "max.batch.duration.seconds"),
])
def test_bad_options_name_the_option(options: dict[str, str], words: str) -> None:
    with pytest.raises(SinkConfigError, match=words.replace(".", r"\.")):
        SinkConfig.from_options({**BASE, **options})


def test_weak_productions_need_no_redis() -> None:
    cfg = SinkConfig.from_options({**BASE, "redis.url": "", "strong.productions": "false"})
    assert cfg.redis is None


@pytest.mark.parametrize("options", [
    {"kafka.transactional.id": "mine"},
    {"kafka.enable.idempotence": "false"},
    {"kafka.transaction.timeout.ms": "10000", "max.batch.duration.seconds": "30"},
])
def test_unsafe_settings_are_refused_with_the_fix(options: dict[str, str]) -> None:
    with pytest.raises(UnsafeSinkSettingError, match=r"remove|Raise"):
        config(**options)


def _schema(*fields: StructField) -> StructType:
    return StructType(list(fields))


def test_schema_accepts_spark_kafka_sink_columns() -> None:
    headers = ArrayType(StructType([StructField("key", StringType()),
                                    StructField("value", BinaryType())]))
    layout = check_schema(_schema(
        StructField("key", BinaryType()), StructField("value", StringType()),
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("headers", headers), StructField(DEFAULT_ID_COLUMN, StringType())),
        config())
    assert (layout.has_key, layout.has_topic, layout.has_partition, layout.has_headers,
            layout.has_record_id) == (True, True, True, True, True)


@pytest.mark.parametrize(("fields", "column"), [
    ([StructField("key", StringType())], "value"),
    ([StructField("value", LongType())], "value"),
    ([StructField("value", StringType()), StructField("partition", LongType())], "partition"),
    ([StructField("value", StringType()), StructField("headers", StringType())], "headers"),
    ([StructField("value", StringType()), StructField(DEFAULT_ID_COLUMN, LongType())],
     DEFAULT_ID_COLUMN),
])
def test_schema_errors_name_the_column(fields: list[StructField], column: str) -> None:
    with pytest.raises(SinkSchemaError, match=column):
        check_schema(_schema(*fields), config())


def test_no_topic_anywhere_is_refused() -> None:
    cfg = SinkConfig.from_options({k: v for k, v in BASE.items() if k != "topic"})
    with pytest.raises(SinkSchemaError, match="topic"):
        check_schema(_schema(StructField("value", StringType())), cfg)


def _batch(rows: list[dict[str, object]]):  # type: ignore[no-untyped-def]
    import pyarrow as pa

    return pa.RecordBatch.from_pylist(rows)


def test_records_carry_ids_and_derive_128_bit_ids() -> None:
    cfg = config()
    with_id = check_schema(_schema(StructField("value", StringType()),
                                   StructField(DEFAULT_ID_COLUMN, StringType())), cfg)
    records, dead = to_records([_batch([{"value": "a", DEFAULT_ID_COLUMN: "id-1"}])], cfg,
                               with_id, 0, 0)
    assert records == [OutRecord("out", None, None, b"a", (), b"id-1")] and dead == []
    without = check_schema(_schema(StructField("value", StringType())), cfg)
    records, _ = to_records([_batch([{"value": "a"}, {"value": "b"}])], cfg, without, 0, 0)
    assert records[0].record_id == derive_record_id("out", None, b"a")
    assert len(records[0].record_id) == 32 and records[0].record_id != records[1].record_id


def test_null_record_id_fails_or_goes_to_dead_letters() -> None:
    schema = _schema(StructField("value", StringType()),
                     StructField(DEFAULT_ID_COLUMN, StringType()))
    rows = [_batch([{"value": "a", DEFAULT_ID_COLUMN: None}])]
    with pytest.raises(SinkRecordError, match=f"{DEFAULT_ID_COLUMN}.*batch 7"):
        to_records(rows, config(), check_schema(schema, config()), 7, 0)
    dlq = config(**{"dead.letter.topic": "dlq"})
    records, dead = to_records(rows, dlq, check_schema(schema, dlq), 7, 0)
    assert records == [] and [d.topic for d in dead] == ["dlq"]


def test_checkpoint_encoding_round_trips() -> None:
    batches = [_batch([{"value": "a", "_record_id": "id-1"}, {"value": None, "_record_id": "x"}]),
               _batch([{"value": "c", "_record_id": "id-3"}])]
    decoded = decode_batches(encode_batches(batches))
    assert [b.to_pylist() for b in decoded] == [b.to_pylist() for b in batches]
    assert decode_batches(encode_batches([])) == []
    with pytest.raises(CheckpointStateError):
        decode_batches(b"not arrow")


def test_everything_shipped_to_executors_pickles() -> None:
    cfg = config(**{"kafka.sasl.password": "hunter2"})
    layout = check_schema(_schema(StructField("value", StringType())), cfg)
    writer = ExactlyOnceKafkaStreamWriter(cfg, layout, ["value"])
    again = pickle.loads(pickle.dumps(writer))
    assert again.config == cfg and again.layout == layout
    assert pickle.loads(pickle.dumps(CheckpointStore(cfg.redis, "app-1"))).app_id == "app-1"
    sink = ExactlyOnceKafkaForeachBatch(BASE)
    assert pickle.loads(pickle.dumps(sink)).config == sink.config


def test_output_name_gives_each_output_its_own_keys() -> None:
    plain, named = config(), config(**{"output.name": "audit"})
    assert (plain.output_name, plain.transactional_id(2), plain.marker_group(2)) == \
        ("", "app-1.p2", "app-1.sink.p2")
    assert named.transactional_id(2) == "app-1/audit.p2"
    assert named.marker_group(2) == "app-1/audit.sink.p2"
    assert plain.redis is not None
    plain_store = CheckpointStore(plain.redis, "app-1")
    named_store = CheckpointStore(plain.redis, "app-1", "audit")
    assert plain_store.key("q", 3, 1) == "dedup:{app-1:p1}:sink:ckpt:q:3"
    assert named_store.key("q", 3, 1) == "dedup:{app-1/audit:p1}:sink:ckpt:q:3"
    assert named_store.index_key == "dedup:{app-1/audit}:sink:ckpt-index"
    with pytest.raises(SinkConfigError, match=r"output\.name"):
        config(**{"output.name": "a/b"})


def test_two_foreach_batch_sinks_with_one_output_name_are_refused() -> None:
    app = f"app-registry-{id(object())}"
    first = ExactlyOnceKafkaForeachBatch({**BASE, "app.id": app, "output.name": "x"})
    second = ExactlyOnceKafkaForeachBatch({**BASE, "app.id": app, "output.name": "x"})
    other = ExactlyOnceKafkaForeachBatch({**BASE, "app.id": app, "output.name": "y"})
    first.claim_output()
    first.claim_output()  # the same instance again is fine
    other.claim_output()
    with pytest.raises(SinkConfigError, match=r"output\.name") as caught:
        second.claim_output()
    assert caught.value.fatal() and not caught.value.retriable()


def test_writer_receives_arrow_batches_on_every_supported_spark() -> None:
    # Spark's runner hands a writer Arrow record batches only when it is an
    # Arrow writer; otherwise it converts every row to a Row object first.
    import pyspark.sql.datasource as spark_ds

    newer = getattr(spark_ds, "DataSourceStreamArrowWriter", None)
    if newer is not None:  # Spark >= 4.1
        assert issubclass(ExactlyOnceKafkaStreamWriter, newer)
    else:  # Spark 4.0
        assert issubclass(ExactlyOnceKafkaStreamWriter, spark_ds.DataSourceArrowWriter)
    assert issubclass(ExactlyOnceKafkaStreamWriter, spark_ds.DataSourceStreamWriter)
