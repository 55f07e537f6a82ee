"""``dedup run``'s end of a finite synthetic source (dedup.cli.pipeline.source_done),
read from the query's progress report. PySpark 4.2 reports a Python data source's
offset as JSON (``{"row":300}``); 4.1.1 as the dict's Python text (``{'row': 300}``),
and a run on 4.1.1 never stopped (found by ``benchmarks.spark_versions``: every
``dedup run`` of a finite synthetic source ran into the test's timeout)."""

from __future__ import annotations

from typing import Any

import pytest

from dedup.cli.config_file import parse_pipeline
from dedup.cli.pipeline import source_done
from dedup.cli.progress import Progress, QueryWatcher

PIPELINE = parse_pipeline('app_id = "a"\n[source]\ntype = "synthetic"\nrows_per_batch = 100\n'
                          'total_rows = 300\n[sink]\ntopic = "out"\n')


def _watcher(end: Any) -> QueryWatcher:
    watcher = QueryWatcher(Progress())
    watcher.last_progress = {"sources": [{"endOffset": end}]}
    return watcher


@pytest.mark.parametrize("end", ['{"row":300}', "{'row': 300}", {"row": 300}])
def test_the_last_row_ends_the_source_in_each_spark_versions_spelling(end: Any) -> None:
    assert source_done(PIPELINE, _watcher(end))


@pytest.mark.parametrize("end", ['{"row":200}', "{'row': 200}", "None", "", "{'row':", None])
def test_an_earlier_row_or_an_unreadable_offset_does_not(end: Any) -> None:
    assert not source_done(PIPELINE, _watcher(end))
