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

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from dedup.cli.config_file import parse_pipeline
from dedup.cli.pipeline import Addresses, start_query
from dedup.failpoints import arm, fired
from tests.integration.cli.runs import run_to_end
from tests.integration.sinks.pipeline import (
    Topics,
    check_exact,
    fill_input,
    resend_copies,
    wait_for,
    wait_for_the_stalled_task_alone,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis]

RECORDS = 300
MORE = 60


def _pipeline(app_id: str, topics: Topics, **changed: str) -> Any:
    """The pipeline file: each table's lines, a key changed by ``table__key=value``
    (the value as TOML writes it; "" leaves the key out)."""
    return parse_pipeline(_pipeline_text(app_id, topics, **changed))


def _pipeline_text(app_id: str, topics: Topics, **changed: str) -> str:
    """The text of :func:`_pipeline` (for a ``dedup run`` of its own)."""
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
    return text


_run = run_to_end


def _partial_batch(spark: Any, pipeline: Any, addresses: Addresses, checkpoint: str,
                   faults: str) -> None:
    """Batch 0 committed; of batch 1, partition 3 checkpointed only, the others
    committed; then the query stops."""
    arm(faults, "sink.after_checkpoint", "sleep", match={"batch": 1, "partition": 3},
        seconds=30)
    query = start_query(spark, pipeline, addresses, checkpoint, fail_point_dir=faults)
    try:
        wait_for(lambda: bool(fired(faults, "sink.after_checkpoint")) or not query.isActive,
                 timeout=300)
        assert fired(faults, "sink.after_checkpoint"), \
            f"the stalled fail-point never fired: {query.exception()} {query.lastProgress}"
        # the other partitions of batch 1 finish their commits (fail-point: 30 s)
        wait_for_the_stalled_task_alone(spark, timeout=25)
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


@pytest.mark.slow
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


@pytest.mark.slow
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
        # the other partitions of batch 1 finish their commits (fail-point: 30 s)
        wait_for_the_stalled_task_alone(spark, timeout=25)
    finally:
        query.stop()
    written = len(read_output(kafka_bootstrap, topics.out))
    error = _run(spark, _pipeline(app_id, topics), addresses, tmp_checkpoint)
    assert "SettingChangedError" in error and "A dedup step added to a pipeline that ran " \
        "without one needs a new checkpoint" in error, error
    assert len(read_output(kafka_bootstrap, topics.out)) == written


# The synthetic source's keys: (value before, value after) of the "down" direction, and
# whether the change gives the rows of an offset range other record IDs (a batch already
# read then claims other IDs at its replay).
SYNTHETIC: dict[str, tuple[str, str, bool]] = {
    "seed": ("2", "1", True),
    "rows_per_batch": ("100", "60", True),
    "duplicate_rate": ("0.3", "0.1", True),
    "duplicate_distance": ('"later_batches"', '"same_batch"', True),
    # not for batch 1 (its duplicates may reach back to batch 0 under either gap); for
    # a batch further on, another gap gives other IDs and is refused like the above
    "duplicate_gap_batches": ("3", "1", False),
    "total_rows": ("400", "300", False),
    "rows_per_second": ("500", "0", False),
    "num_keys": ("50", "5", False),
    "key_skew": ("1.0", "0", False),
    "payload_bytes": ("40", "20", False),
    "num_partitions": ("3", "1", False),
}
BASE_SOURCE = {"type": '"synthetic"', "seed": "1", "rows_per_batch": "100",
               "total_rows": "400", "duplicate_rate": "0.3", "num_partitions": "2"}


def _synthetic_pipeline(app_id: str, out: str, keys: dict[str, str]) -> Any:
    source = {**BASE_SOURCE, **keys}
    return parse_pipeline(
        f'app_id = "{app_id}"\n[source]\n'
        + "".join(f"{k} = {v}\n" for k, v in source.items())
        + f'[dedup]\nnum_shards = 8\n[sink]\ntopic = "{out}"\nvalue_column = "payload"\n'
        '[run]\ntrigger_seconds = 0\n')


