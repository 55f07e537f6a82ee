"""A deploy to a cluster that never saw the checkout (issue 34 item 3, docs/deploy.md).

The standalone master and two workers run in their own folders with an
environment that has no ``PYTHONPATH``, no virtual environment and not the
checkout's ``.venv/bin`` on ``PATH``; executors run in the workers' work
folders. The job (``deploy_job.py``) is started with PySpark's own
``spark-submit`` from a temporary folder, the driver on the checkout's Python
(the user's machine), and the toolkit reaches the executors only the ways
Spark documents:

1. **The wheel in ``--py-files``**, to executors whose Python has only the
   toolkit's dependencies (``spark.pyspark.python`` = that Python, as when
   they are installed on every node). Spark puts only ``.zip``, ``.egg`` and
   ``.jar`` files of ``--py-files`` on the workers' ``sys.path``
   (``SparkContext.PACKAGE_EXTENSIONS``), so the wheel, a zip, is shipped
   under a ``.zip`` name: it is pure Python and reads its Lua scripts with
   ``pkgutil``, which works from a zip. Failure-free run, exact.
2. **A packed virtual environment in ``--archives``**: a venv with the toolkit
   installed from the wheel and its dependencies but not PySpark (executors
   take PySpark from their Spark installation's ``python/lib``), zipped,
   ``#environment``, with ``spark.pyspark.python`` = ``./environment/bin/python``
   (Spark's "Python Package Management" recipe). A zip, not venv-pack's tar:
   Spark 4.2 cannot unpack a venv's tar (see :func:`_zip_venv`). A worker and
   its executor are killed -9 while a task of batch 1 is inside its Kafka
   transaction; the read_committed output is the failure-free one.

Each job first asks every executor where it imported the toolkit from and
the test checks that it is the wheel or the archive, never the checkout.
The wheel and the environment are built once per module from pip's cache
(``pip wheel``, ``venv``, ``pip install``, a stored zip: ~40 s). The module
took 4 min 45 s on a 2-core machine at load 9 (build 42 s, then each job's
``spark-submit`` 65 s and 130 s), plus Redis and Kafka when the session has
not started them yet.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import random
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest
from packaging.requirements import Requirement

from dedup.failpoints import arm, fired
from dedup.local.paths import spark_kafka_connector_jars
from dedup.local.spark_cluster import SparkStandaloneCluster
from sinks.kafka_io import ensure_topic
from sinks.verify import verify_topic
from tests.integration.cli.test_installed_wheel import SOURCES, _run
from tests.integration.cluster.test_spark_standalone import _ancestor
from tests.integration.dedup.helpers import write_batches
from tests.integration.sinks.pipeline import read_output
from tests.jvm import with_c1_jvms

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.cluster,
              pytest.mark.redis, pytest.mark.kafka]

ROOT = Path(__file__).resolve().parents[3]
JOB = Path(__file__).resolve().with_name("deploy_job.py")
SPARK_HOME = Path(pyspark.__file__).resolve().parent
DIST = "spark-exactly-once-dedup"


@dataclass(frozen=True)
class Shipped:
    """What the module built: the wheel under a ``.zip`` name, a Python with only the
    dependencies, and the packed environment with the toolkit."""

    wheel_zip: Path
    deps_python: Path
    archive: Path
    seconds: float


def _dependencies(wheel: Path) -> list[str]:
    """The wheel's own requirements without PySpark (the executors' Spark brings it),
    each pinned to the version the driver runs, so pip takes it from its cache."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    pinned = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.split(":", 1)[1].strip())
        if requirement.marker is not None or requirement.name == "pyspark":
            continue  # extras (connect, dev) and PySpark stay out
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        version = importlib.metadata.version(requirement.name)
        pinned.append(f"{requirement.name}{extras}=={version}")
    return pinned


