"""Where the set-up step (``dedup/local/setup.sh``) puts what it fetches."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dedup.exceptions import MissingToolError

SETUP_HINT = "run 'bash dedup/local/setup.sh' from the repository root"


def repo_root() -> Path:
    """The repository root (this package is installed in editable mode)."""
    return Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """Folder for jars, service data and stamps; ``DEDUP_CACHE_DIR`` overrides it."""
    return Path(os.environ.get("DEDUP_CACHE_DIR", repo_root() / ".cache"))


def require_program(name: str, fix: str) -> str:
    """Return the absolute path of ``name`` on PATH or raise naming the fix."""
    found = shutil.which(name)
    if found is None:
        raise MissingToolError(f"{name} not found on PATH: {fix}")
    return found


def kafka_broker_jars() -> Path:
    """Folder of the Kafka broker's jars."""
    folder = Path(os.environ.get("DEDUP_KAFKA_JARS", cache_dir() / "jars" / "kafka-broker"))
    if not any(folder.glob("kafka_2.13-*.jar")):
        raise MissingToolError(f"Kafka broker jars not found in {folder}: {SETUP_HINT}")
    return folder


def spark_kafka_connector_jars() -> list[str]:
    """Jars of Spark's Kafka connector that PySpark does not already ship.

    Passing a second copy of a jar PySpark has (hadoop-client, scala-library)
    puts two versions of the same classes on the classpath, so only the ones
    missing from ``pyspark/jars`` are returned.
    """
    import pyspark

    version = pyspark.__version__
    folder = Path(
        os.environ.get("DEDUP_SPARK_KAFKA_JARS", cache_dir() / "jars" / f"spark-kafka-{version}")
    )
    if not any(folder.glob("spark-sql-kafka-0-10_2.13-*.jar")):
        raise MissingToolError(
            f"Spark's Kafka connector for PySpark {version} not found in {folder}: {SETUP_HINT}"
        )
    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(str(p) for p in folder.glob("*.jar") if _artifact(p.name) not in shipped)


def _artifact(jar_name: str) -> str:
    """``kafka-clients-3.9.0.jar`` -> ``kafka-clients``."""
    stem = jar_name.removesuffix(".jar")
    parts = stem.split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)
