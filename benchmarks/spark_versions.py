"""Which Spark versions pass the integration tier: ``python -m benchmarks.spark_versions``.

For each version (default: set-up's default from ``dedup/local/spark-version``
and 4.0.0, the oldest that ``pyproject.toml`` accepts), ``dedup/local/setup.sh``
installs it into its own virtual environment (``.venv`` for the default,
``.venv-<version>`` otherwise) with the Kafka connector of that version, then
``pytest tests/integration -m "not cluster"`` runs there. Writes
``benchmarks/results/spark_versions.json`` (per version: passed, failed,
errors, minutes, the commit) and merges ``spark_versions_passed`` (versions
whose tier passed with nothing failed, at a commit whose product and tests
(``dedup/``, ``sinks/``, ``sources/``, ``tests/integration/``, ``tests/conftest.py``,
``pyproject.toml``) are those of
the current one) into ``summary.json``. A version already recorded as passed at
such a commit is not run again (``--force`` reruns it), so an interrupted run
resumes where it stopped. Not part of pytest: each version takes 10-30 minutes.

Then the version change itself: for each other version set up here,
``tests/integration/cli/test_spark_upgrade.py`` runs under the default version
with ``DEDUP_SPARK_UPGRADE_FROM`` naming that version's Python (a batch partly
committed under one version, finished under the other, both ways); recorded
under ``upgrades`` and as ``spark_upgrades_passed`` (a skipped test counts as
not passed).
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
    # the version change runs later, with the other version's Python
    return {**_pytest(root, venv, env, started,
                      ["tests/integration", "-m", "not cluster",
                       "--ignore=tests/integration/cli/test_spark_upgrade.py"]),
            "venv": venv}


def failure_lines(output: str) -> list[str]:
    """What a failed tier records: the failed tests' names (pytest's short summary, up
    to 60), then the first error lines (at least 5, up to 20 lines in all). Pure."""
    lines = output.splitlines()
    named = [line[:300] for line in lines if line.startswith(("FAILED", "ERROR"))][:60]
    errors = [line for line in lines if line.startswith("E ")]
    return named + errors[:max(20 - len(named), 5)]


def _pytest(root: Path, venv: str, env: dict[str, str], started: float,
            args: list[str]) -> dict[str, Any]:
    """pytest under ``venv``'s Python: its counts, exit, minutes since ``started``, and
    the failed tests' names with the first error lines."""
    tests = subprocess.run(
        [str(root / venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
         *args], cwd=root, env=env, capture_output=True, text=True, check=False)
    result: dict[str, Any] = {**counts(tests.stdout), "exit": tests.returncode,
                              "minutes": round((time.monotonic() - started) / 60, 1)}
    if tests.returncode != 0:
        result["failures"] = failure_lines(tests.stdout)
    return result


UNCHANGED = ("dedup", "sinks", "sources", "tests/integration", "tests/conftest.py",
             "pyproject.toml")
"""What a recorded result depends on: a later commit with these unchanged keeps it."""


def same_code(root: Path, commit: str | None) -> bool:
    """Whether ``commit``'s product and tests are the current ones (the work tree's)."""
    if not commit:
        return False
    return subprocess.run(["git", "-C", str(root), "diff", "--quiet", commit, "--", *UNCHANGED],
                          capture_output=True, check=False).returncode == 0


def run_upgrade(root: Path, version: str, default: str, say: Any) -> dict[str, Any]:
    """test_spark_upgrade under ``default`` with ``version`` as the other side."""
    other = root / f".venv-{version}" / "bin" / "python"
    if not other.exists():
        return {"error": f"{other} missing: set up {version} first", "exit": -1}
    say(f"PySpark {version} <-> {default}: test_spark_upgrade")
    started = time.monotonic()
    env = {**os.environ, "DEDUP_SPARK_UPGRADE_FROM": str(other)}
    return {**_pytest(root, ".venv", env, started,
                      ["tests/integration/cli/test_spark_upgrade.py"]), "to": default}


def passed(record: dict[str, Any], root: Path, tests: int = 1, skips: bool = True) -> bool:
    """A recorded run passed: at least ``tests`` passed, none failed (nor skipped, with
    ``skips`` False), at a commit with the current code (:func:`same_code`)."""
    return (record.get("exit") == 0 and record.get("failed") == 0
            and (skips or record.get("skipped", 0) == 0)
            and record.get("passed", 0) >= tests and same_code(root, record.get("commit")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--versions", default="",
                        help="comma-separated PySpark versions (default: set-up's default "
                             f"and {OLDEST})")
    parser.add_argument("--force", action="store_true",
                        help="rerun versions already recorded as passed at this code")
    parser.add_argument("--upgrades-only", action="store_true",
                        help="only the version-change test, for versions already set up")
    args = parser.parse_args(argv)
    root = repo_root()
    default = default_version(root)
    versions = [v for v in (args.versions or f"{default},{OLDEST}").split(",") if v]
    commit = _commit(root)
    path = RESULTS_DIR / "spark_versions.json"
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    runs: dict[str, Any] = data.get("versions", {})
    upgrades: dict[str, Any] = data.get("upgrades", {})
    say = progress("spark_versions")

    def save(**extra: Any) -> None:
        write_json("spark_versions.json", {"metadata": run_metadata(), "versions": runs,
                                           "upgrades": upgrades, **extra})

    for version in [] if args.upgrades_only else versions:
        if not args.force and passed(runs.get(version, {}), root):
            say(f"PySpark {version}: passed at {runs[version]['commit']} (same code) already")
            continue
        runs[version] = {**run_version(root, version, default, say), "commit": commit,
                         "date": run_metadata()["date"]}
        say(f"PySpark {version}: {runs[version]}")
        save()
    for version in [v for v in versions if v != default]:
        if not args.force and passed(upgrades.get(version, {}), root, tests=2, skips=False):
            say(f"PySpark {version} <-> {default}: passed already")
            continue
        upgrades[version] = {**run_upgrade(root, version, default, say), "commit": commit,
                             "date": run_metadata()["date"]}
        say(f"PySpark {version} <-> {default}: {upgrades[version]}")
        save()
    ok = sorted(v for v, r in runs.items() if passed(r, root))
    upgraded = sorted(v for v, r in upgrades.items()
                      if passed(r, root, tests=2, skips=False))
    save(passed_at_commit=ok, upgrades_passed=upgraded)
    merge_summary({"spark_versions_passed": len(ok),
                   "spark_upgrades_passed": len(upgraded)})
    print(json.dumps({"commit": commit, "passed": ok, "upgrades_passed": upgraded}))
    wanted = [] if args.upgrades_only else versions
    return 0 if set(wanted) <= set(ok) and \
        {v for v in versions if v != default} <= set(upgraded) else 1


if __name__ == "__main__":
    sys.exit(main())
