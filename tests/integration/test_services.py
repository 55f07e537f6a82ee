"""The real services the project starts: Redis, Kafka transactions, Spark + Kafka connector."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from confluent_kafka import Producer

from sinks.kafka_io import consume_all, ensure_topic

pytestmark = pytest.mark.integration


@pytest.mark.redis
def test_redis_write_and_read(redis_url: str, app_id: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set(f"{app_id}:greeting", b"hello")
    client.hset(f"{app_id}:h", mapping={"a": 1, "b": 2})
    assert client.get(f"{app_id}:greeting") == b"hello"
    assert client.hgetall(f"{app_id}:h") == {b"a": b"1", b"b": b"2"}
    assert client.config_get("appendonly")["appendonly"] == "yes"


@pytest.mark.redis
def test_a_replica_of_a_local_redis_gets_its_copy_at_once(tmp_path: Path) -> None:
    """Redis' default waits 5 s before the first copy for a replica, for more replicas
    to share it; every test that attaches a replica (failovers, the Redis Cluster's
    start) paid that wait."""
    from dedup.local.services import RedisServer
    from tests.integration.dedup.helpers import replicate

    with RedisServer(tmp_path / "primary") as primary, \
            RedisServer(tmp_path / "replica") as replica:
        redis.Redis.from_url(primary.url).set("k", b"v")
        started = time.monotonic()
        copy = replicate(primary.url, replica.url)
        assert time.monotonic() - started < 2.5
        assert copy.get("k") == b"v"


@pytest.mark.redis
def test_a_local_redis_stopped_while_it_writes_its_first_aof_exits_cleanly(
        tmp_path: Path) -> None:
    """Redis drops a SIGTERM that comes while it writes the AOF that ``CONFIG SET
    appendonly yes`` starts ("Writing initial AOF, can't exit"), and stays up: a stop
    right after following the refusal advice "enable it with `CONFIG SET appendonly
    yes`" waited out its whole timeout and ended in SIGKILL (10 s per such test)."""
    from dedup.local.services import RedisServer

    folder = tmp_path / "redis"
    server = RedisServer(folder, appendonly=False).start()
    try:
        client = redis.Redis.from_url(server.url)
        client.set("k", b"v")
        client.config_set("appendonly", "yes")
        started = time.monotonic()
        server.stop(timeout=30)
        stopped_in = time.monotonic() - started
    finally:
        server.kill()
    assert "ready to exit" in (folder / "redis.log").read_text(), \
        f"redis-server did not shut down cleanly (stop took {stopped_in:.1f} s)"
    with RedisServer(folder, appendonly=True) as again:
        assert redis.Redis.from_url(again.url).get("k") == b"v"


def _transactional_producer(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    return producer


def _commit_then_abort(bootstrap: str, app_id: str, topic: str, committed: list[str],
                       aborted: list[str]) -> None:
    """One committed transaction of ``committed`` values, then an aborted one whose
    records really reach the log (flushed before the abort)."""
    producer = _transactional_producer(bootstrap, f"{app_id}-producer")
    for values, commit in ((committed, True), (aborted, False)):
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(topic, key=f"k{i}".encode(), value=value.encode())
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


@pytest.mark.kafka
def test_kafka_commit_is_visible_and_abort_is_not(kafka_bootstrap: str, app_id: str) -> None:
    topic = f"{app_id}-txn"
    ensure_topic(kafka_bootstrap, topic, partitions=2)
    _commit_then_abort(kafka_bootstrap, app_id, topic, [f"committed-{i}" for i in range(100)],
                       [f"aborted-{i}" for i in range(100)])

    committed = consume_all(kafka_bootstrap, topic, "read_committed")
    values = sorted(r.value.decode() for r in committed if r.value)
    assert values == sorted(f"committed-{i}" for i in range(100))

    uncommitted = consume_all(kafka_bootstrap, topic, "read_uncommitted")
    aborted = [r for r in uncommitted if r.value and r.value.startswith(b"aborted-")]
    assert len(aborted) == 100, "the aborted records must be in the log, just not visible"


@pytest.mark.spark
@pytest.mark.kafka
def test_spark_streaming_reads_through_kafka_connector(
    spark, kafka_bootstrap: str, app_id: str, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    topic = f"{app_id}-in"
    ensure_topic(kafka_bootstrap, topic, partitions=2)
    _commit_then_abort(kafka_bootstrap, app_id, topic, [f"v{i}" for i in range(100)],
                       [f"aborted{i}" for i in range(50)])

    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    table = app_id.replace("-", "_")
    query = (
        stream.selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("memory").queryName(table)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    values = sorted(row.value for row in spark.sql(f"SELECT value FROM {table}").collect())
    assert values == sorted(f"v{i}" for i in range(100))


@pytest.mark.slow
@pytest.mark.spark
def test_python_streaming_data_source_and_writer(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.integration import minimal_datasource as mds

    spark.dataSource.register(mds.CountingSource)
    spark.dataSource.register(mds.FileRowsSink)
    out = tmp_path / "out"
    out.mkdir()
    query = (
        spark.readStream.format("counting_source").option("batches", "3").load()
        .writeStream.format("file_rows_sink").option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(out.glob("commit-*"))) < 3:
        assert query.exception() is None
        time.sleep(0.2)
    query.stop()
    committed = sorted(int(p.name.split("-")[1]) for p in out.glob("commit-*"))
    assert committed[:3] == [0, 1, 2]
    rows = sorted(
        int(line) for p in out.glob("part-*") for line in p.read_text().split() if line
    )
    # three micro-batches of 10 rows, each written once and committed once
    assert rows[:30] == list(range(30))
    batch_ids_seen_in_write = {p.name.split("-")[1] for p in out.glob("part-*")}
    assert {"0", "1", "2"} <= batch_ids_seen_in_write
