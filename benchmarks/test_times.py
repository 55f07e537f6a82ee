"""Where the test suite's time goes: each tier's minutes and each test function's seconds.

Issue 52. Runs each tier of CI (``.ci/run``) as its command does, serially, with a
junit XML, and writes ``benchmarks/results/test_times.json``: per tier the wall
minutes, the counts of passed / failed / skipped tests and the seconds of every
test function (its parametrized cases summed, set-up and teardown included), with
date, machine and commit. ``summary.json`` gets ``test_command_minutes``,
``ci_minutes`` (set-up and every tier) and ``tests_passed``.

``tests/unit/test_test_times.py`` reads the file: each tier within its budget
(:data:`BUDGET_MINUTES`), no test of README's test command at :data:`SLOW_SECONDS` or
more, and every test function of the tree recorded, so that a new test is timed when it
is added (``--only`` times it alone and merges its seconds into the tier its markers
select)::

    python -m benchmarks.test_times                       # every tier (about an hour)
    python -m benchmarks.test_times --tier connect        # one tier; the others kept
    python -m benchmarks.test_times --only tests/unit/test_new.py   # new tests only
    python -m benchmarks.test_times --junit test_command=run.xml --wall test_command=1500
                                                          # a run made elsewhere

Safe to repeat: each run replaces what it measured and keeps the rest.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR, merge_summary, run_metadata, write_json
from benchmarks.connect_forms import commit

ROOT = Path(__file__).resolve().parents[1]
RESULT = "test_times.json"

TIERS: dict[str, list[str]] = {
    "test_command": ["-m", "not slow and not chaos and not cluster and not connect", "-n", "2",
                     "--dist", "worksteal"],
    "long": ["-m", "(slow or chaos or cluster) and not connect", "-n", "2", "--dist",
             "loadfile"],
    "connect": ["-p", "no:cacheprovider", "tests/integration/connect", "-n", "2", "--dist",
                "worksteal"],
}
"""Each tier's pytest arguments, as README's commands and ``.ci/run`` give them (a unit
test checks that they do). README's test command is the fast tier; ``long`` (the tests
marked ``slow``, ``chaos`` or ``cluster``) and ``connect`` are README's second command,
which CI runs after it. The slow tests and the chaos and cluster ones were two commands
until 2026-12-03: one saves a tier's start (two workers' collection, Spark session and
broker) and its end, where one worker waits for the other's last file."""

SLOW_SECONDS = 30.0
"""A test whose call (its fixtures' set-up aside: the session's Spark start falls on
whichever test asks first) is recorded at this many seconds or more in README's test
command fails ``tests/unit/test_test_times.py``: mark it ``slow`` (CI's second command
runs it) or make it faster. The tests marked when the fast tier was cut took 20 s or
more; the check allows 30 because a test's seconds vary by half with what the other
worker runs (``test_sink_smoke.py``'s failure-free run: 14.0 s at e91f4c2, 12.0 and
23.8 s in two runs of 2026-11-30)."""

BUDGET_MINUTES: dict[str, float] = {"test_command": 12.0, "long": 40.0, "connect": 8.0,
                                    "ci": 50.0}
"""What each tier may take on the 2-core machine before ``tests/unit/test_test_times.py``
fails: the recorded wall time, and the recorded tests' seconds summed over the tier's
pytest-xdist workers (:func:`workers`). Lower them
as the suite gets faster, never raise them to let a slow test in (make it faster,
or move what it guards into a cheaper test); ``ci`` is set-up plus every tier.
``long`` had the budgets of the two tiers it joined (24 and 34) added until the
record of 2026-12-04 (25.8 minutes; Connect 3.5, ``.ci/run`` 34.8), when the budgets went
down to 40, 8 and 50, about the slower machine's sittings of that week with headroom.
The record of 2026-11-29 (fresh clone, the three commands one after another, nothing
else running: 30.4, 30.5 and 11.6 minutes, 73.8 with set-up) plus a little; CI stops
at 90."""

TARGET_MINUTES: dict[str, float] = {"test_command": 12.0, "long+connect": 23.0, "ci": 35.0}
"""Issue 52's goal, which the budgets move toward (docs/development.md)."""


