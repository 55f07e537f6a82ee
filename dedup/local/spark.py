"""A local SparkSession wired for this toolkit (Kafka connector, venv Python)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from dedup.local.paths import spark_kafka_connector_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_spark_session(
    app_name: str = "dedup",
    master: str = "local[2]",
    shuffle_partitions: int = 4,
    conf: dict[str, str] | None = None,
    with_kafka: bool = True,
) -> SparkSession:
    """Create (or return the active) local SparkSession.

    Python workers run this interpreter (``PYSPARK_PYTHON``): a worker on a
    different Python cannot import the toolkit and fails with "Python worker
    failed to connect back". The UI is off and the shuffle partition count is
    small, because the default 200 made stateful queries 6-10x slower on
    2 cores.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.python.worker.faulthandler.enabled", "true")
    )
    if with_kafka:
        builder = builder.config("spark.jars", ",".join(spark_kafka_connector_jars()))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