def _zip_venv(env: Path, out: Path) -> Path:
    """``env`` as a stored zip, what ``cd env && zip -q -r -0 ../environment.zip .`` makes.

    Links are stored as the files they point to (``bin/python`` becomes a copy of the
    interpreter; its standard library stays where ``pyvenv.cfg``'s ``home`` says, the
    same path on every node) and every file keeps its mode. A tar does not survive
    Spark 4's unpacking (Hadoop's ``FileUtil.unTarUsingJava``): it refuses a link that
    points outside the archive (venv's ``bin/python3.11``) and drops the executable bit.
    No compression: the archive never leaves this machine (docs/deploy.md).
    """
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for folder, dirs, files in os.walk(env):
            dirs.sort()
            for name in [*dirs, *sorted(files)]:
                path = Path(folder) / name
                archive.write(path, str(path.relative_to(env)))  # follows links
    return out


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Shipped:
    base = tmp_path_factory.mktemp("deploy-build")
    assert ROOT not in base.parents
    started = time.monotonic()
    src = base / "src"  # a copy: the build's folders stay out of the checkout
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    wheels = base / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
          str(src)], timeout=300, cwd=base)
    (wheel,) = wheels.glob("spark_exactly_once_dedup-*.whl")
    # The environment to pack: the dependencies, then the toolkit from its wheel. No pip
    # inside (the driver's pip installs into it): smaller and faster to make.
    env = base / "env"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env)], timeout=120, cwd=base)
    pip = [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install",
           "-q", "--disable-pip-version-check"]
    _run([*pip, *_dependencies(wheel)], timeout=600, cwd=base)
    _run([*pip, "--no-deps", str(wheel)], timeout=120, cwd=base)
    archive = _zip_venv(env, base / "environment.zip")
    # The wheel form's executors: the same environment without the toolkit, so the
    # dependencies only (as when they are installed on every node).
    _run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "uninstall",
          "-q", "-y", DIST], timeout=120, cwd=base)
    probe = subprocess.run([str(env / "bin" / "python"), "-c", "import dedup"], cwd=base,
                           capture_output=True, check=False)
    assert probe.returncode != 0, "the dependency-only Python imports the toolkit"
    wheel_zip = base / "shipped" / f"{wheel.stem}.zip"
    wheel_zip.parent.mkdir()
    shutil.copy2(wheel, wheel_zip)
    seconds = time.monotonic() - started
    print(f"wheel, environment and archive ({archive.stat().st_size >> 20} MB) built in "
          f"{seconds:.0f} s")
    return Shipped(wheel_zip, env / "bin" / "python", archive, seconds)


def _worker_env() -> dict[str, str]:
    """The daemons' environment: this machine's, without any path to the checkout or
    its virtual environment, and none of the suite's Python or Spark settings but the
    JVMs' JIT tier (:func:`tests.jvm.with_c1_jvms`)."""
    venv_bin = (ROOT / ".venv" / "bin").resolve()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DEDUP_", "PYSPARK_", "SPARK_"))
           and k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != venv_bin)
    return with_c1_jvms(env)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandaloneCluster]:
    base = tmp_path_factory.mktemp("deploy-cluster")
    assert ROOT not in base.parents
    spark_cluster = SparkStandaloneCluster(base, environ=_worker_env())
    try:
        spark_cluster.start()
        yield spark_cluster
    finally:
        spark_cluster.stop()


def _batches(seed: int) -> list[list[tuple[str, int]]]:
    rng = random.Random(seed)
    return [[(f"id{rng.randrange(500)}", b * 100_000 + i) for i in range(250)]
            for b in range(3)]


def _expected(batches: list[list[tuple[str, int]]]) -> dict[str, bytes]:
    """The failure-free output: each ID once, with the value of its first occurrence."""
    out: dict[str, bytes] = {}
    for batch in batches:
        for rid, value in batch:
            out.setdefault(rid, str(value).encode())
    return out


