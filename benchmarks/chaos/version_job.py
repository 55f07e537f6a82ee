"""One run of an operator sequence under another Spark version (the ``spark_upgrade``
action of :mod:`benchmarks.chaos.sequences`), in that version's Python.

``<root>/.venv-<version>/bin/python -m benchmarks.chaos.version_job '<json>'`` from the
repository root. The JSON gives the pipeline file's text, the Redis URL, the Kafka
bootstrap servers, the checkpoint, the fail-point folder, the shuffle partition count
and, with ``hold``, the fail-point a task of the next batch is held at (its ``point``
and ``batch``; armed by the caller): the query is then stopped while that task is
held, the batch partly committed. Otherwise the query runs over all input offered,
starting once more on Spark 4.1's SPARK-55271 as ``dedup run`` does. Prints one JSON
line: the PySpark version, ``outcome`` ("works", "refused" at start, or "died": the
query failed; the caller tells a named refusal from a transient death or another error
by the first word of ``error``, the most telling line) and ``held``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.chaos.faults import wait_fired
    from benchmarks.chaos.model import _first_line
    from benchmarks.chaos.operational import committed_batches
    from dedup.cli import Addresses, parse_pipeline, start_query
    from dedup.local.spark import local_spark_session
    from dedup.spark_session import is_kafka_replay_bug

    spark = local_spark_session("dedup-seq-version", master="local[2]",
                                shuffle_partitions=int(spec["shuffle"]))
    pipeline = parse_pipeline(spec["pipeline"])
    addresses = Addresses(spec["redis_url"], spec["bootstrap"], spec["bootstrap"])
    fp_dir = Path(spec["fp_dir"])
    hold = spec.get("hold")
    try:
        for attempt in (1, 2):
            try:
                query = start_query(spark, pipeline, addresses, spec["checkpoint"],
                                    str(fp_dir))
            except Exception as exc:  # refused at start: the whole first line (its advice)
                line = f"{type(exc).__name__}: {exc}".splitlines()[0]
                return {"outcome": "refused", "error": line, "held": False}
            try:
                if hold:
                    hit = wait_fired(fp_dir, hold["point"], timeout=120,
                                     stop=lambda q=query: (not q.isActive or committed_batches(
                                         spec["checkpoint"]) > int(hold["batch"])))
                    if hit is None:
                        query.processAllAvailable()  # no rows there: run it out
                        return {"outcome": "works", "error": "", "held": False}
                    time.sleep(4.0)  # the other partitions commit meanwhile
                    return {"outcome": "works", "error": "", "held": True}
                query.processAllAvailable()
                return {"outcome": "works", "error": "", "held": False}
            except Exception as exc:  # the query died: the caller judges the line
                if attempt == 1 and is_kafka_replay_bug(exc):
                    continue  # the replayed batch is committed; the next start goes on
                return {"outcome": "died", "error": _first_line(exc), "held": False}
            finally:
                if query.isActive:
                    query.stop()
        raise AssertionError("unreachable")
    finally:
        spark.stop()


def main(argv: list[str]) -> int:
    import pyspark

    result = _run(json.loads(argv[0]))
    print(json.dumps({"pyspark": pyspark.__version__, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
