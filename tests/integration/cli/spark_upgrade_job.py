"""One Spark version's half of ``test_spark_upgrade``, run by that version's Python.

``python -m tests.integration.cli.spark_upgrade_job '<json>'`` from the repository
root, with the other Spark version's virtual environment: ``phase`` "partial" leaves
batch 1 partly committed (as :func:`test_pipeline_key_changes._partial_batch`),
"finish" restarts from the checkpoint, writes more input and runs again
(as :func:`test_pipeline_key_changes._run`). Prints one JSON line: the PySpark
version and the runs' errors ("" for none); the test reads the output itself.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main(argv: list[str]) -> int:
    spec: dict[str, Any] = json.loads(argv[0])
    import pyspark

    from dedup.cli.pipeline import Addresses
    from dedup.local.spark import local_spark_session
    from tests.integration.cli.test_pipeline_key_changes import (
        _more_input,
        _partial_batch,
        _pipeline,
        _run,
    )
    from tests.integration.sinks.pipeline import Topics

    spark = local_spark_session("dedup-spark-upgrade", master="local[2,4]",
                                shuffle_partitions=4)
    topics = Topics(spec["source"], spec["out"])
    addresses = Addresses(spec["redis_url"], spec["kafka"], spec["kafka"])
    pipeline = _pipeline(spec["app_id"], topics)
    errors: list[str] = []
    try:
        if spec["phase"] == "partial":
            _partial_batch(spark, pipeline, addresses, spec["checkpoint"], spec["faults"])
        else:
            errors.append(_run(spark, pipeline, addresses, spec["checkpoint"]))
            expected: dict[str, bytes] = {}
            _more_input(spec["kafka"], topics.source, expected)
            if not errors[-1]:
                errors.append(_run(spark, pipeline, addresses, spec["checkpoint"]))
    finally:
        spark.stop()
    print(json.dumps({"pyspark": pyspark.__version__, "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