def _options(pipeline: Any) -> Any:
    from dedup.cli.config_file import SYNTHETIC_KEYS
    from sources.synthetic_rows import SyntheticOptions

    return SyntheticOptions(**{k: pipeline.table("source")[k] for k in SYNTHETIC_KEYS})


@pytest.mark.parametrize("key", list(SYNTHETIC))
def test_which_synthetic_keys_give_rows_already_read_other_ids(key: str) -> None:
    """The grouping of :data:`SYNTHETIC`, key by key and both ways: rows 100-199 (batch
    1 of the test below) get other record IDs exactly when the key is marked so."""
    from sources.synthetic_rows import synthetic_rows

    first, second, changes_ids = SYNTHETIC[key]
    for a, b in ((first, second), (second, first)):
        old = _options(_synthetic_pipeline("ids", "out", {key: a}))
        new = _options(_synthetic_pipeline("ids", "out", {key: b}))
        same = [r[0] for r in synthetic_rows(old, 100, 200)] == \
            [r[0] for r in synthetic_rows(new, 100, 200)]
        assert same != changes_ids, f"{key} {a} -> {b}: same IDs {same}"


@pytest.mark.slow
@pytest.mark.parametrize(("changes_ids", "direction"),
                         [(True, "down"), (True, "up"), (False, "down"), (False, "up")],
                         ids=["ids-down", "ids-up", "shape-down", "shape-up"])
def test_synthetic_source_keys_changed_mid_batch(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any, changes_ids: bool, direction: str) -> None:
    """The synthetic source's keys changed together while a batch is partly committed
    (those that give rows other IDs in one run, the others in another; each down and
    up). Other IDs: the replayed batch claims other IDs than its first attempt, refused
    at the first claim ("an input that changed between attempts ... make the source
    replayable"); doing so (the old keys until the batch is committed) is exact. The
    others work: the output is the first copy of each ID of the rows actually read,
    batches already planned under the old keys, the rest under the new (the source's own
    duplicates are the re-sent copies of earlier records); each ID once (payloads are
    not compared there: payload_bytes is among the keys changed)."""
    from dedup.verify import expected_first_occurrences
    from sinks.kafka_io import ensure_topic
    from sources.synthetic_rows import synthetic_rows

    keys = {k: v for k, v in SYNTHETIC.items() if v[2] == changes_ids}
    first = {k: v[0] if direction == "down" else v[1] for k, v in keys.items()}
    second = {k: v[1] if direction == "down" else v[0] for k, v in keys.items()}
    out = f"{app_id}-out"
    ensure_topic(kafka_bootstrap, out, 2)
    addresses = Addresses(redis_url, kafka_bootstrap, kafka_bootstrap)
    before = _synthetic_pipeline(app_id, out, first)
    after = _synthetic_pipeline(app_id, out, second)
    _partial_batch(spark, before, addresses, tmp_checkpoint, str(tmp_path / "f"))
    old, new = _options(before), _options(after)
    error = _run(spark, after, addresses, tmp_checkpoint, until_row=new.total_rows)
    if changes_ids:
        assert "was recorded for other IDs" in error and "make the source replayable" \
            in error, f"{direction}: not refused ({error!r})"
        assert not _run(spark, before, addresses, tmp_checkpoint)  # the advice
        rows = list(synthetic_rows(old, 0, old.total_rows))
    else:
        assert not error, f"{direction}: {error}"
        read = 2 * old.rows_per_batch  # batches 0 and 1, in the offset log
        rows = [*synthetic_rows(old, 0, read), *synthetic_rows(new, read, new.total_rows)]
    expected = expected_first_occurrences((r[0], r[2]) for r in rows)
    report = check_exact(kafka_bootstrap, out, {k: v.encode() for k, v in expected.items()})
    # IDs: each once. Payloads: a changed payload_bytes (or a rate that made batches
    # smaller than rows_per_batch) moves where old payloads end, so they are compared
    # only where the keys were not changed mid-run.
    assert (report.lost, report.duplicated, report.phantoms, report.open_transactions) \
        == (0, 0, 0, 0), f"{direction}: {report.summary()}"
    assert not changes_ids or report.ok, f"{direction}: {report.summary()}"


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


