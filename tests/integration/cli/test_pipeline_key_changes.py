"""Pipeline-file keys changed between runs at the worst moment (issue 33, items 2-3).

``dedup run``'s query (``start_query``) reads a Kafka topic, deduplicates by the
record key and writes to a transactional topic. Batch 1 is left partly committed:
sink partition 3 stalls after its sink checkpoint (a sleep fail-point) while the
other partitions commit, and the query is stopped. The query restarts from the same
checkpoint with one key of the pipeline file changed, finishes, and then reads more
input: new records and re-sent copies of earlier ones. An independent
``read_committed`` consumer counts what is lost, duplicated or foreign. Verdicts
are in docs/operational-changes.md ("Every name, its verdict").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from dedup.cli.config_file import parse_pipeline
from dedup.cli.pipeline import Addresses, start_query
from dedup.failpoints import arm, fired
from tests.integration.sinks.pipeline import (
    Topics,
    check_exact,
    fill_input,
    resend_copies,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis]

RECORDS = 300
MORE = 60


def _pipeline(app_id: str, topics: Topics, **changed: str) -> Any:
    """The pipeline file: each table's lines, a key changed by ``table__key=value``
    (the value as TOML writes it; "" leaves the key out)."""
    tables: dict[str, dict[str, str]] = {
        "source": {"type": '"kafka"', "topics": f'["{topics.source}"]',
                   "max_offsets_per_trigger": "150"},
        "ids": {"strategy": '"key"'},
        "dedup": {"num_shards": "8"},
        "sink": {"topic": f'"{topics.out}"', "value_column": '"value"'},
        "run": {"trigger_seconds": "0"},
    }
    for name, value in changed.items():
        table, key = name.split("__")
        tables.setdefault(table, {})[key] = value
    text = f'app_id = "{app_id}"\n'
    for table, keys in tables.items():
        text += f"[{table}]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items() if v)
    return parse_pipeline(text)


def _run(spark: Any, pipeline: Any, addresses: Addresses, checkpoint: str) -> str:
    """Run the query until the input is consumed; its error as text, "" if none."""
    try:
        query = start_query(spark, pipeline, addresses, checkpoint)
    except Exception as exc:  # a refusal at start
        return f"{type(exc).__name__}: {exc}"
    try:
        query.processAllAvailable()
    except Exception:  # the query's error, read below
        pass
    finally:
        query.stop()
    error = query.exception()
    return "" if error is None else f"{type(error).__name__}: {error}"


def _partial_batch(spark: Any, pipeline: Any, addresses: Addresses, checkpoint: str,
                   faults: str) -> None:
    """Batch 0 committed; of batch 1, partition 3 checkpointed only, the others
    committed; then the query stops."""
    arm(faults, "sink.after_checkpoint", "sleep", match={"batch": 1, "partition": 3},
        seconds=30)
    query = start_query(spark, pipeline, addresses, checkpoint, fail_point_dir=faults)
    try:
        assert wait_for(lambda: bool(fired(faults, "sink.after_checkpoint")), timeout=150), \
            "the stalled fail-point never fired"
        time.sleep(4.0)  # the other partitions of batch 1 finish their commits
    finally:
        query.stop()


def _more_input(bootstrap: str, topic: str, expected: dict[str, bytes]) -> None:
    """New records, and copies of the first 30 (which the output must not repeat)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS, RECORDS + MORE):
        producer.produce(topic, key=f"id-{i:05d}".encode(), value=f"value-{i}".encode(),
                         partition=i % 2)
        expected[f"id-{i:05d}"] = f"value-{i}".encode()
    assert producer.flush(30) == 0
    resend_copies(bootstrap, topic)


def _changed_mid_batch(spark: Any, kafka: str, redis_url: str, app_id: str,
                       checkpoint: str, faults: str, before: dict[str, str],
                       after: dict[str, str],
                       between: Callable[[Topics, dict[str, bytes]], None] | None = None,
                       ) -> tuple[str, Any, Callable[..., str]]:
    """The partial batch under ``before``, ``between`` (an operator's action on the
    topics, adding to the expected output), the restart under ``after``, more input;
    the restart's error ("" if none), the final report and a runner for more runs."""
    topics, expected = fill_input(kafka, app_id, records=RECORDS, duplicates=30)
    addresses = Addresses(redis_url, kafka, kafka)
    _partial_batch(spark, _pipeline(app_id, topics, **before), addresses, checkpoint,
                   faults)
    partial = check_exact(kafka, topics.out, expected)
    assert partial.lost > 0 and (partial.duplicated, partial.phantoms) == (0, 0), \
        partial.summary()
    if between is not None:
        between(topics, expected)

    def run(**keys: str) -> str:
        return _run(spark, _pipeline(app_id, topics, **keys), addresses, checkpoint)

    error = run(**after)
    _more_input(kafka, topics.source, expected)
    if not error:
        error = run(**after)
    return error, (lambda: check_exact(kafka, topics.out, expected)), run


