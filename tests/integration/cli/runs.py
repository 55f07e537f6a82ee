"""Run ``dedup run``'s query in the test's own Spark session, to the end of its input."""

from __future__ import annotations

import time
from typing import Any

from dedup.cli.pipeline import Addresses, start_query
from tests.integration.restarts import met_replay_bug


def run_to_end(spark: Any, pipeline: Any, addresses: Addresses, checkpoint: str,
               until_row: int | None = None) -> str:
    """Run the query until the input is consumed; its error as text, "" if none.

    With ``until_row``, until the synthetic source's row ``until_row`` is read: with
    rows_per_second a source offers rows only as time passes, so "all available"
    comes in steps. On Spark 4.1's SPARK-55271 the query starts once more, as
    ``dedup run`` does (tests/integration/restarts.py).
    """
    error = _run_once(spark, pipeline, addresses, checkpoint, until_row)
    if met_replay_bug(error):
        error = _run_once(spark, pipeline, addresses, checkpoint, until_row)
    return error


def _run_once(spark: Any, pipeline: Any, addresses: Addresses, checkpoint: str,
              until_row: int | None) -> str:
    try:
        query = start_query(spark, pipeline, addresses, checkpoint)
    except Exception as exc:  # a refusal at start
        return f"{type(exc).__name__}: {exc}"
    deadline = time.monotonic() + 120
    try:
        query.processAllAvailable()
        while until_row is not None and query.isActive and time.monotonic() < deadline:
            ends = [s.get("endOffset") for s in (query.lastProgress or {}).get("sources", [])]
            if any('"row"' in str(e).replace("'", '"') and
                   int(str(e).split(":")[-1].strip(" }")) >= until_row for e in ends if e):
                break
            time.sleep(0.5)
            query.processAllAvailable()
    except Exception:  # the query's error, read below
        pass
    finally:
        query.stop()
    error = query.exception()
    return "" if error is None else f"{type(error).__name__}: {error}"
