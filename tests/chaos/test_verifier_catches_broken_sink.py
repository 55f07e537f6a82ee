"""The chaos checks must fail on a sink that is not exactly-once.

Same pipeline and the same crash (after the Kafka commit, before Spark's
commit) as the chaos suite, once with the real sink (exact) and once with a
copy that ignores its batch marker: the verifier must report the duplicates.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup.failpoints import arm, fired
from sinks.kafka_io import ensure_topic
from sinks.verify import verify_topic

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def _run(spark, fmt: str, app_id: str, bootstrap: str, redis_url: str,  # type: ignore[no-untyped-def]
         tmp_path: Path) -> dict[str, object]:
    from pyspark.sql import functions as sf

    import dedup
    import sinks
    from sources.synthetic import synthetic_stream
    from sources.synthetic_rows import SyntheticOptions, expected_output
    from tests.chaos.broken_sink import BrokenMarkerDataSource

    sinks.register(spark)
    spark.dataSource.register(BrokenMarkerDataSource)
    options = SyntheticOptions(seed=11, rows_per_batch=100, total_rows=400,
                               duplicate_rate=0.2, num_partitions=2)
    topic = f"{app_id}-out"
    ensure_topic(bootstrap, topic, partitions=2)
    fp_dir = tmp_path / f"fp-{fmt}"
    arm(fp_dir, "sink.after_commit", "raise", match={"batch": 1})
    frame = dedup.with_record_id(synthetic_stream(spark, options), "column", column="event_id")
    frame = dedup.deduplicate(frame, dedup.DedupConfig(
        app_id=app_id, redis=dedup.RedisConfig(url=redis_url), num_shards=2))
    query = (
        # One sink partition: the crash must hit a partition that has records
        # (with several, batch 1 may fire on an empty one and prove nothing).
        frame.select(sf.col("key"), sf.col("payload").alias("value"), sf.col("_record_id"))
        .coalesce(1)
        .writeStream.format(fmt)
        .option("app.id", app_id).option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic).option("redis.url", redis_url)
        .option("fail.points.directory", str(fp_dir))
        .option("checkpointLocation", str(tmp_path / f"ckpt-{fmt}"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert fired(fp_dir, "sink.after_commit"), "the crash after the Kafka commit must hit"
    expected = {k: v.encode() for k, v in expected_output(options).items()}
    return verify_topic(bootstrap, topic, expected).as_dict()


def test_real_sink_is_exact_and_broken_sink_is_caught(
    spark, kafka_bootstrap: str, redis_url: str, app_id: str, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    good = _run(spark, "exactly_once_kafka", f"{app_id}-good", kafka_bootstrap, redis_url,
                tmp_path)
    assert good["ok"], good
    broken = _run(spark, "broken_marker_kafka", f"{app_id}-broken", kafka_bootstrap,
                  redis_url, tmp_path)
    assert not broken["ok"]
    assert broken["duplicated"] > 0, broken  # the retry re-emitted a committed partition
    assert broken["lost"] == 0