# Keys no decision of the query depends on: key -> (value before, value after) of the
# "down" direction; "up" swaps them. Changed together (one Spark run per direction,
# for the suite's time): each is read where the query starts or the run loop waits.
EXACT: dict[str, tuple[str, str]] = {
    "run__trigger_seconds": ("1", "0"),
    "run__stop_after_idle_seconds": ("30", "1"),
    "source__max_offsets_per_trigger": ("150", "40"),
    'source.options__"kafka.max.partition.fetch.bytes"': ('"1048576"', '"65536"'),
    'sink.options__"kafka.batch.size"': ('"16384"', '"1000"'),
}


@pytest.mark.parametrize("direction", ["down", "up"])
def test_pipeline_keys_changed_mid_batch_keep_the_output_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any, direction: str) -> None:
    """The keys of :data:`EXACT` changed down (or up) together while a batch is partly
    committed; down also moves ``[source] starting_offsets`` from earliest to latest
    (a kept checkpoint's offsets win; latest first would read none of the input)."""
    before = {k: v[0] if direction == "down" else v[1] for k, v in EXACT.items()}
    after = {k: v[1] if direction == "down" else v[0] for k, v in EXACT.items()}
    if direction == "down":
        before["source__starting_offsets"], after["source__starting_offsets"] = \
            '"earliest"', '"latest"'
    error, report, _ = _changed_mid_batch(
        spark, kafka_bootstrap, redis_url, app_id, tmp_checkpoint, str(tmp_path / "f"),
        before, after)
    assert not error, error
    final = report()
    assert final.ok and final.open_transactions == 0, f"{direction}: {final.summary()}"


def test_a_dedup_step_removed_mid_batch_is_refused_until_the_batch_is_committed(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any) -> None:
    """``[dedup] enabled`` turned off while a batch is partly committed: the batch's
    rows would go to other sink partitions and the committed ones hide the rest (it
    lost 37 of 360 records, no error), so it is refused at start; as the refusal says,
    the step until the batch is committed, then off: nothing lost, and from then on
    the re-sent copies pass, as asked of a pipeline without a dedup step."""
    error, report, run = _changed_mid_batch(
        spark, kafka_bootstrap, redis_url, app_id, tmp_checkpoint, str(tmp_path / "f"),
        {}, {"dedup__enabled": "false"})
    assert "SettingChangedError" in error and "dedup.enabled = true until batch 1 is " \
        "committed" in error, f"not refused: {error!r} {report().summary()}"
    assert not run()  # the advice: the dedup step until the batch is committed
    final = report()
    assert final.ok and final.open_transactions == 0, final.summary()
    resend_copies(kafka_bootstrap, f"{app_id}-in")
    assert not run(dedup__enabled="false")  # then off
    final = report()
    assert (final.lost, final.duplicated, final.phantoms) == (0, 30, 0), final.summary()


def test_a_dedup_step_added_to_a_kept_checkpoint_is_refused_at_start(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any) -> None:
    """``[dedup] enabled`` turned on for a checkpoint whose query ran without it, with a
    batch partly committed: the catalog has no record of the query, so the IDs already
    written are unknown to it; refused at start naming a new checkpoint, writing
    nothing."""
    from tests.integration.sinks.pipeline import read_output

    topics, _ = fill_input(kafka_bootstrap, app_id, records=RECORDS, duplicates=0)
    addresses = Addresses(redis_url, kafka_bootstrap, kafka_bootstrap)
    faults = str(tmp_path / "f")
    arm(faults, "sink.after_checkpoint", "sleep", match={"batch": 1, "partition": 1},
        seconds=30)
    query = start_query(spark, _pipeline(app_id, topics, dedup__enabled="false"), addresses,
                        tmp_checkpoint, fail_point_dir=faults)
    try:
        assert wait_for(lambda: bool(fired(faults, "sink.after_checkpoint")), timeout=150)
        time.sleep(4.0)
    finally:
        query.stop()
    written = len(read_output(kafka_bootstrap, topics.out))
    error = _run(spark, _pipeline(app_id, topics), addresses, tmp_checkpoint)
    assert "SettingChangedError" in error and "A dedup step added to a pipeline that ran " \
        "without one needs a new checkpoint" in error, error
    assert len(read_output(kafka_bootstrap, topics.out)) == written


def _add_partitions(bootstrap: str, topic: str, total: int) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, total)]).values():
        future.result(30)


def _partition_count(bootstrap: str, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, 30).topics
    return len(topics[topic].partitions)


