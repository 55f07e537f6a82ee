"""The wait of a claim for the record of a query its Redis does not know (catalog.py,
``_await_query_record``): waited out once per executor, not once per task attempt.

A task refused there is retried by Spark (``spark.task.maxFailures``, 4 on a cluster),
each attempt in whichever Python worker process is free; each process used to wait out
:data:`dedup.catalog.QUERY_RECORD_WAIT` again, so the refusal came after 40 s instead of
10. The executor's Python workers share Spark's per-application folder
(``_task_folder``), faked here by a temporary folder; a new worker process is one whose
``_UNKNOWN`` is empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import dedup.catalog as catalog_module
from dedup.catalog import RedisCatalog
from dedup.config import DedupConfig, RedisConfig
from dedup.exceptions import SettingChangedError

URL = "redis://user:secret-pa55@127.0.0.1:1/0"
# a full wait, give or take the last 0.2 s step (and float sums)
FULL = catalog_module.QUERY_RECORD_WAIT - 0.3


class Clock:
    """time.monotonic and time.sleep of the catalog module: sleeping advances it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(catalog_module.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(catalog_module.time, "sleep", fake.sleep)
    return fake


def _catalog(monkeypatch: pytest.MonkeyPatch, known: list[bool]) -> RedisCatalog:
    catalog = RedisCatalog(DedupConfig("t-query-record-wait", RedisConfig(URL)))
    monkeypatch.setattr(catalog, "knows_query", lambda query_id: known[0])
    return catalog


def _refused_in_a_new_worker_process(monkeypatch: pytest.MonkeyPatch, catalog: RedisCatalog,
                                     query_id: str) -> None:
    """An attempt of the task in a Python worker of its own (an empty ``_UNKNOWN``)."""
    monkeypatch.setattr(catalog_module, "_UNKNOWN", set())
    with pytest.raises(SettingChangedError,
                       match=f"has no record of streaming query {query_id} "):
        catalog._await_query_record(query_id, 3)


@pytest.fixture
def executor_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(catalog_module, "_task_folder", lambda: tmp_path, raising=False)
    return tmp_path


def test_a_retry_in_another_worker_process_is_refused_without_waiting_again(
        monkeypatch: pytest.MonkeyPatch, clock: Clock, executor_folder: Path) -> None:
    catalog = _catalog(monkeypatch, [False])
    _refused_in_a_new_worker_process(monkeypatch, catalog, "q1")
    assert clock.slept >= FULL  # the first attempt waits
    first = clock.slept
    _refused_in_a_new_worker_process(monkeypatch, catalog, "q1")
    assert clock.slept == first, "the retry waited again"
    # one marker, whose name does not show the URL's password
    [marker] = executor_folder.iterdir()
    assert "secret" not in marker.name


def test_a_record_that_lands_after_the_wait_is_still_taken(
        monkeypatch: pytest.MonkeyPatch, clock: Clock, executor_folder: Path) -> None:
    known = [False]
    catalog = _catalog(monkeypatch, known)
    _refused_in_a_new_worker_process(monkeypatch, catalog, "q2")
    known[0] = True  # the listener's record, late
    monkeypatch.setattr(catalog_module, "_UNKNOWN", set())
    catalog._await_query_record("q2", 3)  # no refusal


def test_another_query_waits_its_own_wait(
        monkeypatch: pytest.MonkeyPatch, clock: Clock, executor_folder: Path) -> None:
    catalog = _catalog(monkeypatch, [False])
    _refused_in_a_new_worker_process(monkeypatch, catalog, "q3")
    waited = clock.slept
    _refused_in_a_new_worker_process(monkeypatch, catalog, "q4")
    assert clock.slept >= waited + FULL


def test_outside_a_task_nothing_is_written_and_each_process_waits(
        monkeypatch: pytest.MonkeyPatch, clock: Clock, tmp_path: Path) -> None:
    monkeypatch.setattr(catalog_module, "_task_folder", lambda: None, raising=False)
    catalog = _catalog(monkeypatch, [False])
    _refused_in_a_new_worker_process(monkeypatch, catalog, "q5")
    _refused_in_a_new_worker_process(monkeypatch, catalog, "q5")
    assert clock.slept >= 2 * FULL
    assert not list(tmp_path.iterdir())
