"""The input topic replaced under a kept app id (issue 33: the surface's untested rows).

The Kafka source's default record IDs are coordinates, ``topic/partition/offset``.
A topic deleted and created again, or the same name on another Kafka cluster, starts
its offsets again at 0: its records repeat coordinates that the app id has claimed,
and the dedup step would drop them as duplicates of records they are not. ``dedup
run``'s query (``start_query``, one pass, IDs of the default strategy) reads 200
records and stops; the topic is created again with 200 other records; the query
starts again with a new checkpoint. The output is read back ``read_committed`` and
counted by record key (the coordinates of the two topics coincide, so the ID header
cannot tell their records apart): lost, duplicated, foreign, each apart.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from dedup.cli.config_file import parse_pipeline
from dedup.cli.pipeline import Addresses
from sinks.kafka_io import consume_all, ensure_topic
from tests.integration.cli.runs import run_to_end

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis]

RECORDS = 200
PARTITIONS = 2


def _pipeline(app_id: str, source: str, out: str) -> Any:
    return parse_pipeline(
        f'app_id = "{app_id}"\n'
        f'[source]\ntype = "kafka"\ntopics = ["{source}"]\nmax_offsets_per_trigger = 150\n'
        '[dedup]\nnum_shards = 4\n'
        f'[sink]\ntopic = "{out}"\nvalue_column = "value"\n'
        "[run]\ntrigger_seconds = 0\n")


_run = run_to_end


def _produce(bootstrap: str, topic: str, prefix: str) -> dict[str, bytes]:
    producer = Producer({"bootstrap.servers": bootstrap})
    sent: dict[str, bytes] = {}
    for i in range(RECORDS):
        key, value = f"{prefix}-{i:05d}", f"{prefix}-value-{i}".encode()
        producer.produce(topic, key=key.encode(), value=value, partition=i % PARTITIONS)
        sent[key] = value
    assert producer.flush(30) == 0
    return sent


def _recreate(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` and create it again (a new topic id, offsets from 0)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result()
    deadline = time.monotonic() + 60
    while True:  # the deletion completes in the background
        try:
            admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    # The creation returns before the broker's metadata holds the topic (about a second
    # later on the 2-core machine): until then a describe says it does not exist.
    while True:
        try:
            admin.describe_topics(TopicCollection([topic]))[topic].result()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _recreated_with_other_records(bootstrap: str, topic: str) -> dict[str, bytes]:
    """``topic`` deleted and created again (:func:`_recreate`), then :data:`RECORDS`
    records of its own; returns them."""
    _recreate(bootstrap, topic)
    return _produce(bootstrap, topic, "new")


def _by_key(bootstrap: str, topic: str, expected: dict[str, bytes]) -> dict[str, int]:
    """The output against ``expected``, by record key."""
    seen: Counter[str] = Counter()
    wrong = 0
    for record in consume_all(bootstrap, topic, "read_committed"):
        key = (record.key or b"").decode()
        seen[key] += 1
        wrong += key in expected and record.value != expected[key]
    return {"lost": sum(1 for k in expected if k not in seen),
            "duplicated": sum(n - 1 for k, n in seen.items() if n > 1),
            "phantoms": sum(n for k, n in seen.items() if k not in expected),
            "mismatched": wrong}


def _topics(bootstrap: str, redis_url: str, app_id: str) -> tuple[str, str, Addresses]:
    """The test's input and output topics, and the addresses ``dedup run`` uses."""
    source, out = f"{app_id}-in", f"{app_id}-out"
    ensure_topic(bootstrap, source, PARTITIONS)
    ensure_topic(bootstrap, out, PARTITIONS)
    return source, out, Addresses(redis_url, bootstrap, bootstrap)


def _new_app_id_as_told(spark: Any, bootstrap: str, app_id: str, topics: tuple[str, str],
                        addresses: Addresses, checkpoint: str, refusal: str,
                        expected: dict[str, bytes]) -> dict[str, int]:
    """``refusal`` (a start on a new checkpoint, the app id kept) names the claimed
    coordinates; as it says, a new app id with a new checkpoint: the output by key."""
    source, out = topics
    assert "SettingChangedError" in refusal and "new app id with a new checkpoint" in refusal, \
        f"not refused: {refusal!r}; output {_by_key(bootstrap, out, expected)}"
    assert not _run(spark, _pipeline(f"{app_id}-2", source, out), addresses, checkpoint)
    return _by_key(bootstrap, out, expected)


def test_a_recreated_input_topic_under_coordinate_ids_is_refused_until_a_new_app_id(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_path: Any) -> None:
    """The input topic deleted and created again with other records, the app id kept,
    a new checkpoint: refused at start (the new records' coordinates are claimed);
    as the refusal says, a new app id with a new checkpoint: every record of both
    topics in the output once."""
    source, out, addresses = _topics(kafka_bootstrap, redis_url, app_id)
    expected = _produce(kafka_bootstrap, source, "old")
    assert not _run(spark, _pipeline(app_id, source, out), addresses,
                    str(tmp_path / "first"))
    assert _by_key(kafka_bootstrap, out, expected) == \
        {"lost": 0, "duplicated": 0, "phantoms": 0, "mismatched": 0}
    expected |= _recreated_with_other_records(kafka_bootstrap, source)
    error = _run(spark, _pipeline(app_id, source, out), addresses, str(tmp_path / "second"))
    assert _new_app_id_as_told(spark, kafka_bootstrap, app_id, (source, out), addresses,
                               str(tmp_path / "third"), error, expected) == \
        {"lost": 0, "duplicated": 0, "phantoms": 0, "mismatched": 0}