def _submit(cluster: SparkStandaloneCluster, ship: list[str], tmp_path: Path, spec: dict[str,
            Any]) -> subprocess.Popen[str]:
    """``spark-submit`` of the job, as a user runs it: ``ship`` says how the toolkit gets
    to the executors; nothing forwards PYTHONPATH or this process's settings."""
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    driver = tmp_path / "driver"
    driver.mkdir(exist_ok=True)
    argv = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.master_url,
            "--jars", ",".join(spark_kafka_connector_jars()),
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.executor.memory=512m",
            "--conf", "spark.sql.shuffle.partitions=4",
            "--conf", f"spark.pyspark.driver.python={sys.executable}",
            *ship, str(JOB), str(spec_file)]
    env = _worker_env()
    env["SPARK_HOME"] = str(SPARK_HOME)
    # To a file, not a pipe: a pipe nobody reads while a test polls for a failpoint
    # blocks the driver once Spark's log fills it.
    with (tmp_path / "driver.log").open("w") as log:
        return subprocess.Popen(argv, cwd=driver, env=env, stdout=log,
                                stderr=subprocess.STDOUT, text=True)


def _driver_log(spec: dict[str, Any]) -> str:
    return (Path(spec["out"]).parent / "driver.log").read_text(errors="replace")[-4000:]


def _finish(job: subprocess.Popen[str], spec: dict[str, Any]) -> dict[str, Any]:
    try:
        job.wait(timeout=420)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the job did not end in 420 s:\n{_driver_log(spec)}") from None
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, _driver_log(spec)
    result: dict[str, Any] = json.loads(Path(spec["out"]).read_text())
    print(f"job timings: {result['timings']}")
    return result


def _spec(redis_url: str, bootstrap: str, app_id: str, tmp_path: Path,
          batches: list[list[tuple[str, int]]], fail_points: Path | None = None
          ) -> dict[str, Any]:
    write_batches(tmp_path / "in", batches)
    topic = f"{app_id}-out"
    ensure_topic(bootstrap, topic, 2)
    return {"redis_url": redis_url, "bootstrap": bootstrap, "app_id": app_id,
            "input": str(tmp_path / "in"), "topic": topic,
            "checkpoint": str(tmp_path / "checkpoint"), "out": str(tmp_path / "out.json"),
            "fail_points": str(fail_points) if fail_points else None}


def _toolkit_not_from_the_checkout(result: dict[str, Any], cluster: SparkStandaloneCluster,
                                   origin: str) -> None:
    """Every executor imported the toolkit from ``origin`` (a path prefix, or ``{cwd}``
    for the executor's own folder) and has no path into the checkout but its Spark's."""
    # the worker's Spark installation (pyspark.zip, py4j, spark-core's jar) is its own
    spark_home = str(SPARK_HOME)
    for seen in result["executors"]:
        assert Path(seen["cwd"]).is_relative_to(cluster.base_dir), seen["cwd"]
        prefix = origin.format(cwd=seen["cwd"])
        assert seen["dedup"].startswith(prefix), (seen["dedup"], prefix)
        assert seen["sinks"].startswith(prefix), (seen["sinks"], prefix)
        into_checkout = [p for p in seen["path"]
                         if p.startswith(str(ROOT)) and not p.startswith(spark_home)]
        assert not into_checkout, into_checkout
    folders = {seen["cwd"] for seen in result["executors"]}
    assert len(folders) >= 2, f"tasks ran on one executor only: {folders}"
    assert len({seen["pid"] for seen in result["executors"]}) >= 2, \
        "tasks ran in one Python worker only"


