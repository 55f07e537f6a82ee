"""One live writer per sink output: the output's lease, and markers of several queries.

A second query (another checkpoint, so another query id) on the same
(app_id, output.name) would overwrite the first one's batch markers, and the
first one's retry of a batch it had already committed would then produce it
again. The sink keeps a lease per output in its Redis, taken by every write
that produces (after the producer is initialised, so the Kafka producer epoch
fences whoever checked it before a takeover), and a per-query copy of each
partition's committed batch. Writes go through the partition write path
against real Kafka and Redis; the release on a clean stop goes through Spark.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from dedup.constants import RECORD_ID_HEADER
from sinks import ExactlyOnceKafkaForeachBatch, OutputNameInUseError, SinkConfig, transactions
from sinks.admin import prepare
from sinks.checkpoint import CheckpointStore
from sinks.kafka_io import consume_all, ensure_topic
from sinks.records import OutRecord
from sinks.transactions import close_clients, write_partition

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.redis]


@pytest.fixture(autouse=True)
def _close_cached_clients() -> Iterator[None]:
    yield
    close_clients()


@pytest.fixture(autouse=True)
def _refuse_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process, a write refused by another query's lease fails at once (the
    tests that wait for a release set their own patience)."""
    monkeypatch.setattr(transactions, "LEASE_PATIENCE_S", 0.0)


def _records(topic: str, tag: str, n: int = 20) -> list[OutRecord]:
    return [OutRecord(topic, None, f"k-{tag}-{i}".encode(), f"v-{tag}-{i}".encode(), (),
                      f"id-{tag}-{i}".encode()) for i in range(n)]


def _sink(bootstrap: str, redis_url: str, app_id: str, **options: str) -> SinkConfig:
    topic = f"{app_id}-out"
    config = SinkConfig.from_options({"app.id": app_id, "kafka.bootstrap.servers": bootstrap,
                                      "topic": topic, "redis.url": redis_url, **options})
    prepare(config)
    ensure_topic(bootstrap, topic, 1)
    return config


def _output_ids(bootstrap: str, topic: str) -> list[str]:
    return [(r.header(RECORD_ID_HEADER) or b"").decode()
            for r in consume_all(bootstrap, topic, "read_committed")]


def test_a_second_query_on_one_output_is_refused_while_the_first_holds_it(
        kafka_bootstrap: str, redis_url: str, app_id: str) -> None:
    config = _sink(kafka_bootstrap, redis_url, app_id)
    assert config.topic is not None
    write_partition(config, _records(config.topic, "a0"), "query-a", 0, 0)
    with pytest.raises(OutputNameInUseError, match="query-a"):
        write_partition(config, _records(config.topic, "b0"), "query-b", 0, 0)
    # The first query goes on as if nothing happened.
    write_partition(config, _records(config.topic, "a1"), "query-a", 1, 0)
    ids = _output_ids(kafka_bootstrap, config.topic)
    assert not [i for i in ids if i.startswith("id-b0")], "the refused query wrote records"
    assert sorted(ids) == sorted(r.record_id.decode() for tag in ("a0", "a1")
                                 for r in _records(config.topic, tag))


