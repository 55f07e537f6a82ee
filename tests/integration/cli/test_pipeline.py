"""``dedup run``'s frames (dedup.cli.pipeline) on a real SparkSession."""

from __future__ import annotations

from typing import Any

import pytest

from dedup.cli.config_file import parse_pipeline
from dedup.cli.pipeline import sink_frame

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_the_one_pass_sink_frame_carries_the_event_time(spark: Any) -> None:
    """One pass reads the event time beside the sink's columns (retention by event
    time). Found by the mutant matrix on the one-pass pipeline: every run with
    dedup.event_time_column set failed at start ("retention event_time_column
    'event_time' is missing")."""
    pipeline = parse_pipeline('app_id = "frames"\n[dedup]\nevent_time_column = "event_time"\n'
                              '[sink]\ntopic = "out"\none_pass = true\n')
    frame = spark.createDataFrame(
        [("k", "v", "id-1", "2026-11-26 08:00:00")],
        "key string, value string, _record_id string, event_time string")
    out = sink_frame(frame, pipeline, carry=["event_time"])
    assert out.columns == ["key", "value", "_record_id", "event_time"]
    assert out.first()["event_time"] == "2026-11-26 08:00:00"
    # without carry, only the sink's columns
    assert sink_frame(frame, pipeline).columns == ["key", "value", "_record_id"]
