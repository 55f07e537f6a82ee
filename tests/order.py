"""The order the suite runs its test files in: the longest recorded first (issue 52).

pytest-xdist hands each worker whole files (``--dist loadfile``) or contiguous runs of
tests (``--dist worksteal``) in collection order, and a long file that starts last keeps
one worker busy while the other has nothing left: the long tier's files in xdist's own
order (most tests first) left one worker about 30 s of the record's run alone at the end.
Longest first ("longest processing time first") ends both workers within a short test of
each other. The seconds are those ``benchmarks/results/test_times.json`` records for each
test function (``python -m benchmarks.test_times``); a file with none recorded (a new
one) runs last. Only the order of files changes: a file's tests keep their order and
stay together, so its module fixtures start once and a test that reads the results of
the tests before it in its file (the chaos subset's figures) still sees them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

RECORD = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "test_times.json"


def recorded_seconds(path: Path = RECORD) -> dict[str, float]:
    """Each test function's recorded seconds (``path::[Class::]function``), summed over
    the record's tiers; empty when there is no readable record."""
    try:
        tiers = json.loads(path.read_text()).get("tiers", {})
    except (OSError, ValueError):
        return {}
    seconds: dict[str, float] = {}
    for tier in tiers.values():
        for name, value in tier.get("seconds_by_test", {}).items():
            seconds[name] = seconds.get(name, 0.0) + float(value)
    return seconds


def longest_files_first(tests: Iterable[T], seconds: Mapping[str, float],
                        node_id: Callable[[T], str] = str) -> list[T]:
    """``tests`` (pytest node ids, or items with ``node_id`` giving theirs) with their
    files ordered by their recorded seconds, longest first.

    A file's seconds are those of its functions among ``tests`` (a tier runs only
    some of a file's tests); ties keep the collection order, and so does every test
    within its file. Pure.
    """
    listed = [(test, node_id(test)) for test in tests]
    functions: dict[str, set[str]] = {}
    for _, name in listed:
        functions.setdefault(name.split("::")[0], set()).add(name.split("[")[0])
    # fsum, exact and so the same in any order: a plain sum over the set came out a last
    # bit apart in processes of other hash seeds, and xdist refuses workers whose orders
    # differ.
    weight = {path: math.fsum(seconds.get(function, 0.0) for function in names)
              for path, names in functions.items()}
    first_seen = {path: index for index, path in enumerate(functions)}

    def rank(entry: tuple[T, str]) -> tuple[float, int]:
        path = entry[1].split("::")[0]
        return -weight[path], first_seen[path]

    return [test for test, _ in sorted(listed, key=rank)]