def test_the_wheel_in_py_files_on_a_dependency_only_python(
        shipped: Shipped, cluster: SparkStandaloneCluster, redis_url: str,
        kafka_bootstrap: str, app_id: str, tmp_path: Path) -> None:
    # Why the .zip name: Spark puts only these on the workers' sys.path.
    assert ".whl" not in pyspark.SparkContext.PACKAGE_EXTENSIONS
    batches = _batches(7)
    spec = _spec(redis_url, kafka_bootstrap, app_id, tmp_path, batches)
    ship = ["--py-files", str(shipped.wheel_zip),
            "--conf", f"spark.pyspark.python={shipped.deps_python}"]
    result = _finish(_submit(cluster, ship, tmp_path, spec), spec)
    # the wheel as Spark fetched it into the executor's folder
    _toolkit_not_from_the_checkout(result, cluster, f"{{cwd}}/{shipped.wheel_zip.name}/")
    assert {seen["python"] for seen in result["executors"]} == {str(shipped.deps_python)}
    report = verify_topic(kafka_bootstrap, spec["topic"], _expected(batches))
    assert report.ok, report.summary()
    assert result["batches"] == len(batches)


def test_a_packed_venv_in_archives_survives_a_lost_worker_mid_transaction(
        shipped: Shipped, cluster: SparkStandaloneCluster, redis_url: str,
        kafka_bootstrap: str, app_id: str, tmp_path: Path) -> None:
    # One sink task of batch 1 stalls halfway through its Kafka transaction (half
    # its records flushed to the log); its worker and executor are killed -9 then. The
    # retry, on the other executor, must abort or fence that transaction and write the
    # batch once, with the catalog's decisions already made.
    fail_points = tmp_path / "failpoints"
    arm(fail_points, "sink.mid_produce", "sleep", match={"batch": 1}, seconds=30)
    batches = _batches(11)
    spec = _spec(redis_url, kafka_bootstrap, app_id, tmp_path, batches, fail_points)
    ship = ["--archives", f"{shipped.archive}#environment",
            "--conf", "spark.pyspark.python=./environment/bin/python"]
    # Client mode: Spark also starts Python workers on the driver (the Python data
    # source's planning) with spark.pyspark.python, relative to the driver's working
    # folder, so there ./environment is the driver's own environment.
    (tmp_path / "driver").mkdir()
    (tmp_path / "driver" / "environment").symlink_to(Path(sys.executable).parent.parent)
    job = _submit(cluster, ship, tmp_path, spec)
    try:
        # Bounded for a loaded machine: the other xdist worker may run a cluster too.
        deadline = time.monotonic() + 420
        while not (hits := fired(fail_points, "sink.mid_produce")) or "pid" not in hits[0]:
            if job.poll() is not None:
                raise AssertionError(f"the job ended before batch 1 was held:\n"
                                     f"{_driver_log(spec)}")
            assert time.monotonic() < deadline, f"batch 1 was never held:\n{_driver_log(spec)}"
            time.sleep(0.1)
        executor = _ancestor(int(hits[0]["pid"]), "CoarseGrainedExecutorBackend")
        assert executor is not None, hits
        worker_jvm = int(Path(f"/proc/{executor}/stat").read_text()
                         .rsplit(")", 1)[1].split()[1])
        index = cluster.worker_index(worker_jvm)
        assert index is not None, f"executor {executor}'s parent {worker_jvm} is no worker"
        killed = cluster.kill_worker(index)
        assert killed[0] == worker_jvm and executor in killed
        cluster.start_worker(index)
    except BaseException:
        job.kill()  # no driver may outlive the test
        job.wait()
        raise
    result = _finish(job, spec)
    _toolkit_not_from_the_checkout(result, cluster, "{cwd}/environment/")
    report = verify_topic(kafka_bootstrap, spec["topic"], _expected(batches))
    assert (report.lost, report.duplicated, report.phantoms) == (0, 0, 0), report.summary()
    assert report.ok, report.summary()
    # proof that the kill hit inside the transaction: its flushed half is in the log,
    # aborted, seen only by a read_uncommitted reader
    uncommitted = read_output(kafka_bootstrap, spec["topic"], "read_uncommitted")
    assert len(uncommitted) > report.observed, "no aborted records: the kill missed"
    assert cluster.alive_workers() == 2
