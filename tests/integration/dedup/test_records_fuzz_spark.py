"""Hostile records through Spark end to end (issue 50): a seeded slice, one query.

:func:`benchmarks.fuzz_spark.run_spark_cases` puts generated records
(:func:`benchmarks.fuzz_records.cases`: null, empty, too long, newline, non-ASCII and
binary IDs, one not UTF-8 last; null, empty, binary and large keys and values; odd
header names; null, NaN, infinite, far and late event times) into a Kafka topic and
runs them through one streaming query of the one-pass form (``read_kafka`` with the ID
from a header, ``deduplicate_to_kafka``, ``availableNow`` in micro-batches of 20), under
``invalid_ids="dead_letter"``. Read back ``read_committed``: each record the model
writes is there once (the first occurrence of each valid ID that is not late, over all
batches), each invalid ID once in the dead-letter topic, and the last batch, which holds
the ID that is not UTF-8, is refused in one ``RecordIdError`` line (never a traceback).
A null ID is a ``fuzz-id`` header with a null value, never a record without the header
(:data:`benchmarks.fuzz_spark.ABSENT_ID_HEADERS` says why).
``python -m benchmarks.fuzz`` runs a few hundred records under each policy.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.fuzz_spark import run_spark_cases
from sinks.transactions import close_clients

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis]

CASES = 70
SEED = 50
"""A slice that holds every kind (null, empty, too long, newline, not-UTF-8 IDs; odd
header names; NaN, infinite and finite event times; duplicates across batches)."""


@pytest.fixture(autouse=True)
def _close_cached_clients() -> Iterator[None]:
    yield
    close_clients()


@pytest.mark.slow
def test_generated_records_through_one_streaming_query_are_written_once_or_refused(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_path: Path) -> None:
    result = run_spark_cases(spark, kafka_bootstrap, redis_url, app_id, CASES, SEED,
                             checkpoint=str(tmp_path / "checkpoint"), timeout=120)
    summary = {k: v for k, v in result.items() if k != "examples"}
    assert result["problems"] == {}, (summary, result["examples"])
    assert (result["lost"], result["duplicated"], result["phantom"],
            result["tracebacks"]) == (0, 0, 0, 0), summary
    assert result["cases"] == CASES and result["batches"] >= 3, summary
    assert result["written"] > 0 and result["dropped"] > 0, summary
    assert result["dead_lettered"] > 0, summary  # the slice holds invalid IDs
    # the poison's batch: refused in one line, the poison itself never written
    assert result["refusal"].startswith("RecordIdError: ") and result["refused"] >= 1, summary
