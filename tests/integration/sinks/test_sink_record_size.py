"""A record larger than its output topic takes (issue 33, finding 5).

One 2 MB value among 400 records; the output topic keeps the broker's default
``max.message.bytes`` (about 1 MB), and the producer's ``message.max.bytes``
is 1 MB by default. Without a dead-letter topic the batch is refused with one
line naming the topic, the record's size, the limits and the fix, nothing is
lost, and doing what it says from the same checkpoint ends exact. With a
dead-letter topic that takes it, the record lands there once and the output
is exact.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

import sinks
from dedup.constants import RECORD_ID_HEADER
from sinks.kafka_io import ensure_topic
from sinks.records import ERROR_HEADER
from tests.integration.sinks.pipeline import (
    Topics,
    build_stream,
    check_exact,
    fill_input,
    read_output,
    run_to_end,
    sink_options,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis]

BIG_ID = "id-big"
BIG_VALUE = b"x" * 2_000_000
ROOMY = 3_000_000
"""max.message.bytes of the topics that must take the big record (the input, a roomy
dead-letter topic)."""


def _input_with_a_big_record(bootstrap: str, app_id: str) -> tuple[Topics, dict[str, bytes]]:
    """:func:`fill_input`'s 400 records, then one of 2 MB; the expected output with it."""
    ensure_topic(bootstrap, f"{app_id}-in", 2, config={"max.message.bytes": str(ROOMY)})
    topics, expected = fill_input(bootstrap, app_id, records=400, duplicates=40)
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": ROOMY})
    producer.produce(topics.source, key=BIG_ID.encode(), value=BIG_VALUE, partition=0)
    assert producer.flush(30) == 0
    return topics, {**expected, BIG_ID: BIG_VALUE}


def _refusal(run: Any) -> str:
    try:
        run()
    except Exception as exc:  # the query failed (awaitTermination raises)
        return str(exc)
    return ""