@pytest.mark.slow
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


@pytest.mark.slow
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


def test_the_sink_type_changed_mid_batch_is_refused_until_the_batch_is_committed(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any) -> None:
    """``[sink] type`` from kafka to console while a batch is partly committed: the
    console would take the replayed batch, Spark would record it done, and the Kafka
    partitions not yet committed would never reach the topic the batch began in (the
    topic's rows of ``[sink] topic`` are refused the same way). Refused at start; as
    the refusal says, kafka until the batch is committed, then the console: the topic
    holds every record read until the change, none twice, and the console run adds
    nothing to it."""
    from tests.integration.sinks.pipeline import read_output

    error, report, run = _changed_mid_batch(
        spark, kafka_bootstrap, redis_url, app_id, tmp_checkpoint, str(tmp_path / "f"),
        {}, {"sink__type": '"console"'})
    assert "SettingChangedError" in error and 'sink.type = "kafka" until batch 1 is ' \
        "committed" in error, f"not refused: {error!r} {report().summary()}"
    assert not run()  # the advice: the Kafka sink until the batch is committed
    final = report()
    assert final.ok and final.open_transactions == 0, final.summary()
    written = len(read_output(kafka_bootstrap, f"{app_id}-out"))
    assert not run(sink__type='"console"')  # then the console
    assert len(read_output(kafka_bootstrap, f"{app_id}-out")) == written


