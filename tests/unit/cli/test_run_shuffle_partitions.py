"""``dedup run``'s shuffle partitions: one per core of a local master unless the file says."""

from __future__ import annotations

import os

import pytest

from dedup.cli.config_file import SCHEMA, parse_pipeline
from dedup.cli.run import UNKNOWN_CORES_PARTITIONS, shuffle_partitions
from dedup.exceptions import ConfigError

MINIMAL = 'app_id = "p1"\n[sink]\ntopic = "out"\n'


def test_the_default_is_zero_one_per_core() -> None:
    assert SCHEMA["run"]["shuffle_partitions"] == 0
    run = parse_pipeline(MINIMAL).table("run")
    assert run["shuffle_partitions"] == 0
    assert shuffle_partitions(run, "master", run["master"]) == 2  # the default local[2]


@pytest.mark.parametrize(("master", "expected"), [
    ("local", 1), ("local[1]", 1), ("local[2]", 2), ("local[8]", 8), ("local[2,4]", 2),
    ("local[3, 2]", 3), ("local[*]", os.cpu_count() or 1), ("local[*,4]", os.cpu_count() or 1),
    ("spark://127.0.0.1:7077", UNKNOWN_CORES_PARTITIONS),
    ("local-cluster[2,1,1024]", UNKNOWN_CORES_PARTITIONS),
    ("yarn", UNKNOWN_CORES_PARTITIONS),
])
def test_zero_follows_a_local_masters_cores(master: str, expected: int) -> None:
    assert shuffle_partitions({"shuffle_partitions": 0}, "master", master) == expected


def test_a_connect_server_gets_the_fixed_count() -> None:
    assert shuffle_partitions({"shuffle_partitions": 0}, "remote",
                              "sc://127.0.0.1:15002") == UNKNOWN_CORES_PARTITIONS


def test_a_set_count_wins_everywhere() -> None:
    for kind, where in (("master", "local[2]"), ("master", "spark://h:7077"),
                        ("remote", "sc://h:15002")):
        assert shuffle_partitions({"shuffle_partitions": 6}, kind, where) == 6


def test_a_negative_count_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"run.shuffle_partitions must be >= 1, or 0 for one "
                                          r"per core of the master, not -1"):
        shuffle_partitions({"shuffle_partitions": -1}, "master", "local[2]")


@pytest.mark.parametrize(("run", "kind", "where", "said"), [
    ({"shuffle_partitions": 3}, "master", "local[2]", "run.shuffle_partitions"),
    ({"shuffle_partitions": 0}, "master", "local[2]", "one per core of local[2]"),
    ({"shuffle_partitions": 0}, "master", "spark://h:7077", "spark://h:7077 does not say"),
    ({"shuffle_partitions": 0}, "remote", "sc://h:15002", "sc://h:15002 does not say"),
])
def test_the_start_line_says_why_the_count(run: dict[str, int], kind: str, where: str,
                                           said: str) -> None:
    """``dedup run`` prints the count it chose and why (issue 51, item 5)."""
    from dedup.cli.run import shuffle_partitions_reason

    assert said in shuffle_partitions_reason(run, kind, where)
