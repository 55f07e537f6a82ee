"""Where ``dedup`` keeps what it fetches and the state it writes.

One folder, :func:`cache_dir`, holds the fetched jars, the local services'
data and state file, and the checkpoints and logs of ``dedup run`` and
``dedup demo``. It is never inside the installed package nor the current
folder: ``DEDUP_CACHE_DIR`` (or ``dedup --cache-dir``) when set; else, in a
source checkout, the checkout's ``.cache`` (where ``dedup/local/setup.sh``, the
tests and CI have always kept it); else a per-user folder,
``$XDG_CACHE_HOME/spark-exactly-once-dedup`` (``~/.cache/...`` by default).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dedup.exceptions import MissingToolError

CACHE_ENV_VAR = "DEDUP_CACHE_DIR"
# The distribution's name (pyproject.toml), so the folder says whose it is.
USER_CACHE_NAME = "spark-exactly-once-dedup"
FETCH_COMMAND = "dedup fetch-jars"
SETUP_HINT = f"run '{FETCH_COMMAND}' (it fetches them with Maven)"


def repo_root() -> Path:
    """The folder that holds the ``dedup`` package.

    In a source checkout (editable install) that is the repository root; in an
    installed wheel it is ``site-packages``: never write there, use
    :func:`cache_dir`.
    """
    return Path(__file__).resolve().parents[2]


def source_checkout() -> Path | None:
    """The repository root when this package runs from a source checkout, else None.

    A checkout is recognised by its ``pyproject.toml`` beside the package and
    the set-up script inside it; a wheel installs neither in that place.
    """
    root = repo_root()
    if (root / "pyproject.toml").is_file() and (root / "dedup" / "local" / "setup.sh").is_file():
        return root
    return None


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/spark-exactly-once-dedup``, or ``~/.cache/...`` without it."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / USER_CACHE_NAME


def cache_dir() -> Path:
    """Folder for fetched jars, service data and state, checkpoints and logs.

    Returns
    -------
    Path
        ``DEDUP_CACHE_DIR`` when set (``dedup --cache-dir`` sets it), made
        absolute so a later change of folder does not move it; else the
        checkout's ``.cache`` in a source checkout; else
        :func:`user_cache_dir`. Not created here.
    """
    override = os.environ.get(CACHE_ENV_VAR, "")
    if override:
        return Path(override).expanduser().absolute()
    checkout = source_checkout()
    if checkout is not None:
        return checkout / ".cache"
    return user_cache_dir()


def set_cache_dir(path: str | os.PathLike[str]) -> Path:
    """Make ``path`` the cache folder of this process and of the processes it starts.

    Sets ``DEDUP_CACHE_DIR`` (absolute), which :func:`cache_dir` reads; the
    local services and Spark that ``dedup`` starts inherit it.
    """
    folder = Path(path).expanduser().absolute()
    os.environ[CACHE_ENV_VAR] = str(folder)
    return folder


def require_program(name: str, fix: str) -> str:
    """Return the absolute path of ``name`` on PATH or raise naming the fix."""
    found = shutil.which(name)
    if found is None:
        raise MissingToolError(f"{name} not found on PATH: {fix}")
    return found


def broker_jar_dir() -> Path:
    """Where the Kafka broker's jars are (``DEDUP_KAFKA_JARS`` overrides), fetched or not."""
    return Path(os.environ.get("DEDUP_KAFKA_JARS", cache_dir() / "jars" / "kafka-broker"))


def connector_jar_dir(spark_version: str) -> Path:
    """Where Spark's Kafka connector for ``spark_version`` is (``DEDUP_SPARK_KAFKA_JARS``
    overrides), fetched or not."""
    return Path(os.environ.get("DEDUP_SPARK_KAFKA_JARS",
                               cache_dir() / "jars" / f"spark-kafka-{spark_version}"))


def kafka_broker_jars() -> Path:
    """Folder of the Kafka broker's jars."""
    folder = broker_jar_dir()
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
    folder = connector_jar_dir(version)
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
