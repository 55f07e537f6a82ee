"""An output topic that does not exist yet (issue 51, finding 4): announced once in one
line when the broker creates it on first write, refused in one line when it does not;
no warning about a limit that cannot be read."""

from __future__ import annotations

import pytest

from sinks import admin
from sinks.config import SinkConfig
from sinks.exceptions import SinkConfigError

DEFAULTS = {"auto.create.topics.enable": "true", "num.partitions": "1",
            "default.replication.factor": "1", "message.max.bytes": "1048588"}


def _config(topic: str, dead: str | None = None) -> SinkConfig:
    options = {"kafka.bootstrap.servers": "127.0.0.1:9", "app.id": "missing-topic",
               "strong.productions": "false", "topic": topic}
    if dead:
        options["dead.letter.topic"] = dead
    return SinkConfig.from_options(options)


def test_a_topic_the_broker_creates_is_announced_once(caplog: pytest.LogCaptureFixture) -> None:
    config = _config("announced-out")
    with caplog.at_level("WARNING"):
        admin.check_output_topics(config, DEFAULTS, set())
        admin.check_output_topics(config, DEFAULTS, set())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "'announced-out' does not exist yet" in lines[0]
    assert "num.partitions=1" in lines[0] and "max.message.bytes=1048588" in lines[0]
    assert "max.message.bytes of topic" not in lines[0]


def test_existing_topics_are_not_mentioned(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        admin.check_output_topics(_config("there-out", "there-dead"), DEFAULTS,
                                  {"there-out", "there-dead"})
    assert caplog.records == []


def test_a_topic_the_broker_will_not_create_is_refused_in_one_line() -> None:
    settings = {**DEFAULTS, "auto.create.topics.enable": "false"}
    with pytest.raises(SinkConfigError) as refused:
        admin.check_output_topics(_config("there-out", "absent-dead"), settings,
                                  {"there-out"})
    message = str(refused.value)
    assert "\n" not in message
    assert "dead.letter.topic 'absent-dead' does not exist" in message
    assert "kafka-topics.sh --create --topic absent-dead" in message
