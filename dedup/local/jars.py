"""Fetch the Kafka broker's jars and Spark's Kafka connector with Maven (``dedup fetch-jars``).

The one place that runs Maven for the toolkit: ``dedup fetch-jars`` calls it,
and so does ``dedup/local/setup.sh`` for a checkout. It resolves the packaged
``pom.xml`` (two profiles, two folders: the broker must never share a
classpath with Spark's connector, they pin different ``kafka-clients``) with the
packaged ``maven-settings.xml`` (every repository routed to Maven Central),
the connector at the installed PySpark's version, into :func:`cache_dir`'s
``jars/``. Maven's own repository (``~/.m2/repository``, or
``-Dmaven.repo.local`` in ``MAVEN_OPTS``) serves what it already holds.
Idempotent: a folder with its stamp (a hash of the pom) is not fetched again.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dedup.exceptions import ServiceError
from dedup.local.paths import broker_jar_dir, cache_dir, connector_jar_dir, require_program

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
MAVEN_SETTINGS = HERE / "maven-settings.xml"
# Generous: a fresh machine downloads ~60 MB; a warm ~/.m2 takes seconds.
MAVEN_TIMEOUT_SECONDS = 1800.0


class JarFetchError(ServiceError):
    """Maven could not fetch the jars (no network, no such version on Maven Central)."""


@dataclass(frozen=True)
class Fetched:
    """One profile's outcome: its folder, and whether this call fetched it (else it was there)."""

    profile: str
    folder: Path
    fetched: bool


def pom_stamp() -> str:
    """Name of the stamp file a complete folder holds (as ``setup.sh`` always named it)."""
    return f".complete-{hashlib.sha256(POM.read_bytes()).hexdigest()[:16]}"


def installed_spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def fetch_jars(say: Callable[[str], None] = print, spark_version: str | None = None,
               force: bool = False) -> list[Fetched]:
    """Fetch the broker jars and Spark's Kafka connector unless already there.

    Parameters
    ----------
    say:
        Receives one progress line per step.
    spark_version:
        Connector version; default the installed PySpark's, the one
        :func:`~dedup.local.paths.spark_kafka_connector_jars` looks for.
    force:
        Fetch again even where the stamp says the folder is complete.

    Returns
    -------
    list[Fetched]
        The broker's folder, then the connector's.

    Raises
    ------
    MissingToolError
        ``mvn`` or ``java`` is not on PATH.
    JarFetchError
        Maven failed; the message names its log and the last error line.
    """
    version = spark_version or installed_spark_version()
    wanted = [("broker", broker_jar_dir(), []),
              ("connector", connector_jar_dir(version), [f"-Dspark.version={version}"])]
    stamp = pom_stamp()
    results = []
    for profile, folder, extra in wanted:
        done = (folder / stamp).is_file() and not force
        if not done:
            what = ("the Kafka broker's jars" if profile == "broker"
                    else f"the jars of Spark's Kafka connector for PySpark {version}")
            say(f"fetching {what} into {folder} with Maven "
                "(about a minute on a fresh machine)...")
            _maven(profile, folder, extra)
        results.append(Fetched(profile, folder, not done))
    for item in results:
        count = sum(1 for _ in item.folder.glob("*.jar"))
        state = "fetched" if item.fetched else "already there"
        say(f"{item.profile} jars {state}: {count} in {item.folder}")
    return results


def _maven(profile: str, folder: Path, extra: list[str]) -> None:
    require_program("java", "install a JDK 17: apt-get install openjdk-17-jdk-headless")
    mvn = require_program("mvn", "install Maven: apt-get install maven")
    logs = cache_dir()
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"mvn-{profile}.log"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    # Maven runs on a copy of the pom in a scratch folder: it must not write
    # beside the packaged one (site-packages) nor in the current folder.
    with tempfile.TemporaryDirectory(prefix="dedup-mvn-", dir=logs) as scratch:
        pom = Path(scratch) / "pom.xml"
        shutil.copyfile(POM, pom)
        # -U: look again for what an earlier failed attempt marked missing.
        command = [mvn, "-q", "-B", "-U", "-Dstyle.color=never", "-s", str(MAVEN_SETTINGS),
                   "-f", str(pom), "-P", profile, *extra, "dependency:copy-dependencies",
                   f"-DoutputDirectory={folder}"]
        with log.open("w") as out:
            try:
                result = subprocess.run(command, cwd=scratch, stdout=out,
                                        stderr=subprocess.STDOUT, check=False,
                                        timeout=MAVEN_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired as exc:
                raise JarFetchError(
                    f"Maven did not fetch the {profile} jars within "
                    f"{MAVEN_TIMEOUT_SECONDS:.0f} s (log: {log}): check the network to "
                    "Maven Central and run it again") from exc
    if result.returncode != 0:
        text = _ANSI.sub("", log.read_text(errors="replace"))
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        first = next((line for line in lines if line.startswith("[ERROR]")
                      and line.removeprefix("[ERROR]").strip()),
                     lines[-1] if lines else "no output")
        advice = ""
        if profile == "connector" and "Could not find artifact" in first:
            advice = (f" (this PySpark's connector is not in your Maven repositories: install "
                      f"a PySpark release whose connector is, e.g. "
                      f"pip install 'pyspark=={default_spark_version()}')")
        raise JarFetchError(f"Maven could not fetch the {profile} jars: {first[:400]}{advice}; "
                            f"log: {log}")
    (folder / pom_stamp()).touch()


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def default_spark_version() -> str:
    """The PySpark release the suite runs on (``dedup/local/spark-version``'s last line)."""
    lines = [line.strip() for line in (HERE / "spark-version").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    return lines[-1]
