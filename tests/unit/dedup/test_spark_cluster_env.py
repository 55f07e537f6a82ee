"""What a Spark standalone cluster's executors get from the driver (no JVM started)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dedup.failpoints import ENV_VAR
from dedup.local.paths import repo_root
from dedup.local.spark import executor_env
from dedup.local.spark_cluster import SparkStandaloneCluster, _descendants


@pytest.mark.parametrize("master", ["local[2]", "local[2,4]", "local-cluster[2,1,1024]",
                                    "yarn"])
def test_masters_that_share_the_drivers_environment_get_nothing(master: str) -> None:
    assert executor_env(master, {"PYTHONPATH": "/x", ENV_VAR: "/fp"}) == {}


def test_standalone_executors_get_the_code_and_the_fail_point_folder() -> None:
    conf = executor_env("spark://127.0.0.1:7077", {"PYTHONPATH": f"/a{os.pathsep}/b",
                                                   ENV_VAR: "/fp"})
    assert conf == {
        "spark.executorEnv.PYTHONPATH": os.pathsep.join([str(repo_root()), "/a", "/b"]),
        f"spark.executorEnv.{ENV_VAR}": "/fp",
    }


def test_no_fail_point_folder_forwarded_when_none_is_set() -> None:
    conf = executor_env("spark://h:1", {"PYTHONPATH": str(repo_root())})
    assert conf == {"spark.executorEnv.PYTHONPATH": str(repo_root())}


def test_cluster_addresses_and_refusals(tmp_path: Path) -> None:
    cluster = SparkStandaloneCluster(tmp_path, workers=2)
    assert cluster.master_url == f"spark://127.0.0.1:{cluster.port}"
    assert cluster.worker_pid(0) is None and cluster.kill_worker(1) == []
    cluster.stop()  # nothing started: nothing to do
    with pytest.raises(ValueError, match="at least 1"):
        SparkStandaloneCluster(tmp_path, workers=0)


def test_descendants_finds_children() -> None:
    import subprocess

    child = subprocess.Popen(["sleep", "30"])
    try:
        assert child.pid in _descendants(os.getpid())
    finally:
        child.kill()
        child.wait()