def test_output_topic_partitions_added_mid_batch_keep_the_output_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any) -> None:
    """The output topic grown from 2 to 4 partitions while a batch is partly committed
    (the sink's batch markers belong to its own transactional ids, not to the topic's
    partitions). ``[sink] partitions`` is read only where ``dedup run`` creates the
    topic (``ensure_topic``, as ``run_pipeline`` calls it): on an existing topic a
    changed value changes nothing."""
    from sinks.kafka_io import ensure_topic

    def grow(topics: Topics, _expected: dict[str, bytes]) -> None:
        changed = _pipeline(app_id, topics, sink__partitions="4")
        ensure_topic(kafka_bootstrap, topics.out, changed.table("sink")["partitions"])
        assert _partition_count(kafka_bootstrap, topics.out) == 2
        _add_partitions(kafka_bootstrap, topics.out, 4)

    error, report, _run_again = _changed_mid_batch(
        spark, kafka_bootstrap, redis_url, app_id, tmp_checkpoint, str(tmp_path / "f"),
        {}, {"sink__partitions": "4"}, between=grow)
    assert not error, error
    final = report()
    assert final.ok and final.open_transactions == 0, final.summary()


def test_input_topic_partitions_or_topics_added_mid_batch_keep_the_output_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any) -> None:
    """While a batch is partly committed the input topic is grown from 2 to 3
    partitions and a second topic is added to ``[source] topics``, each with records
    of its own: Spark reads new partitions from their start, so the output is the first
    copy of every record of both topics."""
    second = f"{app_id}-in2"

    def grow(topics: Topics, expected: dict[str, bytes]) -> None:
        from sinks.kafka_io import ensure_topic

        _add_partitions(kafka_bootstrap, topics.source, 3)
        ensure_topic(kafka_bootstrap, second, 1)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for i in range(40):
            for topic, partition, prefix in ((topics.source, 2, "new-part"),
                                             (second, 0, "second")):
                key = f"{prefix}-{i:05d}"
                producer.produce(topic, key=key.encode(), value=key.encode(),
                                 partition=partition)
                expected[key] = key.encode()
        assert producer.flush(30) == 0

    topics = Topics(f"{app_id}-in", f"{app_id}-out")
    error, report, _run_again = _changed_mid_batch(
        spark, kafka_bootstrap, redis_url, app_id, tmp_checkpoint, str(tmp_path / "f"),
        {}, {"source__topics": f'["{topics.source}", "{second}"]'}, between=grow)
    assert not error, error
    final = report()
    assert final.ok and final.open_transactions == 0, final.summary()


@pytest.mark.parametrize(("key", "before", "after"), [
    ("sink__key_column", '"key"', '""'),
    ("sink__value_column", '"value"', '"key"'),
], ids=["key_column", "value_column"])
def test_a_sink_column_changed_mid_batch(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any, key: str, before: str, after: str) -> None:
    """``[sink] key_column`` and ``value_column`` decide what the records hold. A
    change the stalled partition's checkpoint does not fit (a key column dropped or
    added) is refused at the replay's first write (``CheckpointSchemaError``); doing as
    it says (the previous setting until that batch is committed, then the new one) is
    exact. A change it fits (another value column, a string either way) works: the
    replayed partition writes what it checkpointed, later batches the new values, and
    no ID is lost, repeated or foreign."""
    error, report, run = _changed_mid_batch(
        spark, kafka_bootstrap, redis_url, app_id, tmp_checkpoint, str(tmp_path / "f"),
        {key: before}, {key: after})
    if key == "sink__key_column":
        assert "CheckpointSchemaError" in error and "restore the previous code" in error, \
            f"not refused: {error!r}"
        assert not run(**{key: before})  # the advice: the previous setting until committed
        assert not run(**{key: after})  # then the new one
        final = report()
        assert final.ok and final.open_transactions == 0, final.summary()
    else:
        assert not error, error
        final = report()
        assert (final.lost, final.duplicated, final.phantoms, final.open_transactions) \
            == (0, 0, 0, 0), final.summary()
        assert final.mismatched > 0  # later batches carry the new value column


def test_the_source_type_changed_on_a_kept_checkpoint_is_refused_at_start(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any) -> None:
    """``[source] type`` changed (kafka to synthetic) while a batch is partly
    committed: Spark cannot read the offsets the checkpoint holds for another source,
    and the query fails before it writes; the old source resumes exactly."""
    error, report, run = _changed_mid_batch(
        spark, kafka_bootstrap, redis_url, app_id, tmp_checkpoint, str(tmp_path / "f"),
        {}, {"source__type": '"synthetic"', "source__topics": "", "sink__value_column": ""})
    assert error, "a synthetic source resumed a Kafka source's checkpoint"
    assert not run()
    final = report()
    assert final.ok and final.open_transactions == 0, f"{error!r}: {final.summary()}"
