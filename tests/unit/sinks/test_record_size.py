"""Records larger than their topic takes: refused naming the way out, or dead-lettered,
the same way on every attempt (issue 33, finding 5). No broker needed."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException, Producer

from dedup.constants import DEFAULT_ID_COLUMN, RECORD_ID_HEADER
from sinks import RecordTooLargeError, SinkConfig
from sinks.records import ERROR_HEADER, InputLayout, SizeLimit, record_bytes, to_records

LAYOUT = InputLayout(has_key=True, has_record_id=True)


def _config(**options: str) -> SinkConfig:
    return SinkConfig.from_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "out",
                                    "app.id": "app-size", "strong.productions": "false",
                                    **options})


def _rows(*sizes: int) -> list[Any]:
    return [pa.RecordBatch.from_pylist([
        {"key": f"k{i}", "value": "v" * size, DEFAULT_ID_COLUMN: f"id-{i}"}
        for i, size in enumerate(sizes)])]


class Limits:
    """Topic limits as Kafka would report them; counts the reads."""

    def __init__(self, topics: dict[str, int], producer: int = 1_000_000,
                 fresh: dict[str, int] | None = None) -> None:
        self.topics, self.producer, self.fresh = topics, producer, fresh or {}
        self.reads: list[tuple[str, bool]] = []

    def __call__(self, topic: str, fresh: bool) -> SizeLimit:
        self.reads.append((topic, fresh))
        table = {**self.topics, **self.fresh} if fresh else self.topics
        return SizeLimit(topic, table.get(topic), self.producer)


def test_small_records_pass_with_one_read_per_topic() -> None:
    limits = Limits({"out": 1_048_588})
    records, dead = to_records(_rows(10, 20, 30), _config(), LAYOUT, 1, 0, limits)
    assert (len(records), dead) == (3, [])
    assert limits.reads == [("out", False)]


def test_a_record_too_large_is_refused_naming_the_topic_size_limits_and_fixes() -> None:
    limits = Limits({"out": 1_048_588})
    with pytest.raises(RecordTooLargeError) as caught:
        to_records(_rows(10, 2_000_000), _config(), LAYOUT, 7, 2, limits)
    message = str(caught.value)
    size = record_bytes(b"k1", b"v" * 2_000_000, (), b"id-1")
    assert "\n" not in message
    assert f"record 'id-1' (batch 7, partition 2) takes {size} bytes" in message
    assert (f"raise max.message.bytes of topic 'out' to at least {size} (now 1048588) and "
            f"option kafka.message.max.bytes to at least {size} (now 1000000), or set option "
            "dead.letter.topic to a topic whose max.message.bytes is at least") in message
    assert caught.value.fatal()
    # Read again before refusing (a raised limit is seen without a restart of the worker).
    assert limits.reads == [("out", False), ("out", True)]


def test_only_the_limit_that_is_too_small_is_named() -> None:
    limits = Limits({"out": 1_048_588}, producer=5_000_000)
    with pytest.raises(RecordTooLargeError) as caught:
        to_records(_rows(2_000_000), _config(), LAYOUT, 0, 0, limits)
    assert "kafka.message.max.bytes to at least" not in str(caught.value).split(", or ")[0]


def test_a_limit_raised_since_it_was_read_lets_the_record_through() -> None:
    limits = Limits({"out": 1_048_588}, producer=5_000_000, fresh={"out": 3_000_000})
    records, dead = to_records(_rows(2_000_000), _config(), LAYOUT, 0, 0, limits)
    assert (len(records), dead) == (1, [])


def test_a_record_too_large_goes_to_the_dead_letter_topic_the_same_on_every_attempt() -> None:
    config = _config(**{"dead.letter.topic": "dlq"})
    limits = Limits({"out": 1_048_588, "dlq": 3_000_000}, producer=3_000_000)
    attempts = [to_records(_rows(10, 2_000_000, 20), config, LAYOUT, 1, 0, limits)
                for _ in range(2)]
    assert attempts[0] == attempts[1]
    records, [letter] = attempts[0]
    assert [r.record_id for r in records] == [b"id-0", b"id-2"]
    assert (letter.topic, letter.record_id, letter.value) == ("dlq", b"id-1", b"v" * 2_000_000)
    reason = dict(letter.headers)[ERROR_HEADER] or b""
    assert b"larger than topic 'out' takes" in reason


def test_a_dead_letter_too_large_for_the_dead_letter_topic_is_refused() -> None:
    config = _config(**{"dead.letter.topic": "dlq"})
    limits = Limits({"out": 1_048_588, "dlq": 1_048_588}, producer=3_000_000)
    with pytest.raises(RecordTooLargeError, match=r"dead-letter topic 'dlq'.*raise "
                       r"max\.message\.bytes of topic 'dlq' to at least \d+ \(now 1048588\)"):
        to_records(_rows(2_000_000), config, LAYOUT, 0, 0, limits)


def test_without_limits_nothing_is_measured() -> None:
    records, dead = to_records(_rows(2_000_000), _config(), LAYOUT, 0, 0)
    assert (len(records), dead) == (1, [])


def test_a_compressing_producer_checks_only_its_own_limit(monkeypatch: Any) -> None:
    from sinks import transactions

    monkeypatch.setattr(transactions, "topic_max_message_bytes",
                        lambda *args, **kwargs: pytest.fail("read a topic's limit"))
    limit = transactions.topic_limits(_config(**{"kafka.compression.type": "lz4"}))("out", False)
    assert (limit.topic_bytes, limit.producer_bytes) == (None, 1_000_000)


@pytest.mark.parametrize("headers", [(), (("trace", b"t" * 300), ("empty", None))])
def test_the_size_named_is_enough_for_the_producer(headers: Any) -> None:
    """librdkafka refuses at produce() a record over message.max.bytes: with exactly the
    size record_bytes gives, it is accepted (one byte less may or may not be)."""
    key, value, rid = b"k" * 100, b"v" * 50_000, b"id-1"
    size = record_bytes(key, value, headers, rid)
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "message.max.bytes": size})
    try:
        producer.produce("out", value, key, headers=[*headers, (RECORD_ID_HEADER, rid)])
        with pytest.raises(KafkaException, match="MSG_SIZE_TOO_LARGE"):
            producer.produce("out", value + b"v" * 200, key,
                             headers=[*headers, (RECORD_ID_HEADER, rid)])
    finally:
        producer.purge()
        producer.flush(0)
