"""README, "Bad input gets a clear answer": a non-string ID column fails at start.

A streaming query whose record ID column is not a string is refused when the
pipeline is built, before ``start()``: nothing is claimed or recorded in
Redis, no checkpoint is written, and the error is one line naming the column,
its type and the fix. Following the fix (``with_record_id``, which casts)
gives a query that runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from dedup import DedupConfig, RecordIdError, RedisConfig, deduplicate, with_record_id
from dedup.constants import DEFAULT_ID_COLUMN, KEY_PREFIX

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.redis]


def _keys_of(redis_url: str, app_id: str) -> list[str]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    return sorted(client.scan_iter(match=f"{KEY_PREFIX}:{{{app_id}*"))


@pytest.mark.parametrize("id_type", ["bigint", "binary"])
def test_a_non_string_id_column_is_refused_before_the_query_starts(
        spark: Any, redis_url: str, app_id: str, tmp_path: Path, id_type: str) -> None:
    source = tmp_path / "in"
    source.mkdir()
    rows = [{"n": i % 3, "v": i} for i in range(6)]
    (source / "f0.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    from pyspark.sql import functions as sf

    stream = spark.readStream.schema("n long, v long").json(str(source))
    # (a long cannot be cast to binary directly with ANSI mode on)
    bad = stream.withColumn(DEFAULT_ID_COLUMN, sf.col("n").cast("string").cast(id_type))
    config = DedupConfig(app_id=app_id, redis=RedisConfig(redis_url), num_shards=2)
    active_before = {q.id for q in spark.streams.active}

    with pytest.raises(RecordIdError) as refused:
        deduplicate(bad, config)

    message = str(refused.value)
    assert "\n" not in message, message
    assert f"record id column {DEFAULT_ID_COLUMN!r} has type {id_type}" in message, message
    assert "cast it or use with_record_id(" in message, message
    # Refused on the driver while the plan is built: no query, no claim, no setting
    # recorded for the app id, no checkpoint.
    assert {q.id for q in spark.streams.active} == active_before
    assert _keys_of(redis_url, app_id) == []
    assert not (tmp_path / "ck").exists()

    # The fix the message names works: with_record_id casts the column to a string.
    fixed = deduplicate(with_record_id(stream, strategy="column", column="n"), config)
    got: list[Any] = []
    query = (fixed.writeStream.foreachBatch(lambda df, _: got.extend(df.collect()))
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120), "the fixed query did not finish"
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, str(query.exception())
    assert sorted(r[DEFAULT_ID_COLUMN] for r in got) == ["0", "1", "2"]
