"""The PySpark version set-up installs is defined once and agrees with pyproject and README."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "dedup" / "local" / "setup.sh"


def default_spark_version() -> str:
    lines = (ROOT / "dedup" / "local" / "spark-version").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")][-1]


def pyspark_requirement() -> Requirement:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(r for r in map(Requirement, deps) if r.name == "pyspark")


def test_pyspark_is_a_range_that_holds_the_default() -> None:
    requirement = pyspark_requirement()
    assert not any(s.operator == "==" for s in requirement.specifier), requirement
    assert default_spark_version() in requirement.specifier
    assert "4.0.0" in requirement.specifier  # the documented older run


def test_setup_reads_the_default_from_the_shared_file() -> None:
    text = SETUP.read_text()
    assert "dedup/local/spark-version" in text
    assert default_spark_version() not in text  # defined once, not repeated


def test_readme_names_the_default_and_the_older_run() -> None:
    readme = (ROOT / "README.md").read_text()
    assert f"PySpark {default_spark_version()}" in readme
    assert "DEDUP_SPARK_VERSION=4.0.0 DEDUP_VENV=.venv-4.0.0 bash dedup/local/setup.sh" in readme


@pytest.mark.parametrize("bad", ["4.2", "latest", "4.2.0; rm -rf /"])
def test_setup_refuses_an_inexact_version_before_doing_anything(bad: str) -> None:
    env = {**os.environ, "DEDUP_SPARK_VERSION": bad, "DEDUP_VENV": "/nonexistent/venv"}
    done = subprocess.run(["bash", str(SETUP)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1
    assert "DEDUP_SPARK_VERSION must be an exact version" in done.stderr
    assert not Path("/nonexistent/venv").exists()