def test_the_sink_type_back_from_console_to_kafka_writes_the_later_batches_exactly(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str) -> None:
    """``[sink] type`` kafka -> console after a clean stop, then back to kafka, the
    checkpoint kept: the console takes the batches read meanwhile (it is not
    exactly-once, and they are not in the topic: their records count as seen); back
    on Kafka the topic gets every later record once, and re-sent copies of records
    the console or the topic took are dropped."""
    topics, expected = fill_input(kafka_bootstrap, app_id, records=RECORDS, duplicates=30)
    addresses = Addresses(redis_url, kafka_bootstrap, kafka_bootstrap)
    assert not _run(spark, _pipeline(app_id, topics), addresses, tmp_checkpoint)
    first = check_exact(kafka_bootstrap, topics.out, expected)
    assert first.ok and first.open_transactions == 0, first.summary()
    _more_input(kafka_bootstrap, topics.source, {})  # read by the console, not expected
    assert not _run(spark, _pipeline(app_id, topics, sink__type='"console"'), addresses,
                    tmp_checkpoint)
    assert check_exact(kafka_bootstrap, topics.out, expected).observed == first.observed
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(RECORDS + MORE, RECORDS + 2 * MORE):
        key, value = f"id-{i:05d}", f"value-{i}".encode()
        producer.produce(topics.source, key=key.encode(), value=value, partition=i % 2)
        expected[key] = value
    for i in range(RECORDS, RECORDS + 10):  # copies of records the console took
        producer.produce(topics.source, key=f"id-{i:05d}".encode(),
                         value=f"value-{i}-copy".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    resend_copies(kafka_bootstrap, topics.source)  # copies of records the topic took
    assert not _run(spark, _pipeline(app_id, topics), addresses, tmp_checkpoint)
    final = check_exact(kafka_bootstrap, topics.out, expected)
    assert final.ok and final.open_transactions == 0, final.summary()


@pytest.mark.slow
def test_the_master_and_the_source_address_changed_mid_batch_keep_the_output_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any) -> None:
    """``[run] master`` and ``[source] bootstrap_servers`` changed while a batch is partly
    committed: the batch was begun by the test session (master ``local[2,4]``, the
    source reached as ``127.0.0.1:<port>``); ``dedup run`` finishes it in a process of
    its own under ``local[1]``, reaching the same broker as ``localhost:<port>``, with
    more input (re-sent copies included). Neither decides where a record goes: the
    recorded partition count, the sink's transactional ids and the checkpoint's offsets
    do. Another Kafka cluster behind the source address is not tested."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.integration.cli.jars import jar_env

    topics, expected = fill_input(kafka_bootstrap, app_id, records=RECORDS, duplicates=30)
    host, port = kafka_bootstrap.rsplit(":", 1)
    assert host == "127.0.0.1", kafka_bootstrap  # the other spelling below is localhost
    _partial_batch(spark, _pipeline(app_id, topics),
                   Addresses(redis_url, kafka_bootstrap, kafka_bootstrap), tmp_checkpoint,
                   str(tmp_path / "f"))
    assert check_exact(kafka_bootstrap, topics.out, expected).lost > 0
    _more_input(kafka_bootstrap, topics.source, expected)
    config = tmp_path / "pipeline.toml"
    config.write_text(_pipeline_text(
        app_id, topics, run__master='"local[1]"', run__stop_after_idle_seconds="3",
        source__bootstrap_servers=f'"localhost:{port}"',
        sink__bootstrap_servers=f'"{kafka_bootstrap}"'))
    env = {**os.environ, "DEDUP_CACHE_DIR": str(tmp_path / "cache"), **jar_env()}
    env.pop("DEDUP_FAIL_POINT_DIR", None)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("dedup")), "run", str(config), "--redis-url",
         redis_url, "--checkpoint", tmp_checkpoint, "--quiet"],
        capture_output=True, text=True, timeout=400, env=env, check=False)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    final = check_exact(kafka_bootstrap, topics.out, expected)
    assert final.ok and final.open_transactions == 0, final.summary()


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["mid-batch", "after-a-clean-stop"])
def test_the_source_moved_to_another_kafka_cluster_is_refused_until_a_new_checkpoint(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any, moment: str) -> None:
    """``[source] bootstrap_servers`` moved to another Kafka cluster, whose topic of the
    same name holds other records (more than the old topic's offsets), the checkpoint
    kept (IDs from the record key). Spark would resume the new cluster's topic from
    the old one's offsets: after a clean stop it skipped the new topic's first records,
    silently; in the middle of a batch the replay read other records and was refused
    at its first claim ("make the source replayable"). Refused at start; as the refusal
    says, mid-batch the old cluster until the batch is committed (run once), then (in
    both cases) the new one with a new checkpoint: every record of both topics once,
    the re-sent copies of the old topic's first records dropped."""
    from dedup.local.services import KafkaBroker
    from sinks.kafka_io import ensure_topic

    topics, expected = fill_input(kafka_bootstrap, app_id, records=RECORDS, duplicates=30)
    old = Addresses(redis_url, kafka_bootstrap, kafka_bootstrap)
    if moment == "mid-batch":
        _partial_batch(spark, _pipeline(app_id, topics), old, tmp_checkpoint,
                       str(tmp_path / "f"))
        assert check_exact(kafka_bootstrap, topics.out, expected).lost > 0
    else:
        assert not _run(spark, _pipeline(app_id, topics), old, tmp_checkpoint)
    other = KafkaBroker(tmp_path / "other", heap_mb=256)
    other.start()
    try:
        ensure_topic(other.bootstrap_servers, topics.source, 2)
        producer = Producer({"bootstrap.servers": other.bootstrap_servers})
        for i in range(2 * RECORDS):
            key, value = f"other-{i:05d}", f"other-value-{i}".encode()
            producer.produce(topics.source, key=key.encode(), value=value, partition=i % 2)
            expected[key] = value
        assert producer.flush(30) == 0
        resend_copies(kafka_bootstrap, topics.source)
        moved = Addresses(redis_url, other.bootstrap_servers, kafka_bootstrap)
        error = _run(spark, _pipeline(app_id, topics), moved, tmp_checkpoint)
        advice = ("until batch 1 is committed (run once), then start with a new checkpoint"
                  if moment == "mid-batch" else "or start with a new checkpoint")
        assert "SettingChangedError" in error and advice in error, \
            f"not refused as expected: {error[:600]!r} " \
            f"{check_exact(kafka_bootstrap, topics.out, expected).summary()}"
        if moment == "mid-batch":  # as the refusal says: the old cluster, run once
            assert not _run(spark, _pipeline(app_id, topics), old, tmp_checkpoint)
        # then the new cluster, with a new checkpoint
        assert not _run(spark, _pipeline(app_id, topics), moved, str(tmp_path / "new"))
        final = check_exact(kafka_bootstrap, topics.out, expected)
        assert final.ok and final.open_transactions == 0, final.summary()
    finally:
        other.stop()


FILE_SCHEMA = '"id string, value string"'


def _files_pipeline(app_id: str, out: str, path: Any, **changed: str) -> Any:
    """A files source (the default record IDs: a hash of every column) into ``out``."""
    return parse_pipeline(_files_pipeline_text(app_id, out, path, **changed))


def _files_pipeline_text(app_id: str, out: str, path: Any, **changed: str) -> str:
    """The text of :func:`_files_pipeline`."""
    source = {"type": '"files"', "path": f'"{path}"', "format": '"json"',
              "schema": FILE_SCHEMA, "max_files_per_trigger": "2", **changed}
    return (f'app_id = "{app_id}"\n[source]\n'
            + "".join(f"{k} = {v}\n" for k, v in source.items())
            + f'[dedup]\nnum_shards = 8\n[sink]\ntopic = "{out}"\nvalue_column = "value"\n'
            '[run]\ntrigger_seconds = 0\n')


def _write_files(folder: Any, first: int, files: int, expected: dict[str, bytes],
                 copies: int = 0) -> None:
    """``files`` JSON-lines files of 25 new records each from record ``first`` on (the
    last one also with ``copies`` copies of records 0.. of the first files), written
    elsewhere and renamed in, as a file source needs; ``expected`` gets the new
    records under the ID the files source gives them (sha-256 of the row's JSON)."""
    import hashlib
    import json
    import os

    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        rows = [{"id": f"id-{i:05d}", "value": f"value-{i}"}
                for i in range(first + 25 * f, first + 25 * (f + 1))]
        if f == files - 1:
            rows += [{"id": f"id-{i:05d}", "value": f"value-{i}"} for i in range(copies)]
        for row in rows:
            text = json.dumps(row, separators=(",", ":"))
            expected.setdefault(hashlib.sha256(text.encode()).hexdigest()[:32],
                                row["value"].encode())
        name = f"part-{first + 25 * f:05d}.json"
        staged = folder.parent / f".{folder.name}-{name}"
        staged.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(staged, folder / name)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["same-rows", "same-rows-new-checkpoint", "other-rows"])
