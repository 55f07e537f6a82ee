"""A local SparkSession wired for this toolkit (Kafka connector, venv Python), and the
CLI's variant whose JVM logs go to a file so its output stays readable."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dedup.failpoints import ENV_VAR as FAIL_POINT_ENV_VAR
from dedup.local.paths import repo_root, spark_kafka_connector_jars

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


def executor_env(master: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """``spark.executorEnv.*`` settings that give a cluster's executors the driver's view.

    ``local[*]`` runs tasks in the driver's process and ``local-cluster``
    forks executors from it, so both see the driver's environment. A
    standalone worker (``spark://``) launches executors with *its* environment:
    this forwards what the toolkit's Python code needs on the executors, the
    folder that holds it (``PYTHONPATH``, with the driver's own entries) and
    the fail-point folder when one is set. Other masters get nothing.

    Parameters
    ----------
    master:
        The Spark master URL.
    environ:
        The driver's environment (default ``os.environ``).

    Returns
    -------
    dict[str, str]
        Spark settings; pure, safe to call any number of times.
    """
    if not master.startswith("spark://"):
        return {}
    env = os.environ if environ is None else environ
    paths = [str(repo_root()), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    conf = {"spark.executorEnv.PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
    if env.get(FAIL_POINT_ENV_VAR):
        conf[f"spark.executorEnv.{FAIL_POINT_ENV_VAR}"] = env[FAIL_POINT_ENV_VAR]
    return conf


def worker_daemon_conf(master: str, conf: Mapping[str, str]) -> dict[str, str]:
    """The daemon setting :func:`local_spark_session` adds for ``master`` and ``conf``.

    On a local master whose workers run this Python (it has the toolkit), they fork
    from :mod:`dedup.worker_daemon` with their imports done. A worker Python of the
    caller's own choosing (``spark.pyspark.python`` in ``conf``) may lack the
    toolkit: it keeps PySpark's daemon, and the sinks' one-line refusal of it.
    """
    if master.startswith("local") and \
            conf.get("spark.pyspark.python", sys.executable) == sys.executable:
        from dedup.worker_daemon import DAEMON_MODULE

        return {"spark.python.daemon.module": DAEMON_MODULE}
    return {}


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
    2 cores. On a local master the Python workers fork from
    :mod:`dedup.worker_daemon`, with their imports done. On a standalone master
    (``spark://``) the executors get the toolkit's code and fail-point folder
    through :func:`executor_env`; the Kafka connector's jars reach them through
    ``spark.jars`` as everywhere.
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
    for key, value in worker_daemon_conf(master, conf or {}).items():
        builder = builder.config(key, value)
    if with_kafka:
        builder = builder.config("spark.jars", ",".join(spark_kafka_connector_jars()))
    for key, value in {**executor_env(master), **(conf or {})}.items():
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


@contextlib.contextmanager
def no_artifacts_folder_left(folder: Path | None = None) -> Iterator[None]:
    """Remove the ``artifacts/`` folder a Spark 4.0.x session made in ``folder``.

    Spark 4.0's artifact manager makes its root, ``artifacts/spark-<uuid>``, relative to
    the JVM's working folder (4.1 moved it to the temporary folder, SPARK-52396), and only
    the JVM's exit removes the ``spark-*`` part: an empty ``artifacts/`` stays in the
    user's working folder. Wrap a session's life (start to ``stop()``) in this: on exit,
    the ``spark-*`` folders that appeared are removed (what the JVM's exit would do; the
    session is stopped, nothing reads them) and ``artifacts/`` too if it did not exist
    before and is empty then. Anything else in it is left alone. Spark 4.1 and later
    make nothing there, and then this does nothing. Safe to nest and to repeat.

    Parameters
    ----------
    folder:
        The JVM's working folder (default: the current folder, which the JVM that
        PySpark starts inherits).
    """
    root = (folder or Path.cwd()) / "artifacts"
    existed = root.exists()
    before = set(root.glob("spark-*")) if existed else set()
    try:
        yield
    finally:
        for made in set(root.glob("spark-*")) - before:
            shutil.rmtree(made, ignore_errors=True)
        if not existed:
            with contextlib.suppress(OSError):  # not empty, or already gone: leave it
                root.rmdir()
