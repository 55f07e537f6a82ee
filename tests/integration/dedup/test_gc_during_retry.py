"""README, "Garbage collection": what a batch still being retried needs survives GC.

Decisions of batch ``b`` are deleted once progress for a later batch arrives,
sink checkpoints of batches older than ``b`` when the sink commits ``b``. Here
batch 2 is held twice, each time with its Python worker stopped: once in the
dedup step right after a shard's claim, once in the sink right after a
partition's checkpoint. While it is held, the GC of the committed batches has
run (the listener and the sink's commit of batch 1), and the test runs the
most a legal GC may do (everything before batch 2) on top. Then the worker is
killed and Spark retries the task: the claim must replay its recorded decision
(a lost decision turns the batch's own claims into duplicates: losses), and
the sink must emit its checkpoint (a lost checkpoint lets the retry compute
other values: user code after the shuffle tags each value with the task's
attempt number).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import redis

import sinks
from dedup import DedupConfig, Deduplicator, RedisConfig
from dedup.catalog import decisions_key
from dedup.failpoints import arm, fired
from sinks.checkpoint import CheckpointStore, decode_batches
from sinks.config import SinkConfig
from tests.integration.sinks.pipeline import (
    build_stream,
    check_exact,
    fill_input,
    read_output,
    sink_options,
    wait_for,
)
from tests.integration.spark_tasks import kill_if_still_stopped

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.chaos]

HELD_BATCH = 2
NUM_SHARDS = 2  # build_stream's


def _tag_with_attempt(df: Any) -> Any:
    """User code in the sink's tasks: ``value`` + ``@<attempt number of the task>``."""
    from pyspark import TaskContext
    from pyspark.sql import functions as sf

    # No type hints: with them, Spark tries to read a pandas UDF's eval type (and warns).
    def tag(value):  # type: ignore[no-untyped-def]
        context = TaskContext.get()
        return f"{value}@{context.attemptNumber() if context else -1}"

    return df.withColumn("value", sf.udf(tag, "string").asNondeterministic()("value"))


def _held(faults: str, name: str) -> dict[str, Any]:
    assert wait_for(lambda: any("pid" in f for f in fired(faults, name)), timeout=120), \
        f"fail-point {name} never held batch {HELD_BATCH}"
    [record] = fired(faults, name)
    return record


def _decision_batches(client: Any, app_id: str, query_id: str) -> set[int]:
    prefix = f"{query_id}:"
    return {int(field[len(prefix):]) for shard in range(NUM_SHARDS)
            for field in client.hkeys(decisions_key(app_id, shard)) if field.startswith(prefix)}


def test_a_batch_held_and_retried_replays_after_gc(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str, tmp_checkpoint: str,
        tmp_path: Path) -> None:
    sinks.register(spark)
    faults = str(tmp_path / "faults")
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    topics, first_values = fill_input(kafka_bootstrap, app_id)
    expected = {rid: value + b"@0" for rid, value in first_values.items()}
    arm(faults, "dedup.after_claim", "stop", match={"batch": HELD_BATCH, "shard": 0})
    arm(faults, "sink.after_checkpoint", "stop", match={"batch": HELD_BATCH, "partition": 0})
    options = sink_options(kafka_bootstrap, topics, app_id, redis_url, faults)
    # 264 input records, 100 per trigger: batches 0, 1 and 2 (the held one).
    df = build_stream(spark, kafka_bootstrap, topics, app_id, redis_url, per_trigger=100,
                      transform=_tag_with_attempt, fail_point_dir=faults)
    query = (df.writeStream.format("exactly_once_kafka").options(**options)
             .option("checkpointLocation", tmp_checkpoint)
             .trigger(availableNow=True).start())
    query_id = str(query.id)
    dedup = Deduplicator(DedupConfig(app_id=app_id, redis=RedisConfig(redis_url),
                                     num_shards=NUM_SHARDS), gc_listener=False)
    store = CheckpointStore.for_config(SinkConfig.from_options(options))
    try:
        # 1. The dedup step of batch 2, held after the claim of shard 0.
        claim = _held(faults, "dedup.after_claim")
        # The listener's GC for batch 1's progress (decisions before batch 1) ran...
        assert wait_for(lambda: 0 not in _decision_batches(client, app_id, query_id), 30), \
            _decision_batches(client, app_id, query_id)
        # ...and the most a GC may delete now: everything before batch 2.
        dedup.collect_garbage(query_id, HELD_BATCH)
        assert _decision_batches(client, app_id, query_id) == {HELD_BATCH}
        os.kill(int(claim["pid"]), signal.SIGKILL)

        # 2. The sink of batch 2, held after the checkpoint of partition 0.
        checkpoint = _held(faults, "sink.after_checkpoint")
        # (a client without decode_responses: the checkpoint is Arrow IPC)
        raw = redis.Redis.from_url(redis_url).get(store.key(query_id, HELD_BATCH, 0))
        assert raw is not None, "no checkpoint of the held partition"
        held_values = {row["value"] for batch in decode_batches(raw)
                       for row in batch.to_pylist()}
        assert held_values and all(v.endswith("@0") for v in held_values), held_values
        # The sink's GC at the commit of batch 1 ran (batch 0's checkpoints are
        # gone); then the most a GC may delete now: everything before batch 2.
        assert not [m for m in client.zrangebyscore(store.index_key, 0, 0)
                    if m.startswith(f"{query_id}:")], "the sink's GC of batch 0 did not run"
        store.collect_garbage(query_id, HELD_BATCH)
        assert client.exists(store.key(query_id, HELD_BATCH, 0))
        os.kill(int(checkpoint["pid"]), signal.SIGKILL)
        assert query.awaitTermination(150), "the query did not finish after the kills"
    finally:
        kill_if_still_stopped(fired(faults))
        if query.isActive:
            query.stop()
    assert query.exception() is None, str(query.exception())

    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
    written = {r.value.decode() for r in read_output(kafka_bootstrap, topics.out) if r.value}
    assert held_values <= written, "the retry did not emit the held partition's checkpoint"
