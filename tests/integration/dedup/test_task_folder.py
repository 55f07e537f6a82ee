"""``dedup.catalog._task_folder`` in real Spark tasks: one folder, shared by the Python
workers of the executor, where a retry learns that its query was waited out unknown
(tests/unit/dedup/test_query_record_wait.py has the rule; this, the folder)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from dedup.catalog import _task_folder

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _seen(_: Any) -> tuple[str, bool, int]:
    folder = _task_folder()
    assert folder is not None
    return str(folder), folder.is_dir() and os.access(folder, os.W_OK), os.getpid()


def test_every_task_of_the_executor_sees_one_writable_folder(spark: Any) -> None:
    seen = spark.sparkContext.parallelize(range(8), 8).map(_seen).collect()
    assert len({folder for folder, _, _ in seen}) == 1, seen
    assert all(writable for _, writable, _ in seen), seen
    assert _task_folder() is None  # the driver, outside a task
