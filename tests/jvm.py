"""The JIT tier of the suite's JVMs and the drivers' class archive (docs/development.md,
issue 52).

Every JVM the suite starts (a Spark session's, each `dedup run` child's, each user
script's, the Spark Connect server, a standalone cluster's daemons and executors, the
Kafka brokers) lives seconds to minutes, and on two cores the C2 compiler's work for
them is time no test gets: C1 alone cut the CPU of two Spark test files by 23% and of
the three cluster files by 35%, and a broker spent 35-45% of its CPU in C2
(docs/development.md). Only the JIT tier changes, not what runs.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dedup.local.services import child_dies_with_parent, java_binary

C1_ONLY = "-XX:TieredStopAtLevel=1"


def with_c1_jvms(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for a Spark standalone cluster's daemons, whose JVMs then take C1 alone.

    ``SPARK_SUBMIT_OPTS`` (tests/conftest.py) reaches only a driver's JVM; the master,
    the workers and the executors a worker starts (with the worker's environment) read
    ``JAVA_TOOL_OPTIONS``, as every JVM does. The note it prints goes to the daemons' and
    executors' own logs, which no test reads for warnings. A value already set is kept.
    """
    return {"JAVA_TOOL_OPTIONS": C1_ONLY, **environ}


# --- A class-data archive for the drivers' JVMs --------------------------------------
#
# A Spark driver's JVM loads some 10,000 classes from PySpark's jars before its first
# query; read from a dynamic class-data-sharing archive (JDK 13+, JEP 350) they are
# mapped instead of parsed and verified. Measured on the 2-core machine (2026-12-03): a
# session's start and first small query 12.1-13.2 s without, 7.9-8.1 s with. The suite
# starts a driver for each xdist worker, each `dedup run` child, each user script and
# Connect server. The archive is made once per checkout and machine (one JVM run,
# :func:`make_spark_class_archive`), keyed by what it depends on; a JVM that cannot
# use it (another class path) runs without it, silently (``-Xlog:cds...=off``: the
# warning would go to the child's stdout, which tests read).

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE_DIR = ROOT / ".cache" / "jvm"
# The JVM's own note when an archive does not fit (another class path, another JDK).
QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"


@functools.cache
def spark_class_archive() -> Path:
    """Where this checkout keeps the drivers' archive for this JDK, PySpark and Python."""
    import pyspark

    jvm = Path(os.path.realpath(java_binary()))
    jars = Path(pyspark.__file__).parent / "jars"
    parts = [pyspark.__version__, sys.executable, str(jvm), _stamp(jvm)]
    parts += sorted(f"{p.name}:{p.stat().st_size}" for p in jars.glob("*.jar"))
    for libjvm in jvm.parent.parent.glob("lib/server/libjvm.so"):
        parts.append(_stamp(libjvm))
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return ARCHIVE_DIR / f"spark-{key}.jsa"


def _stamp(path: Path) -> str:
    try:
        stat = path.stat()
    except OSError:
        return "-"
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def make_spark_class_archive(timeout: float = 300.0) -> Path | None:
    """Make the drivers' archive (one JVM run, 20-40 s on two cores) unless there is one.

    Safe to repeat and to call from two processes at once: the one that does not get the
    file lock returns None at once (the other one is making it). The archive is written
    under another name and renamed when the JVM has exited, because a JVM that maps a
    half-written archive dies of SIGBUS. None also when the JVM could not make one: the
    suite then runs without it, as before.
    """
    path = spark_class_archive()
    if path.is_file():
        return path
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        if path.is_file():
            return path
        for stale in ARCHIVE_DIR.glob(f"{path.stem}.*.tmp"):  # a maker killed mid-way
            stale.unlink(missing_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        env = {**os.environ, "SPARK_SUBMIT_OPTS":
               f"{C1_ONLY} -XX:ArchiveClassesAtExit={partial} {QUIET_CDS}"}
        try:
            # Output to a pipe read to its end: the JVM, which writes the archive as it
            # exits, holds the pipe after the Python process has ended.
            subprocess.run([sys.executable, "-m", "tests.jvm"], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, check=True, preexec_fn=child_dies_with_parent)
            if partial.is_file() and partial.stat().st_size > 1 << 20:
                os.replace(partial, path)
                return path
        except (subprocess.SubprocessError, OSError):
            pass
        finally:
            partial.unlink(missing_ok=True)
    return None


def spark_class_archive_in_background() -> threading.Thread | None:
    """:func:`make_spark_class_archive` in a daemon thread, if the archive is missing.

    Drivers started before it is there run without it (:func:`driver_options` says
    which to use at each start). The thread lives as long as its child, so the child
    dies with this process (PR_SET_PDEATHSIG follows the forking thread), and the
    child's JVM when its Python ends (PySpark's gateway exits on a closed stdin).
    """
    if spark_class_archive().is_file():
        return None
    thread = threading.Thread(target=make_spark_class_archive, name="class-archive",
                              daemon=True)
    thread.start()
    return thread


def driver_options(options: str = C1_ONLY) -> str:
    """``options`` for a new driver's ``SPARK_SUBMIT_OPTS``, with the archive once it exists."""
    path = spark_class_archive()
    return f"{options} -XX:SharedArchiveFile={path} {QUIET_CDS}" if path.is_file() else options


def _archive_job() -> None:
    """The archive's JVM run: a session as :func:`dedup.local.spark.local_spark_session`
    makes it, then :func:`warm_up`."""
    from dedup.local.spark import local_spark_session

    spark = local_spark_session("dedup-class-archive", master="local[2]")
    try:
        warm_up(spark)
    finally:
        spark.stop()


def warm_up(spark: Any) -> None:
    """What a test's driver does first, run once: a shuffle, an Arrow batch through
    Python, a streaming batch through ``foreachBatch``.

    For the archive, so it holds their classes; for the session of each pytest
    worker, so that its first test does not pay the JVM's and the Python workers'
    first use (15-20 s of a cold worker's first test on two cores, which the record's
    ``SLOW_SECONDS`` check would take for a slow test). Safe to repeat.
    """
    import tempfile

    frame = spark.range(2000).selectExpr("id % 7 AS k", "CAST(id AS STRING) AS v")
    frame.groupBy("k").count().collect()
    frame.mapInArrow(lambda batches: batches, frame.schema).count()
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "in").mkdir()
        (Path(folder) / "in" / "part.json").write_text('{"k": 1, "v": "a"}\n')
        query = (spark.readStream.schema("k INT, v STRING").json(f"{folder}/in")
                 .writeStream.foreachBatch(_count)
                 .option("checkpointLocation", f"{folder}/checkpoint")
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)


def _count(batch: Any, _: int) -> None:
    batch.count()


if __name__ == "__main__":
    _archive_job()