def test_a_write_waits_for_the_lease_of_a_query_that_is_being_released(
        kafka_bootstrap: str, redis_url: str, app_id: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease of a query that stopped is released when the session's listener hears
    the stop; a new query's write meanwhile waits for it (up to LEASE_PATIENCE_S), and
    is refused, saying how long it waited, when the other query keeps it."""
    config = _sink(kafka_bootstrap, redis_url, app_id)
    assert config.topic is not None
    write_partition(config, _records(config.topic, "a0"), "query-a", 0, 0)
    monkeypatch.setattr(transactions, "LEASE_PATIENCE_S", 0.6)
    started = time.monotonic()
    with pytest.raises(OutputNameInUseError, match=r"query-a \(after waiting 0.6 s"):
        write_partition(config, _records(config.topic, "b0"), "query-b", 0, 0)
    assert time.monotonic() - started >= 0.6
    monkeypatch.setattr(transactions, "LEASE_PATIENCE_S", 30.0)
    store = CheckpointStore.for_config(config)
    release = threading.Timer(1.0, store.release_lease, ("query-a",))
    release.start()
    started = time.monotonic()
    try:
        write_partition(config, _records(config.topic, "b0"), "query-b", 0, 0)
    finally:
        release.join()
    assert 1.0 <= time.monotonic() - started < 30.0
    ids = _output_ids(kafka_bootstrap, config.topic)
    assert sorted(ids) == sorted(r.record_id.decode() for tag in ("a0", "b0")
                                 for r in _records(config.topic, tag))


def test_a_retry_after_another_query_wrote_the_output_is_not_produced_again(
        kafka_bootstrap: str, redis_url: str, app_id: str) -> None:
    """Query A committed batch 3 to Kafka, then stopped before Spark's commit; after its
    lease lapsed a new query B wrote (its markers replace A's); A restarted from its
    checkpoint retries batch 3: already in, so it must be skipped."""
    config = _sink(kafka_bootstrap, redis_url, app_id, **{"lease.seconds": "0.3"})
    assert config.topic is not None
    write_partition(config, _records(config.topic, "a3"), "query-a", 3, 0)
    time.sleep(0.5)  # A's lease lapses
    write_partition(config, _records(config.topic, "b0"), "query-b", 0, 0)
    time.sleep(0.5)  # B's too
    retry = write_partition(config, _records(config.topic, "a3"), "query-a", 3, 0)
    ids = _output_ids(kafka_bootstrap, config.topic)
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} records written twice"
    assert len(ids) == 40
    assert retry.skipped


def test_a_retry_after_a_crash_between_commit_and_copy_and_another_querys_write_is_skipped(
        kafka_bootstrap: str, redis_url: str, app_id: str) -> None:
    """As above, but A's worker died between its Kafka commit and the Redis copy of it
    (only A's commit intent is recorded) and B's commit replaced Kafka's marker: the
    output decides, and it shows A's batch 3 is in."""
    config = _sink(kafka_bootstrap, redis_url, app_id, **{"lease.seconds": "0.3"})
    assert config.topic is not None
    write_partition(config, _records(config.topic, "a3"), "query-a", 3, 0)
    store = CheckpointStore.for_config(config)
    store.client.hdel(store.marker_key(0), "committed", "q:query-a")  # the copy never made it
    time.sleep(0.5)
    write_partition(config, _records(config.topic, "b0"), "query-b", 0, 0)
    time.sleep(0.5)
    retry = write_partition(config, _records(config.topic, "a3"), "query-a", 3, 0)
    ids = _output_ids(kafka_bootstrap, config.topic)
    assert len(ids) == len(set(ids)) == 40, f"{len(ids) - len(set(ids))} records written twice"
    assert retry.skipped


def test_a_refused_write_leaves_no_checkpoint_behind(kafka_bootstrap: str, redis_url: str,
                                                     app_id: str) -> None:
    import pyarrow as pa

    from sinks.records import check_schema
    from sinks.writer import write_batches

    config = _sink(kafka_bootstrap, redis_url, app_id)
    schema_batch = pa.RecordBatch.from_pydict({"value": [b"x", b"y"],
                                               "_record_id": ["id-1", "id-2"]})
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    schema = StructType([StructField("value", BinaryType()),
                         StructField("_record_id", StringType())])
    layout = check_schema(schema, config)
    columns = ["value", "_record_id"]
    write_batches(config, layout, columns, [schema_batch], "query-a", 0, 0)
    with pytest.raises(OutputNameInUseError):
        write_batches(config, layout, columns, [schema_batch], "query-b", 0, 0)
    store = CheckpointStore.for_config(config)
    assert store.client.exists(store.key("query-b", 0, 0)) == 0


def _ends_cleanly(query: Any, run: str) -> None:
    """Wait for ``query`` (``availableNow``) to end; it must end without an error."""
    try:
        with contextlib.suppress(StreamingQueryException):  # inspected below
            query.awaitTermination(150)
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, f"{run} query: {query.exception()}"


def test_lease_is_an_option_and_zero_turns_it_off() -> None:
    options = {"app.id": "lease-opt", "kafka.bootstrap.servers": "127.0.0.1:1",
               "redis.url": "redis://127.0.0.1:1/0"}
    assert SinkConfig.from_options(options).lease_seconds == 60.0
    assert SinkConfig.from_options({**options, "lease.seconds": "0"}).lease_seconds == 0
    assert SinkConfig.from_options({**options, "lease.seconds": "2.5"}).lease_seconds == 2.5


@pytest.mark.spark
def test_a_new_query_may_write_the_output_at_once_after_the_old_one_stopped(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_path: Any) -> None:
    """The lease is released when its query terminates (the session's listener), so a
    checkpoint reset after a clean stop is not refused for ``lease.seconds``; the output
    stays exact (the dedup step in front drops what the first query emitted)."""
    from tests.integration.sinks.pipeline import (
        build_stream,
        check_exact,
        fill_input,
        sink_options,
        wait_for,
    )

    topics, expected = fill_input(kafka_bootstrap, app_id, records=40, duplicates=0)
    # One instance for both queries: its release() would free the lease too, and
    # the listener is what is checked here.
    sink = ExactlyOnceKafkaForeachBatch(sink_options(kafka_bootstrap, topics, app_id, redis_url))
    store = CheckpointStore.for_config(sink.config)
    for run in ("first", "second"):
        if run == "second":
            assert wait_for(lambda: store.client.exists(store.lease_key) == 0), \
                "the first query's output lease was not released when it stopped"
            # New input, so that the new query has rows to write.
            _, more = fill_input(kafka_bootstrap, app_id, records=40, duplicates=0,
                                 id_prefix="more")
            expected.update(more)
        query = (build_stream(spark, kafka_bootstrap, topics, app_id, redis_url)
                 .writeStream.foreachBatch(sink)
                 .option("checkpointLocation", str(tmp_path / run))
                 .trigger(availableNow=True).start())
        _ends_cleanly(query, run)
    sink.release()
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok, report.summary()


SLOW_BUS_S = 5.0  # the listener's handling of the first query's end, held this long


@pytest.mark.spark
def test_a_sink_only_query_started_right_after_another_stopped_writes_at_once(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_path: Any) -> None:
    """A script that stops a query and starts another on the same output at once, with
    no dedup operator in front (whose start waits for the session's listener): the
    first query's output lease is released when the listener hears its end, which
    Spark delivers asynchronously, and the second query's first write was refused
    (``OutputNameInUseError`` naming the query that had stopped)."""
    from dedup.gc import session_listener
    from dedup.ids import with_record_id
    from tests.integration.sinks.pipeline import (
        SINK_PARTITIONS,
        check_exact,
        fill_input,
        kafka_stream,
        sink_options,
    )

    first, expected = fill_input(kafka_bootstrap, app_id, records=40, duplicates=0)
    second, more = fill_input(kafka_bootstrap, f"{app_id}-b", records=40, duplicates=0,
                              id_prefix="more")
    expected.update(more)
    options = sink_options(kafka_bootstrap, first, app_id, redis_url)  # both write first.out
    store = CheckpointStore.for_config(SinkConfig.from_options(options))
    for run, topics in (("first", first), ("second", second)):
        df = with_record_id(kafka_stream(spark, kafka_bootstrap, topics.source),
                            strategy="column", column="key")
        query = (df.repartition(SINK_PARTITIONS, "_record_id").writeStream
                 .foreachBatch(ExactlyOnceKafkaForeachBatch(options))  # one per query
                 .option("checkpointLocation", str(tmp_path / run))
                 .trigger(availableNow=True).start())
        if run == "first":
            # A slow listener bus, made certain: the release comes SLOW_BUS_S after the
            # stop (the hold is registered before the first batch registers the release).
            session_listener(spark).on_stop(str(query.id), "slow-bus",
                                            lambda: time.sleep(SLOW_BUS_S))
        _ends_cleanly(query, run)
        if run == "first":
            assert store.client.exists(store.lease_key) == 1, \
                "the first query's lease was released before the second started: no race"
    report = check_exact(kafka_bootstrap, first.out, expected)
    assert report.ok, report.summary()
    # the second query's release too, before this test's Redis goes away
    from dedup.gc import await_stopped_queries

    assert not await_stopped_queries(spark)
