"""Spark 4.1's Kafka source bug SPARK-55271 told apart from other query failures
(``dedup run`` starts the query once more on it: docs/development.md)."""

from __future__ import annotations

import pytest

from dedup.spark_session import is_kafka_replay_bug

SEEN = ('[STREAM_FAILED] Query [id = 1918362c, runId = 9fa428c7] terminated with exception: '
        'Cannot invoke "scala.collection.IterableOps.map(scala.Function1)" because the return '
        'value of "scala.Option.get()" is null SQLSTATE: XXKST')


def test_the_error_4_1_1_ends_a_replayed_batch_with_is_the_bug() -> None:
    assert is_kafka_replay_bug(SEEN)
    assert is_kafka_replay_bug(RuntimeError(SEEN))


@pytest.mark.parametrize("other", [
    '[STREAM_FAILED] Query terminated with exception: Cannot invoke "scala.Option.map" '
    'because "metadata" is null',
    "CatalogStateError: app id 'x': the decision of q:1 shard 1 was recorded for other IDs",
    "",
])
def test_other_failures_are_not(other: str) -> None:
    assert not is_kafka_replay_bug(other)
