"""A class-data-sharing archive for the suite's Spark JVMs (test set-up only).

Every test that starts a Spark JVM (the session's, each ``dedup run`` child's, each
user script's, the Spark Connect server) first loads and verifies some ten thousand
classes from PySpark's jars: about 4 of the 10 CPU seconds of a session's start and
first job on the 2-core machine (docs/development.md). The JDK's dynamic CDS archive
(JEP 350) keeps those classes parsed and verified in one file that each JVM maps
instead. :func:`spark_submit_opts` makes it once per machine and JVM classpath (a
warm-up JVM that starts a session like the suite's and runs the kinds of work the
tests do, dumped at its exit) and returns the options for ``SPARK_SUBMIT_OPTS``.

Only how classes are loaded changes, not what runs. A JVM whose classpath differs
from the warm-up's (another PySpark, an installed wheel's venv) does not use the
archive and says nothing (``-Xlog:cds*=off``: its warning would reach the stderr that
tests read). When the warm-up fails, the suite runs without the archive.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE_DIR = ROOT / ".cache" / "jvm-archive"
# C1 alone: the suite's JVMs live seconds to minutes, and on two cores C2's work for
# them is time no test gets (23% of a run's CPU, docs/development.md).
BASE_OPTS = "-XX:TieredStopAtLevel=1"
WARM_UP_TIMEOUT_S = 300.0


def _classpath_key() -> str:
    """What the archive is valid for: the JDK, PySpark's jars and the Kafka connector's."""
    import pyspark

    from dedup.local.spark import spark_kafka_connector_jars

    digest = hashlib.sha256()
    java = os.environ.get("JAVA_HOME", "") or os.path.realpath(
        subprocess.run(["sh", "-c", "command -v java"], capture_output=True, text=True,
                       check=False).stdout.strip() or "java")
    digest.update(java.encode())
    jars = sorted(Path(pyspark.__file__).parent.joinpath("jars").glob("*.jar"))
    for jar in [*jars, *map(Path, spark_kafka_connector_jars())]:
        stat = jar.stat()
        digest.update(f"{jar}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _warm_up(archive: Path) -> bool:
    """Run the warm-up JVM with the dump option; True when the archive was written."""
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{BASE_OPTS} -XX:ArchiveClassesAtExit={partial}"}
    try:
        done = subprocess.run([sys.executable, "-m", "tests.jvm_archive", "--warm-up"],
                              cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=WARM_UP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False
    pid = next((line.split()[1] for line in done.stdout.splitlines()
                if line.startswith("jvm-pid ")), None)
    if done.returncode != 0 or pid is None:
        return False
    # The JVM dumps at its exit, after Python's: wait for it to finish writing.
    deadline = time.monotonic() + WARM_UP_TIMEOUT_S
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists() or not partial.exists():
        partial.unlink(missing_ok=True)
        return False
    os.replace(partial, archive)
    return True


def spark_submit_opts() -> str:
    """``SPARK_SUBMIT_OPTS`` for the suite: C1 alone, and the archive when there is one.

    Makes the archive first when it is missing (about 20 s, once per machine and
    classpath; other processes wait on a lock rather than make it twice). Safe to
    repeat; never raises: without an archive the JVMs load their classes as usual.
    """
    try:
        ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
        archive = ARCHIVE_DIR / f"spark-{_classpath_key()}.jsa"
        if not archive.exists():
            with open(ARCHIVE_DIR / "lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not archive.exists():
                    _warm_up(archive)
    except Exception:  # an archive is an optimisation, never a failure
        return BASE_OPTS
    if not archive.exists():
        return BASE_OPTS
    return f"{BASE_OPTS} -XX:SharedArchiveFile={archive} -Xlog:cds*=off"


def _warm_up_workload() -> None:
    """Start a session as the suite does and run the kinds of work its tests run."""
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage

    from dedup.local.spark import local_spark_session

    spark = local_spark_session("jvm-archive-warm-up", master="local[2,4]",
                                shuffle_partitions=4)
    jvm: Any = spark.sparkContext._jvm
    print("jvm-pid", jvm.ProcessHandle.current().pid(), flush=True)

    def arrow_pass(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from batches

    class Writer(DataSourceStreamWriter):
        def write(self, iterator):  # type: ignore[no-untyped-def]
            return WriterCommitMessage()

        def commit(self, messages, batchId):  # type: ignore[no-untyped-def]
            pass

        def abort(self, messages, batchId):  # type: ignore[no-untyped-def]
            pass

    class Sink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "jvm_archive_warm_up"

        def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]
            return Writer()

    spark.dataSource.register(Sink)
    frame = spark.range(2000).selectExpr("id % 17 AS k", "CAST(id AS STRING) AS v")
    frame.groupBy("k").count().collect()
    frame.mapInArrow(arrow_pass, frame.schema).repartition(4, "k").collect()
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "in"
        source.mkdir()
        (source / "part.json").write_text("".join(
            f'{{"id": "{i % 50}", "ts": "2026-01-01 00:00:{i % 60:02d}"}}\n' for i in range(200)))
        stream = (spark.readStream.schema("id STRING, ts TIMESTAMP").json(str(source))
                  .withWatermark("ts", "1 minute").dropDuplicatesWithinWatermark(["id"]))
        stream = stream.mapInArrow(arrow_pass, stream.schema)
        for form, writer in (
            ("source", stream.writeStream.format("jvm_archive_warm_up")),
            ("batch", stream.writeStream.foreachBatch(_count)),
        ):
            query = (writer.option("checkpointLocation", f"{folder}/{form}")
                     .trigger(availableNow=True).start())
            query.awaitTermination()
    (spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
     .option("subscribe", "jvm-archive-warm-up").load().selectExpr("CAST(value AS STRING)"))
    spark.stop()


def _count(batch: Any, _batch_id: int) -> None:
    batch.count()


if __name__ == "__main__" and sys.argv[1:] == ["--warm-up"]:
    _warm_up_workload()