def test_a_recreated_input_topic_under_a_kept_checkpoint_is_refused_twice_each_advice_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_path: Any) -> None:
    """A chain of refusals, each advice followed literally. The input topic deleted and
    created again with other records, and ``dedup run``'s query started on its kept
    checkpoint: refused ("... start with a new checkpoint"); a new checkpoint, the app
    id kept: refused again (the coordinates are claimed: "... a new app id with a new
    checkpoint"); that done: every record of both topics in the output once."""
    source, out, addresses = _topics(kafka_bootstrap, redis_url, app_id)
    expected = _produce(kafka_bootstrap, source, "old")
    kept = str(tmp_path / "kept")
    assert not _run(spark, _pipeline(app_id, source, out), addresses, kept)
    expected |= _recreated_with_other_records(kafka_bootstrap, source)

    first = _run(spark, _pipeline(app_id, source, out), addresses, kept)
    assert "SettingChangedError" in first and "which do not carry to another topic" in first \
        and "or start with a new checkpoint" in first, \
        f"not refused: {first!r}; output {_by_key(kafka_bootstrap, out, expected)}"
    # the first advice, literally: a new checkpoint (nothing else changed)
    second = _run(spark, _pipeline(app_id, source, out), addresses, str(tmp_path / "new"))
    # the second advice, literally: a new app id with a new checkpoint
    assert _new_app_id_as_told(spark, kafka_bootstrap, app_id, (source, out), addresses,
                               str(tmp_path / "newer"), second, expected) == \
        {"lost": 0, "duplicated": 0, "phantoms": 0, "mismatched": 0}


def test_an_input_topic_recreated_mid_batch_is_refused_saying_what_went_with_it(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_path: Any) -> None:
    """The chain once more with batch 1 partly committed when the input topic is deleted
    and created again. The first refusal's way to move ("restore the old one until batch
    1 is committed") cannot be followed: the old topic is gone, and with it the records
    of batch 1 not yet in the output. The refusal says so and what to do; done
    literally (a new checkpoint, then as the next refusal says a new app id with a new
    checkpoint) the output holds every record of both topics once except exactly those
    the refusal named as lost."""
    from tests.integration.cli.test_pipeline_key_changes import _partial_batch

    source, out, addresses = _topics(kafka_bootstrap, redis_url, app_id)
    expected = _produce(kafka_bootstrap, source, "old")
    kept = str(tmp_path / "kept")
    _partial_batch(spark, _pipeline(app_id, source, out), addresses, kept,
                   str(tmp_path / "faults"))
    emitted = {(r.key or b"").decode() for r in consume_all(kafka_bootstrap, out,
                                                             "read_committed")}
    gone = {key for key in expected if key not in emitted}  # batch 1's uncommitted part
    assert gone and len(gone) < RECORDS, len(gone)
    expected |= _recreated_with_other_records(kafka_bootstrap, source)

    first = _run(spark, _pipeline(app_id, source, out), addresses, kept)
    assert "SettingChangedError" in first and "until batch 1 is committed" in first, first
    assert "if the old topic is gone for good, the records of batch 1 not in the output " \
        "yet went with it" in first and "start with a new checkpoint" in first, first
    # as it says for a topic gone for good: a new checkpoint (the app id kept) ...
    second = _run(spark, _pipeline(app_id, source, out), addresses, str(tmp_path / "new"))
    # ... then, as the next refusal says, a new app id with a new checkpoint
    report = _new_app_id_as_told(spark, kafka_bootstrap, app_id, (source, out), addresses,
                                 str(tmp_path / "newer"), second, expected)
    assert report == {"lost": len(gone), "duplicated": 0, "phantoms": 0, "mismatched": 0}, \
        report
    final = {(r.key or b"").decode() for r in consume_all(kafka_bootstrap, out,
                                                           "read_committed")}
    assert set(expected) - final == gone  # exactly the records the refusal named


@pytest.mark.parametrize("missing", [False, True])
def test_topic_ids_name_each_topic_and_change_when_it_is_created_again(
        kafka_bootstrap: str, app_id: str, missing: bool) -> None:
    """``topic_ids`` gives each existing topic's Kafka id, another once the topic is
    created again, and leaves out a topic not created yet."""
    from sources.kafka import topic_ids

    topic = f"{app_id}-t"
    ensure_topic(kafka_bootstrap, topic, PARTITIONS)
    names = [topic, f"{app_id}-absent"] if missing else [topic]
    first = topic_ids(kafka_bootstrap, names)
    assert list(first) == [topic] and len(first[topic]) == 22, first  # base64 of a UUID
    assert topic_ids(kafka_bootstrap, names) == first
    _recreate(kafka_bootstrap, topic)
    again = topic_ids(kafka_bootstrap, names)
    assert list(again) == [topic] and again[topic] != first[topic], (first, again)
