"""Two executor processes (Spark local-cluster) share one Redis: no duplicate gets through.

Each executor keeps its own Bloom filters; shards move between executors from
batch to batch, so a filter is regularly behind the shard version and must
not be trusted (docs/design.md, invariant 3). Runs in a subprocess: one SparkContext
per process.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.dedup.helpers import assert_exact, reference, write_batches

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.redis, pytest.mark.slow]


def test_two_executors_share_one_catalog(redis_url: str, app_id: str, tmp_path: Path) -> None:
    rng = random.Random(7)
    batches = [[(f"id{rng.randrange(500)}", b * 100_000 + i) for i in range(250)]
               for b in range(4)]
    write_batches(tmp_path / "in", batches)
    out = tmp_path / "out.json"
    job = Path(__file__).with_name("multi_executor_job.py")
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": f"{root}:{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, str(job), redis_url, app_id, str(tmp_path / "in"),
         str(tmp_path / "ck"), str(out)],
        env=env, capture_output=True, text=True, timeout=400, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["executors"] == 3, "driver + 2 executors expected"
    assert len(result["pids"]) >= 2, "partitions ran in one process only"
    rows = sorted(result["rows"], key=lambda r: (r["batch"], r["v"]))
    assert_exact([(r["id"], r["v"]) for r in rows], reference(batches))
