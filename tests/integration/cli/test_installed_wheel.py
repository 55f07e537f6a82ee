"""The package as a user gets it (issue 34 items 2 and 5): the wheel, built from this tree,
installed with pip into a fresh virtual environment outside the repository and run from an
empty folder with its own HOME. ``dedup --version``, ``dedup fetch-jars`` (Maven, served by
the local Maven repository where it holds the jars), ``dedup services up``, an exact pipeline
(``dedup run --example --verify``) and ``dedup services down`` work, and every byte of state
lands in the per-user cache folder: none in site-packages, none in the working folder.
Then a plain SparkSession whose workers start another Python is refused by
``sinks.register`` in one line that names ``PYSPARK_PYTHON``.

Takes about 3-4 minutes on the 2-core machine: about one for the set-up (the wheel
built, a virtual environment, the wheel and its dependencies installed from pip's cache),
the rest the fetch, the services and the example run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

import dedup

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
CACHE_NAME = "spark-exactly-once-dedup"
# What a source distribution of the project holds (pyproject's packages.find and readme).
SOURCES = ("pyproject.toml", "README.md", "dedup", "sinks", "sources")


@dataclass(frozen=True)
class Installed:
    venv: Path
    home: Path
    work: Path
    env: dict[str, str]

    @property
    def dedup(self) -> str:
        return str(self.venv / "bin" / "dedup")

    @property
    def cache(self) -> Path:
        return self.home / ".cache" / CACHE_NAME


def _run(argv: list[str], timeout: float, **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                            **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{argv}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _user_env(home: Path, path: str) -> dict[str, str]:
    """A user's environment: none of the repository's or the test session's settings."""
    dropped = ("DEDUP_", "PYSPARK_", "SPARK_")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(dropped) and k not in {
               "PYTHONPATH", "VIRTUAL_ENV", "XDG_CACHE_HOME", "REDIS_URL", "KAFKA_BOOTSTRAP",
               "MAVEN_OPTS"}}
    # Maven's repository of this machine (the real HOME's), so the fetch resolves from it
    # where it holds the jars and downloads only what it lacks.
    m2 = Path.home() / ".m2" / "repository"
    env.update(HOME=str(home), PATH=path, MAVEN_OPTS=f"-Dmaven.repo.local={m2}")
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    assert ROOT not in base.parents
    started = time.monotonic()
    # Built from a copy of the tree, so the build's folders (build/, *.egg-info) stay out
    # of the repository.
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    wheels = base / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(src)],
         timeout=300, cwd=base)
    (wheel,) = wheels.glob("spark_exactly_once_dedup-*.whl")
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=120, cwd=base)
    # The PySpark this suite runs on: its connector is on the Maven Central this machine
    # reaches (docs/development.md), and pip's cache holds its wheel.
    constraints = base / "constraints.txt"
    constraints.write_text(f"pyspark=={pyspark.__version__}\n")
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
          "--disable-pip-version-check", "-c", str(constraints), str(wheel)],
         timeout=900, cwd=base)
    home, work = base / "home", base / "work"
    home.mkdir()
    work.mkdir()
    # Without the repository's .venv/bin: a user's PATH, with the new environment not
    # activated (its commands are called by path).
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and Path(p).resolve() != (ROOT / ".venv" / "bin").resolve())
    print(f"wheel built and installed in {time.monotonic() - started:.0f} s")
    yield Installed(venv, home, work, _user_env(home, path))


def _recorded_pids(state: Path) -> list[int]:
    with contextlib.suppress(FileNotFoundError, ValueError):
        data = json.loads(state.read_text())
        return [int(entry["pid"]) for entry in data.values()
                if isinstance(entry, dict) and entry.get("pid")]
    return []