def workers(args: list[str]) -> int:
    """How many pytest-xdist workers a tier's arguments start (``-n N``; 1 without). Pure."""
    return int(args[args.index("-n") + 1]) if "-n" in args else 1


def test_functions(root: Path = ROOT) -> set[str]:
    """Every test function of the tree as ``path::name`` (``path::Class::name`` in a
    class), found by reading the files, not by importing them. Pure."""
    found: set[str] = set()
    for path in sorted((root / "tests").rglob("test_*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                    and node.name.startswith("test"):
                found.add(f"{rel}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                found.update(f"{rel}::{node.name}::{item.name}" for item in node.body
                             if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                             and item.name.startswith("test"))
    return found


def _key(classname: str, name: str, root: Path) -> str:
    """The ``path::[Class::]function`` of a junit test case."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(root, *parts[:cut]).with_suffix(".py")
        if path.exists():
            inner = [*parts[cut:], _node_key(name)]
            return "::".join([path.relative_to(root).as_posix(), *inner])
    return f"{classname}::{_node_key(name)}"


def read_junit(xml_text: str, root: Path = ROOT) -> dict[str, Any]:
    """``{"seconds_by_test", "call_seconds_by_test", "passed", "failed", "skipped"}`` of a
    junit XML: a test's seconds with its fixtures' set-up and teardown, and its call's
    alone (the ``call_seconds`` property ``tests/conftest.py`` writes). Pure."""
    seconds: dict[str, float] = {}
    calls: dict[str, float] = {}
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for case in ET.fromstring(xml_text).iter("testcase"):
        key = _key(case.get("classname", ""), case.get("name", ""), root)
        seconds[key] = round(seconds.get(key, 0.0) + float(case.get("time") or 0.0), 2)
        for prop in case.iter("property"):
            if prop.get("name") == "call_seconds":
                calls[key] = round(calls.get(key, 0.0) + float(prop.get("value") or 0.0), 2)
        tags = {child.tag for child in case}
        outcome = "failed" if tags & {"failure", "error"} else \
            "skipped" if "skipped" in tags else "passed"
        counts[outcome] += 1
    return {"seconds_by_test": seconds, "call_seconds_by_test": calls, **counts}


def _node_key(node_id: str) -> str:
    """``path::[Class::]function`` of a pytest node id (its parameters dropped). Pure."""
    return node_id.split("[")[0]


_MARKS = "test_times-marks\t"
"""The prefix of :func:`pytest_collection_modifyitems`'s lines, which :func:`tiers_of` reads."""


def tier_by_marks(marks: set[str]) -> str:
    """The tier whose ``-m`` expression selects a test with these marker names. Pure."""
    for name in ("long", "test_command"):
        expression = TIERS[name][TIERS[name].index("-m") + 1]
        names = set(re.findall(r"[a-z_]+", expression)) - {"and", "or", "not"}
        # The tiers' own -m expressions (constants above) are Python boolean expressions.
        if eval(expression, {"__builtins__": {}}, {n: n in marks for n in names}):
            return name
    return "connect"


def pytest_collection_modifyitems(items: list[Any]) -> None:
    """Print each collected test's markers (this module as a plugin of :func:`tiers_of`)."""
    for item in items:
        print(f"{_MARKS}{item.nodeid}\t{','.join(m.name for m in item.iter_markers())}")


def tiers_of(tests: list[str]) -> dict[str, str]:
    """The tier each test function of ``tests`` runs in, as its markers select it."""
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "benchmarks.test_times", "-s", *tests],
        cwd=ROOT, capture_output=True, text=True, check=False)
    found: dict[str, str] = {}
    for line in listed.stdout.splitlines():
        if line.startswith(_MARKS):
            node_id, marks = line[len(_MARKS):].split("\t")
            found[_node_key(node_id)] = tier_by_marks(set(marks.split(",")) - {""})
    return found


def _run(args: list[str], timeout: float) -> tuple[str, float, int]:
    """pytest with ``args`` in a process of its own: (junit XML, wall seconds, exit)."""
    with tempfile.TemporaryDirectory() as tmp:
        xml_path = Path(tmp) / "tests.xml"
        started = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "pytest", *args, "-q",
                              f"--junitxml={xml_path}"], cwd=ROOT, check=False,
                             timeout=timeout)
        wall = time.monotonic() - started
        return (xml_path.read_text() if xml_path.exists() else ""), wall, run.returncode