def test_files_source_keys_changed_mid_batch(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any, kind: str) -> None:
    """The files source's keys changed while a batch is partly committed. Same rows:
    ``path`` moved to a folder holding copies of the old files, and
    ``max_files_per_trigger`` 2 -> 1: refused at start (at every start Spark's file
    source reads the last planned batch's files again, by the names in its log, and
    they are not under the new path: Spark's own error says only "Wrong basePath"),
    writing nothing; as the refusal says, the old path restored (and
    ``max_files_per_trigger`` changed alone mid-batch) is exact, and so is its advice
    for the move: the old path until the batch is committed, then the new path with a
    new checkpoint (the catalog drops the records read again). Other rows:
    ``format`` json -> csv and ``schema`` (``value`` an int) make the replayed batch's
    rows other records with other IDs, refused at the first claim ("make the source
    replayable"); as it says, the old keys until the batch is committed, with more
    input, is exact."""
    import shutil

    from sinks.kafka_io import ensure_topic

    out = f"{app_id}-out"
    ensure_topic(kafka_bootstrap, out, 2)
    addresses = Addresses(redis_url, kafka_bootstrap, kafka_bootstrap)
    old, expected = tmp_path / "in", {}
    _write_files(old, 0, 6, expected, copies=10)
    before = _files_pipeline(app_id, out, old)
    _partial_batch(spark, before, addresses, tmp_checkpoint, str(tmp_path / "f"))
    partial = check_exact(kafka_bootstrap, out, expected)
    assert partial.lost > 0 and (partial.duplicated, partial.phantoms) == (0, 0), \
        partial.summary()
    checkpoint = tmp_checkpoint
    if kind.startswith("same-rows"):
        moved = tmp_path / "moved"
        shutil.copytree(old, moved)
        error = _run(spark, _files_pipeline(app_id, out, moved, max_files_per_trigger="1"),
                     addresses, tmp_checkpoint)
        # at every start Spark's file source reads the last planned batch's files
        # again, by the names in its log, and they are not under the new path
        assert "SettingChangedError" in error and f"restore source.path {str(old)!r}" \
            in error, f"not refused: {error!r}"
        if kind == "same-rows":
            # the advice (max_files_per_trigger changed alone mid-batch)
            after = _files_pipeline(app_id, out, old, max_files_per_trigger="1")
        else:
            # its other advice, for the move: the old path until the unfinished batch
            # is committed, then the new path with a new checkpoint (a new checkpoint
            # at once was refused: the batch's claims belong to the old query)
            assert "to move to the new path, restore it until batch 1 is committed (run " \
                "once), then start with a new checkpoint" in error, error
            assert check_exact(kafka_bootstrap, out, expected).observed == partial.observed
            assert not _run(spark, _files_pipeline(app_id, out, old, max_files_per_trigger="1"),
                            addresses, tmp_checkpoint)
            after = _files_pipeline(app_id, out, moved, max_files_per_trigger="1")
            checkpoint, old = f"{tmp_checkpoint}-new", moved
    else:
        error = _run(spark, _files_pipeline(app_id, out, old, format='"csv"',
                                            schema='"id string, value int"'),
                     addresses, tmp_checkpoint)
        assert "was recorded for other IDs" in error and "make the source replayable" \
            in error, f"not refused: {error!r}"
        after = before  # the advice: the old keys until the batch is committed
    if checkpoint == tmp_checkpoint:  # the refused run wrote nothing
        assert check_exact(kafka_bootstrap, out, expected).observed == partial.observed
    _write_files(old, 150, 2, expected, copies=30)  # more input, copies included
    assert not _run(spark, after, addresses, checkpoint)
    final = check_exact(kafka_bootstrap, out, expected)
    assert final.ok and final.open_transactions == 0, f"{kind}: {final.summary()}"