def _set_topic_limit(bootstrap: str, topic: str, limit: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", str(limit),
                    incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


@pytest.mark.slow
@pytest.mark.parametrize("advice", ["raise-the-limits", "dead-letter-topic"])
def test_a_record_too_large_for_its_topic_is_refused_naming_the_way_out(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str, tmp_checkpoint: str,
        advice: str) -> None:
    sinks.register(spark)
    topics, expected = _input_with_a_big_record(kafka_bootstrap, app_id)
    options = sink_options(kafka_bootstrap, topics, app_id, redis_url)

    def run() -> None:
        run_to_end(build_stream(spark, kafka_bootstrap, topics, app_id, redis_url), options,
                   tmp_checkpoint)

    refusal = _refusal(run)
    # One line naming the record, the topic, its size, both limits and the fixes.
    line = next((x for x in refusal.splitlines() if "RecordTooLargeError:" in x), "")
    assert line, refusal[-3000:]
    raise_topic = re.search(rf"raise max\.message\.bytes of topic '{re.escape(topics.out)}' "
                            r"to at least (\d+)", line)
    raise_producer = re.search(r"option kafka\.message\.max\.bytes to at least (\d+)", line)
    to_dead_letter = re.search(r"or set option dead\.letter\.topic to a topic whose "
                               r"max\.message\.bytes is at least (\d+) \(and option "
                               r"kafka\.message\.max\.bytes to at least (\d+)\)", line)
    assert raise_topic and raise_producer and to_dead_letter, line
    assert f"'{BIG_ID}'" in line and "now 1048588" in line and "now 1000000" in line, line
    size = int(raise_topic.group(1))
    assert len(BIG_VALUE) < size < len(BIG_VALUE) + 200, line
    # Nothing lost so far (the other partitions of the batch may be committed).
    partial = check_exact(kafka_bootstrap, topics.out, expected)
    assert (partial.duplicated, partial.phantoms, partial.mismatched) == (0, 0, 0), \
        partial.summary()
    assert partial.lost > 0
    # A restart as it was is refused the same way: the decision does not change.
    assert BIG_ID in _refusal(run)

    # Do exactly what the message says, restart from the same checkpoint.
    if advice == "raise-the-limits":
        _set_topic_limit(kafka_bootstrap, topics.out, size)
        options["kafka.message.max.bytes"] = raise_producer.group(1)
        run()
        report = check_exact(kafka_bootstrap, topics.out, expected)
        assert report.ok and report.open_transactions == 0, report.summary()
        return
    dead = f"{app_id}-dead"
    needed = to_dead_letter.group(1)
    ensure_topic(kafka_bootstrap, dead, 1, config={"max.message.bytes": needed})
    options["dead.letter.topic"] = dead
    options["kafka.message.max.bytes"] = to_dead_letter.group(2)
    run()
    del expected[BIG_ID]
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
    [letter] = read_output(kafka_bootstrap, dead)
    assert (letter.value, letter.header(RECORD_ID_HEADER)) == (BIG_VALUE, BIG_ID.encode())


@pytest.mark.slow
def test_a_record_too_large_for_its_topic_goes_to_the_dead_letter_topic_once(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str) -> None:
    sinks.register(spark)
    topics, expected = _input_with_a_big_record(kafka_bootstrap, app_id)
    dead = f"{app_id}-dead"
    ensure_topic(kafka_bootstrap, dead, 1, config={"max.message.bytes": str(ROOMY)})
    options = {**sink_options(kafka_bootstrap, topics, app_id, redis_url),
               "dead.letter.topic": dead, "kafka.message.max.bytes": str(ROOMY)}
    run_to_end(build_stream(spark, kafka_bootstrap, topics, app_id, redis_url), options,
               tmp_checkpoint)
    del expected[BIG_ID]
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
    [letter] = read_output(kafka_bootstrap, dead)
    assert (letter.value, letter.header(RECORD_ID_HEADER)) == (BIG_VALUE, BIG_ID.encode())
    reason = (letter.header(ERROR_HEADER) or b"").decode()
    assert f"topic '{topics.out}'" in reason and "max.message.bytes" in reason, reason


@pytest.mark.slow
def test_a_compressed_batch_too_large_for_its_topic_is_refused_and_raising_its_limit_is_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str) -> None:
    """With ``kafka.compression.type`` set the topic's ``max.message.bytes`` bounds
    compressed batches, which only the broker measures: a 2 MB value that does not
    compress is refused by the broker (``MSG_SIZE_TOO_LARGE``), and the batch fails with
    ``TransactionFailedError ... raise max.message.bytes of topic '<out>'``. Nothing is
    lost; doing that and restarting from the same checkpoint ends exact."""
    sinks.register(spark)
    big = random.Random(33).randbytes(len(BIG_VALUE))  # lz4 cannot shrink it
    ensure_topic(kafka_bootstrap, f"{app_id}-in", 2, config={"max.message.bytes": str(ROOMY)})
    topics, expected = fill_input(kafka_bootstrap, app_id, records=400, duplicates=40)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": ROOMY})
    producer.produce(topics.source, key=BIG_ID.encode(), value=big, partition=0)
    assert producer.flush(30) == 0
    expected[BIG_ID] = big
    options = {**sink_options(kafka_bootstrap, topics, app_id, redis_url),
               "kafka.compression.type": "lz4", "kafka.message.max.bytes": str(ROOMY)}

    def run() -> None:
        run_to_end(build_stream(spark, kafka_bootstrap, topics, app_id, redis_url), options,
                   tmp_checkpoint)

    refusal = _refusal(run)
    line = next((x for x in refusal.splitlines() if "TransactionFailedError:" in x), "")
    assert "MSG_SIZE_TOO_LARGE" in line, refusal[-3000:]
    assert f"raise max.message.bytes of topic '{topics.out}'" in line, line
    partial = check_exact(kafka_bootstrap, topics.out, expected)
    assert (partial.duplicated, partial.phantoms, partial.mismatched) == (0, 0, 0), \
        partial.summary()
    assert partial.lost > 0 and partial.open_transactions == 0, partial.summary()

    # The advice, literally: raise that topic's limit (to the producer's), the same
    # checkpoint.
    _set_topic_limit(kafka_bootstrap, topics.out, ROOMY)
    run()
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
