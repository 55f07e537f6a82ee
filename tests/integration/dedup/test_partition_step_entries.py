"""The operator step's two entry points (Arrow for PySpark >= 4.1, pandas for 4.0)
decide a partition alike, against the real Redis (no Spark: the step runs here).

Each entry point gets its own app id and the same input batches: in-batch
duplicates, catalog duplicates from an earlier batch, a null ID (dead letter),
late and null event times. Their results must be equal row by row and match
the reference (first occurrence kept, one claim per shard).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dedup import DedupConfig, RedisConfig, RetentionConfig
from dedup.config import InvalidIdPolicy
from dedup.metrics import (
    DUP_CATALOG,
    DUP_IN_BATCH,
    INVALID_ID,
    KEPT,
    LATE,
    LATE_DROPPED,
    RESULT_FIELDS,
    STATUS,
)
from dedup.partition_step import PartitionStep, id_problem_codes

pytestmark = [pytest.mark.integration, pytest.mark.redis]

NUM_SHARDS = 4
HORIZON = 3600


def config(redis_url: str) -> DedupConfig:
    return DedupConfig(f"entries-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url),
                       num_shards=NUM_SHARDS, invalid_ids=InvalidIdPolicy.DEAD_LETTER,
                       retention=RetentionConfig(horizon_seconds=HORIZON, bucket_seconds=600,
                                                 event_time_column="ts"))


def columns(ids: list[str | None], now: float,
            events: list[float | None]) -> tuple[list[Any], ...]:
    shards = [0 if k is None else sum(map(ord, k)) % NUM_SHARDS for k in ids]
    problems = id_problem_codes(ids).tolist()
    return ids, shards, problems, [now] * len(ids), events


def as_pandas(batches: list[tuple[list[Any], ...]]) -> Iterator[tuple[pd.Series, ...]]:
    for ids, shards, problems, times, events in batches:
        yield (pd.Series(ids, dtype=object), pd.Series(shards, dtype="int32"),
               pd.Series(problems, dtype="int8"), pd.Series(times, dtype="float64"),
               pd.Series(events, dtype="float64"))


def as_arrow(batches: list[tuple[list[Any], ...]]) -> Iterator[tuple[pa.Array, ...]]:
    for ids, shards, problems, times, events in batches:
        yield (pa.array(ids, pa.string()), pa.array(shards, pa.int32()),
               pa.array(problems, pa.int8()), pa.array(times, pa.float64()),
               pa.array(events, pa.float64()))


def decide_pandas(step: PartitionStep, batches: list[tuple[list[Any], ...]]) -> pd.DataFrame:
    return pd.concat(list(step(as_pandas(batches))), ignore_index=True)


def decide_arrow(step: PartitionStep, batches: list[tuple[list[Any], ...]]) -> pd.DataFrame:
    out = [chunk.flatten() for chunk in step.arrow(as_arrow(batches))]
    return pd.DataFrame({name: np.concatenate([c[i].to_numpy(zero_copy_only=False)
                                               for c in out])
                         for i, name in enumerate(RESULT_FIELDS)})


def test_arrow_and_pandas_entries_decide_alike(redis_url: str) -> None:
    now = time.time()
    late = now - 2 * HORIZON
    first = [columns([f"id-{i}" for i in range(30)], now, [now] * 30)]
    # two input batches of one partition: repeats within and across them, repeats of
    # the first batch, a null ID, a late event, a null event time
    ids = ["id-3", "new-1", "new-1", None, "new-2", "id-7", "new-3", "new-4", "new-2"]
    events: list[float | None] = [now, now, now, now, late, now, None, now, now]
    second = [columns(ids[:5], now + 1, events[:5]), columns(ids[5:], now + 1, events[5:])]
    results = {}
    for name, decide in (("pandas", decide_pandas), ("arrow", decide_arrow)):
        step = PartitionStep(config(redis_url), uuid.uuid4().hex)
        assert (decide(step, first)[STATUS] == KEPT).all(), name
        results[name] = decide(PartitionStep(step.config, uuid.uuid4().hex), second)
    pd.testing.assert_frame_equal(results["pandas"], results["arrow"], check_dtype=False)
    status = results["arrow"][STATUS].tolist()
    assert status == [DUP_CATALOG, KEPT, DUP_IN_BATCH, INVALID_ID, LATE_DROPPED,
                      DUP_CATALOG, KEPT, KEPT, KEPT]
    assert results["arrow"][LATE].tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 0]


def test_arrow_entry_with_no_rows_yields_nothing(redis_url: str) -> None:
    step = PartitionStep(config(redis_url), uuid.uuid4().hex)
    assert list(step.arrow(as_arrow([columns([], time.time(), [])]))) == []
    assert list(step(as_pandas([columns([], time.time(), [])]))) == []
