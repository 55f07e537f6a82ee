"""A local SparkSession wired for this toolkit (Kafka connector, venv Python), and the
CLI's variant whose JVM logs go to a file so its output stays readable."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dedup.local.paths import spark_kafka_connector_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d %p %c{{1}}: %m%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = FILE
"""


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


def cli_spark_session(log_dir: Path, app_name: str = "dedup", master: str = "local[2]",
                      shuffle_partitions: int = 4, debug: bool = False) -> SparkSession:
    """:func:`local_spark_session` with Spark's log in ``log_dir/spark.log``.

    With ``debug`` the JVM logs to the console as usual.
    """
    conf: dict[str, str] = {}
    if not debug:
        log_dir.mkdir(parents=True, exist_ok=True)
        props = log_dir / "log4j2.properties"
        props.write_text(_LOG4J2.format(path=log_dir / "spark.log", level="WARN"))
        conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{props}"
    spark = local_spark_session(app_name, master=master, shuffle_partitions=shuffle_partitions,
                                conf=conf)
    spark.sparkContext.setLogLevel("WARN")
    return spark
