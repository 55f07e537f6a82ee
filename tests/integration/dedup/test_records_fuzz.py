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
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import LongType

from benchmarks.fuzz_records import Case, RecordFuzz, cases, problem_code, record_ids
from dedup.ids import MAX_ID_LENGTH
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


@pytest.mark.slow
@pytest.mark.spark
# find() writes out the repr of the list it found (about 96 kB), for a report no one
# reads here, and Hypothesis warns about the size: the one warning of the slow tier.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
def test_the_harness_computes_the_id_problem_codes_the_jvm_does(spark: Any) -> None:
    """The record fuzzing computes the ID problem codes in Python (no Spark): they must
    be those of ``id_problem_column`` in the JVM for the same generated string IDs
    (characters, not bytes, against ``MAX_ID_LENGTH``; the newline; null and empty)."""
    from hypothesis import find
    from pyspark.sql import functions as sf
    from pyspark.sql.types import StringType, StructField, StructType

    from dedup.partition_step import id_problem_column

    # one seeded draw of many IDs (find: the first list at least this long)
    ids = find(st.lists(record_ids(False), min_size=300, max_size=300), lambda _: True,
               settings=settings(database=None, derandomize=True))
    ids += ["é" * MAX_ID_LENGTH, "é" * (MAX_ID_LENGTH + 1), "\U0001f4a5" * MAX_ID_LENGTH]
    frame = spark.createDataFrame([(i, value) for i, value in enumerate(ids)],
                                  StructType([StructField("n", LongType()),
                                              StructField("id", StringType())]))
    rows = frame.select("n", id_problem_column(sf.col("id")).alias("code")).collect()
    jvm = {row["n"]: row["code"] for row in rows}
    assert [jvm[i] for i in range(len(ids))] == [problem_code(value) for value in ids]
