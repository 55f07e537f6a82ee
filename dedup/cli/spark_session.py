"""A local SparkSession whose JVM logs go to a file, so CLI output stays readable."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

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


def cli_spark_session(log_dir: Path, app_name: str = "dedup", master: str = "local[2]",
                      shuffle_partitions: int = 4, debug: bool = False) -> SparkSession:
    """:func:`dedup.local.local_spark_session` with Spark's log in ``log_dir/spark.log``.

    With ``debug`` the JVM logs to the console as usual.
    """
    from dedup.local.spark import local_spark_session

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
