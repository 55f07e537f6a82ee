"""Which Spark versions pass the integration tier: ``python -m benchmarks.spark_versions``.

For each version (default: set-up's default from ``dedup/local/spark-version``
and 4.0.0, the oldest that ``pyproject.toml`` accepts), ``dedup/local/setup.sh``
installs it into its own virtual environment (``.venv`` for the default,
``.venv-<version>`` otherwise) with the Kafka connector of that version, then
``pytest tests/integration -m "not cluster"`` runs there. Writes
``benchmarks/results/spark_versions.json`` (per version: passed, failed,
errors, minutes, the commit) and merges ``spark_versions_passed`` (versions
whose tier passed with nothing failed, at the current commit) into
``summary.json``. A version already recorded as passed at the current commit
is not run again (``--force`` reruns it), so an interrupted run resumes where
it stopped. Not part of pytest: each version takes 10-20 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR, merge_summary, progress, run_metadata, write_json
from dedup.local.paths import repo_root

OLDEST = "4.0.0"


def default_version(root: Path) -> str:
    lines = (root / "dedup" / "local" / "spark-version").read_text().splitlines()
    return next(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def _commit(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()


def counts(output: str) -> dict[str, int]:
    """pytest's last summary line as numbers (``3 failed, 97 passed, 1 error in ...``)."""
    found = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "xfailed": 0}
    lines = [line for line in output.splitlines() if re.search(r"\b(passed|failed|error)", line)]
    for number, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed)",
                                   lines[-1] if lines else ""):
        found["errors" if word.startswith("error") else word] += int(number)
    return found


def run_version(root: Path, version: str, default: str, say: Any) -> dict[str, Any]:
    venv = ".venv" if version == default else f".venv-{version}"
    env = {**os.environ, "DEDUP_SPARK_VERSION": version, "DEDUP_VENV": venv,
           "DEDUP_SETUP_QUIET": "1"}
    started = time.monotonic()
    say(f"PySpark {version}: set-up into {venv}")
    setup = subprocess.run(["bash", "dedup/local/setup.sh"], cwd=root, env=env,
                           capture_output=True, text=True, check=False)
    if setup.returncode != 0:
        return {"setup_exit": setup.returncode, "error": setup.stderr.strip()[-500:]}
    say(f"PySpark {version}: integration tier")
    tests = subprocess.run(
        [str(root / venv / "bin" / "python"), "-m", "pytest", "tests/integration", "-q",
         "-m", "not cluster", "-p", "no:cacheprovider"],
        cwd=root, env=env, capture_output=True, text=True, check=False)
    result: dict[str, Any] = {**counts(tests.stdout), "exit": tests.returncode,
                              "minutes": round((time.monotonic() - started) / 60, 1),
                              "venv": venv}
    if tests.returncode != 0:
        result["failures"] = [line for line in tests.stdout.splitlines()
                              if line.startswith(("FAILED", "ERROR"))][:20]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--versions", default="",
                        help="comma-separated PySpark versions (default: set-up's default "
                             f"and {OLDEST})")
    parser.add_argument("--force", action="store_true",
                        help="rerun versions already recorded as passed at this commit")
    args = parser.parse_args(argv)
    root = repo_root()
    default = default_version(root)
    versions = [v for v in (args.versions or f"{default},{OLDEST}").split(",") if v]
    commit = _commit(root)
    path = RESULTS_DIR / "spark_versions.json"
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    runs: dict[str, Any] = data.get("versions", {})
    say = progress("spark_versions")
    for version in versions:
        done = runs.get(version, {})
        if not args.force and done.get("commit") == commit and done.get("exit") == 0:
            say(f"PySpark {version}: passed at {commit} already")
            continue
        runs[version] = {**run_version(root, version, default, say), "commit": commit,
                         "date": run_metadata()["date"]}
        say(f"PySpark {version}: {runs[version]}")
        write_json("spark_versions.json", {"metadata": run_metadata(), "versions": runs})
    passed = sorted(v for v, r in runs.items() if r.get("commit") == commit
                    and r.get("exit") == 0 and r.get("failed") == 0 and r.get("passed", 0) > 0)
    write_json("spark_versions.json", {"metadata": run_metadata(), "versions": runs,
                                       "passed_at_commit": passed})
    merge_summary({"spark_versions_passed": len(passed)})
    print(json.dumps({"commit": commit, "passed": passed}))
    return 0 if set(versions) <= set(passed) else 1


if __name__ == "__main__":
    sys.exit(main())
