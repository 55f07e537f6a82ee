"""The Spark version changed while a batch is partly committed (issue 33, the
operational surface's ``Spark version`` row).

Batch 1 of ``dedup run``'s query is left partly committed under one PySpark version
(sink partition 3 checkpointed only, the others committed), the query restarts from
the same checkpoint, Redis and topics under the other version, finishes, reads more
input (new records and re-sent copies) and runs again; an independent
``read_committed`` consumer counts what is lost, duplicated or foreign.

Needs a second PySpark version's virtual environment:
``DEDUP_SPARK_UPGRADE_FROM=<its python>`` (``python -m benchmarks.spark_versions``
sets it up and runs this module with it, recording the result); without it the test
is skipped, and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dedup.cli.pipeline import Addresses
from tests.integration.cli.test_pipeline_key_changes import (
    MORE,
    RECORDS,
    _more_input,
    _partial_batch,
    _pipeline,
    _run,
)
from tests.integration.sinks.pipeline import check_exact, fill_input

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("DEDUP_SPARK_UPGRADE_FROM"),
                                 reason="needs another PySpark version's python in "
                                        "DEDUP_SPARK_UPGRADE_FROM: python -m "
                                        "benchmarks.spark_versions runs it")]

REPO = Path(__file__).resolve().parents[3]


def _other_version(phase: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run one phase under the other version's Python; its report line."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME", "VIRTUAL_ENV")}
    done = subprocess.run(
        [os.environ["DEDUP_SPARK_UPGRADE_FROM"], "-m", "tests.integration.cli.spark_upgrade_job",
         json.dumps({**spec, "phase": phase})],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, f"{phase} under the other version: {done.stderr[-3000:]}"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("direction", ["up", "down"])
def test_a_spark_version_changed_mid_batch_keeps_the_output_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Path, direction: str) -> None:
    """Up: the other (older) version leaves the batch partly committed, this one
    finishes: exact. Down: this version leaves it, and the older one is refused at
    start in one line (Spark promises to resume older checkpoints only; the bare
    ``Cannot invoke "scala.collection.IterableOps.map(...)" because the return value
    of "scala.Option.get()" is null`` that 4.1.1 met here before the refusal is its
    Kafka source's bug SPARK-55271, met by any restart in the middle of a batch on
    4.1.1), writing nothing; as the refusal says, this version again: exact."""
    import pyspark

    topics, expected = fill_input(kafka_bootstrap, app_id, records=RECORDS, duplicates=30)
    addresses = Addresses(redis_url, kafka_bootstrap, kafka_bootstrap)
    faults = str(tmp_path / "f")
    spec = {"app_id": app_id, "source": topics.source, "out": topics.out,
            "kafka": kafka_bootstrap, "redis_url": redis_url, "checkpoint": tmp_checkpoint,
            "faults": faults}
    if direction == "up":
        other = _other_version("partial", spec)
    else:
        _partial_batch(spark, _pipeline(app_id, topics), addresses, tmp_checkpoint, faults)
    partial = check_exact(kafka_bootstrap, topics.out, expected)
    assert partial.lost > 0 and (partial.duplicated, partial.phantoms) == (0, 0), \
        partial.summary()
    if direction == "down":
        other = _other_version("finish", spec)
        for i in range(RECORDS, RECORDS + MORE):  # what the child's _more_input wrote
            expected[f"id-{i:05d}"] = f"value-{i}".encode()
        refusal = other["errors"][0] if other["errors"] else ""
        assert refusal.startswith("SettingChangedError") and \
            f"Spark {pyspark.__version__}" in refusal and "\n" not in refusal, \
            f"PySpark {other['pyspark']} on {pyspark.__version__}'s checkpoint: {refusal!r}"
        after = check_exact(kafka_bootstrap, topics.out, expected)
        assert (after.observed, after.duplicated, after.phantoms) == \
            (partial.observed, 0, 0), after.summary()
    errors = [_run(spark, _pipeline(app_id, topics), addresses, tmp_checkpoint)]
    if direction == "up":
        _more_input(kafka_bootstrap, topics.source, expected)
        if not errors[-1]:
            errors.append(_run(spark, _pipeline(app_id, topics), addresses, tmp_checkpoint))
    assert other["pyspark"] != pyspark.__version__, \
        f"DEDUP_SPARK_UPGRADE_FROM runs this test's own PySpark {pyspark.__version__}"
    assert not any(errors), f"{direction} from PySpark {other['pyspark']}: {errors}"
    final = check_exact(kafka_bootstrap, topics.out, expected)
    assert final.ok and final.open_transactions == 0, \
        f"{direction}, PySpark {other['pyspark']} <-> {pyspark.__version__}: {final.summary()}"
