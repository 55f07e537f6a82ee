"""Batch markers that Kafka deleted (``offsets.retention.minutes`` passed during a stop).

The markers are consumer-group offsets. A batch committed to Kafka but not yet
to Spark's log, retried after the broker deleted the group, must not be
produced again: with a Redis (``redis.url``) the sink keeps a copy of each
partition's last committed batch there, where nothing expires it.
Deleting the marker group with the admin client stands in for the expiry.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from dedup.config import RedisConfig
from dedup.constants import RECORD_ID_HEADER
from sinks import SinkConfig
from sinks.admin import prepare
from sinks.kafka_io import consume_all, ensure_topic
from sinks.records import OutRecord
from sinks.transactions import close_clients, write_partition

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.redis]


@pytest.fixture(autouse=True)
def _close_cached_clients() -> Iterator[None]:
    yield
    close_clients()


def _records(topic: str, batch: int, n: int = 20) -> list[OutRecord]:
    return [OutRecord(topic, None, f"k{batch}-{i}".encode(), f"v{batch}-{i}".encode(), (),
                      f"id-{batch}-{i}".encode()) for i in range(n)]


def _sink_with_batch_0(bootstrap: str, redis_url: str, app_id: str) -> tuple[str, SinkConfig]:
    """A strong-productions sink of one partition whose batch 0 is committed."""
    topic = f"{app_id}-out"
    config = SinkConfig(app_id=app_id, bootstrap_servers=bootstrap, topic=topic,
                        redis=RedisConfig(redis_url))
    prepare(config)
    ensure_topic(bootstrap, topic, 1)
    write_partition(config, _records(topic, 0), "query-1", 0, 0)
    return topic, config


def _expire_markers(bootstrap: str, group: str) -> None:
    close_clients()  # the cached marker consumer and producer, as after a long stop
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_consumer_groups([group], request_timeout=30).values():
        future.result(30)


def test_a_batch_retried_after_its_kafka_marker_expired_is_not_produced_again(
        kafka_bootstrap: str, redis_url: str, app_id: str) -> None:
    topic, config = _sink_with_batch_0(kafka_bootstrap, redis_url, app_id)
    first = write_partition(config, _records(topic, 1), "query-1", 1, 0)
    assert not first.skipped
    # Spark did not commit batch 1; the query stays down past the marker retention.
    _expire_markers(kafka_bootstrap, config.marker_group(0))
    retry = write_partition(config, _records(topic, 1), "query-1", 1, 0)
    ids = [(r.header(RECORD_ID_HEADER) or b"").decode()
           for r in consume_all(kafka_bootstrap, topic, "read_committed")]
    assert len(ids) == len(set(ids)) == 40, f"{len(ids) - len(set(ids))} records duplicated"
    assert retry.skipped


def test_an_old_commit_intent_without_a_marker_is_refused(kafka_bootstrap: str,
                                                         redis_url: str, app_id: str) -> None:
    """A crash between the Kafka commit and the Redis copy, then a stop longer than the
    retention: whether the batch is in Kafka cannot be told, so it is refused."""
    from sinks import MarkerLostError
    from sinks.checkpoint import CheckpointStore

    topic, config = _sink_with_batch_0(kafka_bootstrap, redis_url, app_id)
    store = CheckpointStore.for_config(config)
    store.record_intent("query-1", 1, 0)  # ... and the worker died before the commit
    store.set_marker_retention(0)  # every intent is older than the retention
    _expire_markers(kafka_bootstrap, config.marker_group(0))
    # The output tells: none of the batch's records is there, so it was never committed.
    retry = write_partition(config, _records(topic, 1), "query-1", 1, 0)
    assert not retry.skipped and retry.produced == 20
    ids = [(r.header(RECORD_ID_HEADER) or b"").decode()
           for r in consume_all(kafka_bootstrap, topic, "read_committed")]
    assert len(ids) == len(set(ids)) == 40
    # Only records without an ID (dead letters) leave it undecidable: refused.
    store.record_intent("query-1", 2, 0)
    _expire_markers(kafka_bootstrap, config.marker_group(0))
    nameless = [r._replace(record_id=b"") for r in _records(topic, 2)]
    with pytest.raises(MarkerLostError, match=r"offsets\.retention\.minutes") as refusal:
        write_partition(config, nameless, "query-1", 2, 0)
    # The advice, literally (issue 33, item 4): "check the output topic for records of
    # this batch, then resume with a new query id". The output holds none of batch 2, so
    # the batch was never committed: a new query id (the old query stopped, releasing its
    # output) writes it, once.
    assert "check the output topic for records of this batch, then resume with a new " \
        "query id" in str(refusal.value)
    values = [r.value for r in consume_all(kafka_bootstrap, topic, "read_committed")]
    assert not [v for v in values if v.startswith(b"v2-")], "batch 2 is in the output"
    store.release_lease("query-1")
    resumed = write_partition(config, nameless, "query-2", 2, 0)
    assert not resumed.skipped and resumed.produced == 20
    values = [r.value for r in consume_all(kafka_bootstrap, topic, "read_committed")]
    assert sorted(v for v in values if v.startswith(b"v2-")) == sorted(
        r.value for r in nameless)
    assert len(values) == 60  # batches 0 and 1 with IDs, batch 2 without, each once


def test_a_commit_whose_redis_copy_was_never_written_is_found_in_the_output(
        kafka_bootstrap: str, redis_url: str, app_id: str) -> None:
    """The worker died between the Kafka commit and its Redis copy, then the query
    stayed down past the retention: the batch's records in the output say it is in
    (the chaos kind marker_retention, run 110 of 2026-11-24, was refused here)."""
    from sinks.checkpoint import CheckpointStore

    topic, config = _sink_with_batch_0(kafka_bootstrap, redis_url, app_id)
    store = CheckpointStore.for_config(config)
    assert not write_partition(config, _records(topic, 1), "query-1", 1, 0).skipped
    # As if the worker died right after commit_transaction: the copy still says batch 0.
    store.client.hset(store.marker_key(0), "committed", "query-1:0")
    store.set_marker_retention(0)
    _expire_markers(kafka_bootstrap, config.marker_group(0))
    retry = write_partition(config, _records(topic, 1), "query-1", 1, 0)
    ids = [(r.header(RECORD_ID_HEADER) or b"").decode()
           for r in consume_all(kafka_bootstrap, topic, "read_committed")]
    assert len(ids) - len(set(ids)) == 0, f"{len(ids) - len(set(ids))} records duplicated"
    assert len(ids) == 40 and retry.skipped