def test_a_files_schema_that_adds_a_column_is_refused_until_ids_are_derived_as_before(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Any) -> None:
    """``[source] schema`` gains a column while a batch is partly committed: the files
    source's default IDs hash every column, so the same records would get other IDs.
    Refused at start by the record ID strategy check (``hash:id,value`` recorded); as
    it says, IDs derived as before (``[ids] strategy = "hash"``, ``columns = ["id",
    "value"]``) with the new schema: the batch and more input (copies of earlier
    records included; the new column empty) end exact."""
    from sinks.kafka_io import ensure_topic

    out = f"{app_id}-out"
    ensure_topic(kafka_bootstrap, out, 2)
    addresses = Addresses(redis_url, kafka_bootstrap, kafka_bootstrap)
    folder, expected = tmp_path / "in", {}
    _write_files(folder, 0, 6, expected, copies=10)
    _partial_batch(spark, _files_pipeline(app_id, out, folder), addresses, tmp_checkpoint,
                   str(tmp_path / "f"))
    partial = check_exact(kafka_bootstrap, out, expected)
    assert partial.lost > 0 and (partial.duplicated, partial.phantoms) == (0, 0), \
        partial.summary()
    wider = '"id string, value string, region string"'
    error = _run(spark, _files_pipeline(app_id, out, folder, schema=wider), addresses,
                 tmp_checkpoint)
    assert "SettingChangedError" in error and "derive IDs as before (hash:id,value)" \
        in error, f"not refused: {error!r}"
    assert check_exact(kafka_bootstrap, out, expected).observed == partial.observed
    # as the refusal says: IDs derived as before, the new column read along
    text = _files_pipeline_text(app_id, out, folder, schema=wider)
    after = parse_pipeline(text + '[ids]\nstrategy = "hash"\ncolumns = ["id", "value"]\n')
    _write_files(folder, 150, 2, expected, copies=30)  # more input, copies included
    assert not _run(spark, after, addresses, tmp_checkpoint)
    final = check_exact(kafka_bootstrap, out, expected)
    assert final.ok and final.open_transactions == 0, final.summary()
