"""Hostile records through the dedup decision and the sink's writer (issue 50), no Spark.

Generated partitions (:func:`benchmarks.fuzz_records.cases`: binary, empty and null
IDs, keys and values, IDs near and past ``MAX_ID_LENGTH`` or not UTF-8, odd header
names, NaN and far-future event times) run as the one-pass form's task runs them,
``keep_rows`` then ``write_batches``, against the session's Redis and Kafka. Each ends
written or refused in one ``DedupError`` line; read back ``read_committed``, the output
and the dead-letter topic hold exactly the model's records (first occurrence of each
valid ID, invalid IDs per ``invalid_ids``). ``python -m benchmarks.fuzz`` runs thousands.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings

from benchmarks.fuzz_records import Case, RecordFuzz, cases
from sinks.transactions import close_clients

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.redis]


@pytest.fixture(autouse=True)
def _close_cached_clients() -> Iterator[None]:
    yield
    close_clients()


def test_generated_records_are_written_once_or_refused_in_one_line(
        kafka_bootstrap: str, redis_url: str, app_id: str) -> None:
    fuzz = RecordFuzz(kafka_bootstrap, redis_url, app_id)
    problems: list[str] = []

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(cases())
    def run(case: Case) -> None:
        found = fuzz.run(case)
        problems.extend(found)
        assert found == [], found  # Hypothesis shrinks a case that ends badly

    run()
    # the output of every case, read once (a read per case would cost a second each)
    assert fuzz.check() == [] and problems == [], problems
    assert fuzz.tally.cases >= 150 and fuzz.tally.written > 0, fuzz.tally
