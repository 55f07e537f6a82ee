"""The chaos runs' pipeline variants (:data:`VARIANTS`): changes to the pipeline file
and the user code between the dedup step and the sink that a run's ``spec.variant``
asks for (``a+b``: each in turn). Used by the runner, the operational kinds and the
mutant matrix; imports none of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchmarks.chaos.model import (
    Run,
    pipeline_text,
)
from dedup.failpoints import arm

VARIANTS: dict[str, str] = {
    "nondeterministic": "user code between dedup and the sink that differs per task attempt: "
                        "a retried task appends '|recomputed-attempt-<n>' to every payload "
                        "(the failure-free output, first attempts only, is unchanged)",
    "tiny_bloom": "the Bloom filter of dup90_tiny_bloom (capacity 20, error rate 0.5): many "
                  "false positives, each of which only the catalog can clear",
    "late_events": "retention by event time (late_policy drop, horizon so that the rows are "
                   "late by the wall clock) and a batch clock two days behind the wall clock "
                   "(the dedup.batch_clock skew: batches replayed two days after they were "
                   "planned), so nothing is late by the batch clock",
    "one_pass": "dedup and the sink in one pass (pipeline file sink.one_pass = true: "
                "sinks.deduplicate_to_kafka) instead of the operator followed by the sink",
}
LATE_SKEW_S = 2 * 24 * 3600
LATE_BUCKET_S = 30 * 24 * 3600


# -- pipeline variants (in-process runs) --------------------------------------

def apply_variant(run: Run, text: str) -> tuple[str, Callable[[Any], Any] | None]:
    """The pipeline file and the user transform of ``run.spec.variant`` (``a+b``: each
    applied in turn); arms what it needs."""
    transform = None
    for part in run.spec.variant.split("+"):
        text, made = _apply_one(run, text, part)
        transform = made or transform
    if "+" in run.spec.variant:
        run.fault.evidence["variant"] = "; ".join(
            VARIANTS[part] for part in run.spec.variant.split("+"))
    return text, transform


def _apply_one(run: Run, text: str, variant: str) -> tuple[str, Callable[[Any], Any] | None]:
    if variant == "nondeterministic":
        return text, _attempt_tagged
    if variant == "tiny_bloom":
        tiny = text.replace("bloom.capacity = 100000\n", "bloom.capacity = 20\n", 1) \
            .replace("bloom.error_rate = 0.01\n", "bloom.error_rate = 0.5\n", 1)
        if tiny.count("bloom.capacity = 20\n") + tiny.count("bloom.error_rate = 0.5\n") != 2:
            raise ValueError("the tiny_bloom variant found no Bloom settings to replace in the "
                             "pipeline file: update apply_variant to pipeline_text")
        return tiny, None
    if variant == "late_events":
        from sources.synthetic_rows import DEFAULT_START_TIME

        # Rows are ~329 days old: late by the wall clock with this horizon, not late by a
        # batch clock two days behind it (the run's start is what both are measured from).
        horizon = int(time.time() - DEFAULT_START_TIME) - LATE_SKEW_S // 2
        text = pipeline_text(run.app_id, run.topic, run.spec, bucket_seconds=LATE_BUCKET_S,
                             horizon_seconds=horizon)
        text = text.replace("[dedup]\n", '[dedup]\nretention.event_time_column = "event_time"\n'
                                         'retention.late_policy = "drop"\n', 1)
        arm(run.fp_dir, "dedup.batch_clock", "skew", seconds=-LATE_SKEW_S, from_batch=0)
        run.fault.evidence["variant"] = VARIANTS[variant]
        return text, None
    if variant == "one_pass":
        # runner.pipeline_text writes the setting for this variant (every kind's file)
        if '[sink]\ntype = "kafka"\none_pass = true\n' not in text:
            raise ValueError("the one_pass variant found no one_pass setting in the Kafka "
                             "sink table of the pipeline file: see runner.pipeline_text")
        run.fault.evidence["variant"] = VARIANTS[variant]
        return text, None
    raise ValueError(f"unknown pipeline variant {variant!r}; known: {', '.join(VARIANTS)}")


def _attempt_tagged(frame: Any) -> Any:
    """``payload`` through a non-deterministic UDF whose value differs on a task retry."""
    from pyspark.sql import functions as sf
    from pyspark.sql.types import StringType

    def tag(payload: str | None) -> str | None:
        # nested: pickled by value, so the workers need not import this module
        from pyspark import TaskContext

        context = TaskContext.get()
        attempt = context.attemptNumber() if context is not None else 0
        if payload is None or attempt == 0:
            return payload
        return f"{payload}|recomputed-attempt-{attempt}"

    udf = sf.udf(tag, StringType()).asNondeterministic()
    return frame.withColumn("payload", udf(sf.col("payload")))


