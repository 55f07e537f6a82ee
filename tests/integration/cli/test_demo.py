"""``dedup demo`` end to end, as README's first command runs it (smaller input)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sources.synthetic_rows import SyntheticOptions, expected_output
from tests.integration.cli.jars import jar_env

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.chaos, pytest.mark.slow]

RECORDS, BATCH, SEED, RATE = 12_000, 3_000, 11, 0.25


def _count(label: str, out: str) -> int:
    match = re.search(rf"^\s*{label}\s+(\d+)", out, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{out}"
    return int(match.group(1))


def test_demo_crashes_restarts_and_reports_exactly_once(tmp_path: Path) -> None:
    dedup = Path(sys.executable).with_name("dedup")
    # Its work folder goes to the cache folder (dedup --cache-dir / DEDUP_CACHE_DIR).
    env = {**os.environ, "DEDUP_CACHE_DIR": str(tmp_path / "cache"), **jar_env()}
    work = tmp_path / "work"  # the user's working folder: nothing may land in it
    work.mkdir()
    result = subprocess.run(
        [str(dedup), "demo", "--quiet", "--records", str(RECORDS), "--batch-size", str(BATCH),
         "--seed", str(SEED), "--duplicate-rate", str(RATE)],
        capture_output=True, text=True, timeout=420, env=env, check=False, cwd=work,
    )
    out = result.stdout
    assert result.returncode == 0, f"stdout:\n{out}\nstderr:\n{result.stderr}"
    # The reference is computed here from the input alone, not taken from the demo.
    expected = expected_output(SyntheticOptions(seed=SEED, rows_per_batch=BATCH,
                                                total_rows=RECORDS, duplicate_rate=RATE,
                                                key_skew=1.0, payload_bytes=48))
    assert _count("records in", out) == RECORDS
    assert _count("records out", out) == len(expected)
    assert _count("duplicates dropped", out) == RECORDS - len(expected)
    # counted by the dedup step itself (one pass, the default), not inferred from the output
    assert "(the dedup step's metrics)" in out, out
    assert _count("lost", out) == 0
    assert _count("duplicated", out) == 0
    assert "crash               yes" in out
    assert "OK: exactly once" in out
    assert "[dedup" not in out  # --quiet: no progress lines
    assert "Traceback" not in result.stderr
    # It cleans up after itself: no work folder is left behind.
    assert (tmp_path / "cache" / "demo").is_dir()
    assert not list((tmp_path / "cache" / "demo").glob("dedup-demo-*"))
    # nor anything in the working folder (Spark 4.0.x made artifacts/ there, SPARK-52396)
    assert not sorted(str(p.relative_to(work)) for p in work.rglob("*"))
