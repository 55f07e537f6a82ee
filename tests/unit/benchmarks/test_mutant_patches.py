"""The mutants live in benchmarks/chaos/mutant_patches.py and reach Spark's Python workers.

The toolkit holds none of them (tests/unit/test_layering.py); a process gets their
wrappers from ``benchmarks/chaos/worker_site/sitecustomize.py`` on ``PYTHONPATH``
(as the chaos runner and tests/chaos set it for the SparkSession's workers). The
mutants' effect on a run is tested by tests/chaos/test_mutants.py and the matrix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.chaos.mutant_patches import (
    KNOWN_MUTANTS,
    PATCHED_MODULES,
    WORKER_SITE,
    arm_mutant,
    mutant_hits,
    mutant_on,
    worker_pythonpath,
)


def test_mutant_is_off_without_a_folder_and_on_with_its_file(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DEDUP_FAILPOINT_DIR", raising=False)
    monkeypatch.delenv("DEDUP_FAIL_POINT_DIR", raising=False)
    assert not any(mutant_on(name) for name in KNOWN_MUTANTS)
    assert not mutant_on("marker_ignored", str(tmp_path))  # a folder, but no file
    armed = tmp_path / "armed"
    arm_mutant(armed, "marker_ignored")
    assert mutant_on("marker_ignored", str(armed))
    assert not mutant_on("no_fencing", str(armed))  # only the named one
    monkeypatch.setenv("DEDUP_FAIL_POINT_DIR", str(armed))  # how `dedup run` children get it
    assert mutant_on("marker_ignored")
    with pytest.raises(ValueError, match="unknown mutant"):
        arm_mutant(armed, "everything_off")


def test_the_worker_site_goes_first_once() -> None:
    assert worker_pythonpath({}) == str(WORKER_SITE)
    twice = worker_pythonpath({"PYTHONPATH": worker_pythonpath({"PYTHONPATH": "/a"})})
    assert twice == os.pathsep.join([str(WORKER_SITE), "/a"])


# A fresh process, as a Spark Python worker: the toolkit's modules, then what the
# mutants did to them (no_fencing's wrapper is the one that needs no service).
_PROBE = textwrap.dedent("""
    import importlib, json, sys
    from dedup.config import FailPointConfig
    from sinks.config import SinkConfig

    names = {names!r}
    modules = [importlib.import_module(name) for name in names]
    ids = {{}}
    for folder in ({off!r}, {on!r}):
        config = SinkConfig(app_id="a", bootstrap_servers="b:1", strong_productions=False,
                            fail_points=FailPointConfig(folder))
        ids[folder] = [config.transactional_id(0),
                       config.producer_settings(0)["transactional.id"]]
    print(json.dumps({{"patched": [getattr(m, "__dedup_chaos_mutants__", False)
                                   for m in modules],
                      "benchmarks": "benchmarks" in sys.modules, "ids": ids}}))
""")


def _probe(tmp_path: Path, environ: dict[str, str]) -> dict[str, object]:
    off, on = tmp_path / "off", tmp_path / "on"
    off.mkdir(exist_ok=True)
    arm_mutant(on, "no_fencing")
    code = _PROBE.format(names=list(PATCHED_MODULES), off=str(off), on=str(on))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DEDUP_FAIL_POINT_DIR")}
    done = subprocess.run([sys.executable, "-c", code], env={**env, **environ}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=True)
    assert "mutants not installed" not in done.stderr, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_process_with_the_worker_site_gets_the_wrappers(tmp_path: Path) -> None:
    result = _probe(tmp_path, {"PYTHONPATH": worker_pythonpath({})})
    assert result["patched"] == [True] * len(PATCHED_MODULES)
    assert result["benchmarks"] is False  # loaded by its path: workers have no benchmarks
    ids = result["ids"]
    assert isinstance(ids, dict)
    plain, own = ids[str(tmp_path / "off")]
    assert own == plain  # unarmed: the original settings
    plain, fresh = ids[str(tmp_path / "on")]
    assert fresh.startswith(plain + ".") and fresh != plain  # armed: never fenced
    assert list(mutant_hits(tmp_path / "on")) == ["no_fencing"]  # where it acted
    assert mutant_hits(tmp_path / "off") == {}


def test_a_process_without_it_runs_the_toolkit_as_shipped(tmp_path: Path) -> None:
    result = _probe(tmp_path, {})
    assert result["patched"] == [False] * len(PATCHED_MODULES)
    ids = result["ids"]
    assert isinstance(ids, dict)
    for plain, used in ids.values():
        assert used == plain  # even with the mutant's file in the folder