def test_the_installed_wheel_fetches_its_jars_and_runs_an_exact_pipeline(
        installed: Installed) -> None:
    site = next((installed.venv / "lib").glob("python3*/site-packages"))
    site_before = _files(site)
    env, work = installed.env, installed.work

    version = _run([installed.dedup, "--version"], timeout=60, cwd=work, env=env)
    assert version.stdout.strip() == f"dedup {dedup.__version__}"

    fetched = _run([installed.dedup, "fetch-jars"], timeout=1200, cwd=work, env=env)
    jars = installed.cache / "jars"
    assert "broker jars fetched: " in fetched.stdout, fetched.stdout
    assert any((jars / "kafka-broker").glob("kafka_2.13-*.jar"))
    assert any((jars / f"spark-kafka-{pyspark.__version__}").glob("spark-sql-kafka-*.jar"))
    again = _run([installed.dedup, "fetch-jars"], timeout=120, cwd=work, env=env)
    assert "broker jars already there" in again.stdout, again.stdout  # idempotent

    state = installed.cache / "services" / "state.json"
    try:
        up = _run([installed.dedup, "services", "up"], timeout=240, cwd=work, env=env)
        assert f"state file: {state}" in up.stdout, up.stdout
        run = _run([installed.dedup, "run", "--example", "--verify"], timeout=600, cwd=work,
                   env=env)
        assert "lost 0, duplicated 0, phantoms 0, mismatched 0, open transactions 0" in \
            run.stdout, run.stdout
    finally:
        down = subprocess.run([installed.dedup, "services", "down"], capture_output=True,
                              text=True, timeout=120, cwd=work, env=env, check=False)
        for pid in _recorded_pids(state):  # whatever `down` could not stop
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert down.returncode == 0, down.stderr

    # All state in the per-user cache folder; nothing in the package or the working folder.
    assert state.is_file()
    assert (installed.cache / "services" / "redis").is_dir()
    assert (installed.cache / "services" / "kafka").is_dir()
    assert (installed.cache / "runs" / "dedup-example" / "checkpoint").is_dir()
    assert not _files(work), sorted(_files(work))
    written = sorted(_files(site) - site_before)
    assert not written, written[:20]
    assert sorted(p.name for p in installed.home.iterdir()) == [".cache"]


def test_workers_on_another_python_are_refused_in_one_line(installed: Installed,
                                                           tmp_path: Path) -> None:
    """Item 5: a script run with the environment's python (not activated), PYSPARK_PYTHON
    unset: Spark's workers start ``python3`` from PATH, which lacks the toolkit."""
    system_python = shutil.which("python3", path="/usr/bin:/bin")
    if system_python is None:
        pytest.skip("no python3 in /usr/bin or /bin")
    probe = subprocess.run([system_python, "-c", "import confluent_kafka"], check=False,
                           capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{system_python} has confluent_kafka: not a Python without the toolkit")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(system_python)
    script = tmp_path / "job.py"
    script.write_text(
        "import sys\n"
        "from pyspark.sql import SparkSession\n"
        "import sinks\n"
        "from dedup.spark_session import WorkerImportError\n"
        "spark = (SparkSession.builder.master('local[1]')\n"
        "         .config('spark.ui.enabled', 'false').getOrCreate())\n"
        "try:\n"
        "    sinks.register(spark)\n"
        "except WorkerImportError as exc:\n"
        "    print('REFUSED', exc)\n"
        "else:\n"
        "    print('NOT REFUSED')\n"
        "finally:\n"
        "    spark.stop()\n")
    env = {**installed.env, "PATH": os.pathsep.join([str(bin_dir), installed.env["PATH"]])}
    result = _run([str(installed.venv / "bin" / "python"), str(script)], timeout=300,
                  cwd=installed.work, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith(("REFUSED", "NOT"))]
    assert len(lines) == 1 and lines[0].startswith("REFUSED"), result.stdout + result.stderr
    assert "PYSPARK_PYTHON" in lines[0] and str(installed.venv / "bin" / "python") in lines[0]