def load(path: Path | None = None) -> dict[str, Any]:
    """The recorded times (``{}`` when none are)."""
    path = path or RESULTS_DIR / RESULT
    return json.loads(path.read_text()) if path.exists() else {}


def totals(data: dict[str, Any]) -> dict[str, Any]:
    """The summary figures of recorded times (None where a tier is missing). Pure."""
    tiers = data.get("tiers", {})
    minutes = {name: tiers[name]["minutes"] for name in TIERS if name in tiers}
    whole = len(minutes) == len(TIERS) and "setup_minutes" in data
    return {
        "test_command_minutes": minutes.get("test_command"),
        "ci_minutes": round(sum(minutes.values()) + data["setup_minutes"], 1) if whole else None,
        "tests_passed": sum(tiers[name]["passed"] for name in minutes) if whole else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tier", action="append", choices=sorted(TIERS),
                        help="run this tier (repeatable; default: every tier)")
    parser.add_argument("--only", nargs="+", metavar="TEST",
                        help="time these tests alone and merge their seconds (no tier minutes)")
    parser.add_argument("--junit", action="append", default=[], metavar="TIER=XML",
                        help="read a tier's junit XML of a run made elsewhere")
    parser.add_argument("--wall", action="append", default=[], metavar="TIER=SECONDS",
                        help="the wall seconds of a --junit tier's run")
    parser.add_argument("--setup-seconds", type=float,
                        help="set-up's seconds on a fresh clone (setup.sh), for ci_minutes")
    parser.add_argument("--note", help="how the sitting went (another load on the machine?)")
    parser.add_argument("--timeout", type=float, default=3 * 3600.0)
    args = parser.parse_args(argv)
    data = load()
    data.setdefault("tiers", {})
    exit_code = 0
    if args.only:
        xml, _, exit_code = _run(["-p", "no:cacheprovider", *args.only], args.timeout)
        read = read_junit(xml)
        timed = read["seconds_by_test"]
        for tier in data["tiers"].values():
            for key in timed:
                for field in ("seconds_by_test", "call_seconds_by_test"):
                    tier.get(field, {}).pop(key, None)
        tier_of = tiers_of(args.only)
        for key, seconds in timed.items():
            tier_name = "connect" if "integration/connect/" in key \
                else tier_of.get(key, "test_command")
            tier = data["tiers"].setdefault(tier_name, {"seconds_by_test": {}})
            tier["seconds_by_test"][key] = seconds
            if key in read["call_seconds_by_test"]:
                tier.setdefault("call_seconds_by_test", {})[key] = \
                    read["call_seconds_by_test"][key]
    walls = dict(item.split("=", 1) for item in args.wall)
    for item in args.junit:
        name, path = item.split("=", 1)
        data["tiers"][name] = {**read_junit(Path(path).read_text()),
                               "minutes": round(float(walls[name]) / 60, 1)}
    measured_elsewhere = args.only or args.junit or args.note or args.setup_seconds
    tiers_measured = bool(args.junit)
    for name in args.tier or ([] if measured_elsewhere else list(TIERS)):
        tiers_measured = True
        print(f"test_times: tier {name}: pytest {' '.join(TIERS[name])}", flush=True)
        xml, wall, code = _run(TIERS[name], args.timeout)
        exit_code = exit_code or code
        data["tiers"][name] = {**read_junit(xml), "minutes": round(wall / 60, 1)}
        print(f"test_times: tier {name}: {wall / 60:.1f} min, exit {code}", flush=True)
    if args.setup_seconds is not None:
        data["setup_minutes"] = round(args.setup_seconds / 60, 1)
    if args.note:
        data["note"] = args.note
    if tiers_measured or "metadata" not in data:
        # The record is of the sitting that measured its tiers' minutes: seconds of new
        # tests (--only), a note or set-up's seconds leave it that sitting's.
        data["metadata"] = {**run_metadata(), "commit": commit()}
    write_json(RESULT, data)
    figures = {k: v for k, v in totals(data).items() if v is not None}
    merge_summary(figures)
    print(json.dumps(figures))
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
