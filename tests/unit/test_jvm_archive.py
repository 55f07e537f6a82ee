"""The drivers' class-data archive of the suite (tests/jvm.py, issue 52).

A driver reads the archive only once it exists, says nothing when it does not fit, and
a second maker leaves the making to the first.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests import jvm


def test_drivers_read_the_archive_only_once_it_exists(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "spark-test.jsa"
    monkeypatch.setattr(jvm, "spark_class_archive", lambda: archive)
    assert jvm.driver_options() == jvm.C1_ONLY
    archive.write_bytes(b"x")
    options = jvm.driver_options().split()
    assert options[0] == jvm.C1_ONLY
    assert f"-XX:SharedArchiveFile={archive}" in options
    assert set(jvm.QUIET_CDS.split()) <= set(options)


def test_a_second_maker_returns_at_once_while_the_first_holds_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "spark-test.jsa"
    monkeypatch.setattr(jvm, "spark_class_archive", lambda: archive)
    monkeypatch.setattr(jvm, "ARCHIVE_DIR", tmp_path)

    def no_jvm(*args: object, **kwargs: object) -> None:
        raise AssertionError("the second maker ran a JVM")

    monkeypatch.setattr(subprocess, "run", no_jvm)
    with open(archive.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert jvm.make_spark_class_archive() is None
    assert not archive.exists()


def test_the_key_changes_with_the_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark

    before = jvm.spark_class_archive.__wrapped__()  # type: ignore[attr-defined]
    fake = tmp_path / "pyspark"
    (fake / "jars").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar"):
        (fake / "jars" / jar.name).write_bytes(b"")  # same names, other sizes
    monkeypatch.setattr(pyspark, "__file__", str(fake / "__init__.py"))
    assert jvm.spark_class_archive.__wrapped__() != before  # type: ignore[attr-defined]


def test_an_archive_that_does_not_fit_the_class_path_is_not_reported(tmp_path: Path) -> None:
    """A real JVM: an archive made for PySpark's class path, used with a jar in front of
    it (the JVM falls back to its classes) prints nothing with the suite's options;
    without them, its warning, on stdout, where tests read a child's output."""
    import pyspark

    java = shutil.which("java")
    assert java, "java is on PATH on every machine of the suite (setup.sh)"
    jars = f"{Path(pyspark.__file__).parent / 'jars'}/*"
    front = tmp_path / "front.jar"
    with zipfile.ZipFile(front, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    archive = tmp_path / "dyn.jsa"
    main = ["org.apache.spark.deploy.SparkSubmit", "--version"]
    made = subprocess.run([java, f"-XX:ArchiveClassesAtExit={archive}", *jvm.QUIET_CDS.split(),
                           "-cp", jars, *main], capture_output=True, text=True, timeout=120,
                          check=False)
    assert made.returncode == 0 and archive.is_file(), made.stdout + made.stderr
    other = [java, f"-XX:SharedArchiveFile={archive}", "-cp", f"{front}:{jars}", *main]
    loud = subprocess.run(other, capture_output=True, text=True, timeout=120, check=False)
    assert "shared archive" in loud.stdout, loud.stdout  # the check can fail
    quiet = subprocess.run([*other[:2], *jvm.QUIET_CDS.split(), *other[2:]],
                           capture_output=True, text=True, timeout=120, check=False)
    assert quiet.returncode == 0 and "shared archive" not in quiet.stdout, quiet.stdout
    assert "shared archive" not in quiet.stderr.lower(), quiet.stderr
