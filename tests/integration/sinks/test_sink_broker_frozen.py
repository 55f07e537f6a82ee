"""The broker freezes (SIGSTOP) in the middle of a real partition write.

README, "Fail closed": an unknown commit outcome fails the batch and Spark's
retry settles it through the batch marker; ``send_offsets_to_transaction``,
which librdkafka can leave blocked forever, is bounded from outside (15 s),
its producer discarded and the task failed. Each test holds the write of
(batch 1, partition 0) at a fail-point with its Python worker stopped,
freezes the session's broker, lets the worker go on into the call, and
thaws the broker once the task has failed with the documented error (within
a bound: a call that blocks instead fails the test). The ``read_committed``
output is then compared with the failure-free one: nothing lost, repeated,
foreign or left open.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

import sinks
from dedup.failpoints import arm, fired, resume
from dedup.local.services import KafkaBroker
from tests.integration.sinks.pipeline import (
    build_stream,
    check_exact,
    fill_input,
    read_output,
    sink_options,
    wait_for,
)
from tests.integration.spark_tasks import failed_task_errors, kill_if_still_stopped

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.chaos, pytest.mark.slow]

BATCH, PARTITION = 1, 0


def _write_with_frozen_broker(spark: Any, broker: KafkaBroker | None, bootstrap: str,
                              redis_url: str, app_id: str, checkpoint: str, tmp_path: Path,
                              point: str, error: str, within: float) -> float:
    """Run the pipeline; freeze the broker when the held write passes ``point``; return
    how long after that the task failed with ``error`` (asserted to be within
    ``within`` seconds), then check the output."""
    if broker is None:
        pytest.skip("KAFKA_BOOTSTRAP names a broker this test may not freeze")
    sinks.register(spark)
    faults = str(tmp_path / "faults")
    arm(faults, point, "stop", match={"batch": BATCH, "partition": PARTITION})
    topics, expected = fill_input(bootstrap, app_id)
    df = build_stream(spark, bootstrap, topics, app_id, redis_url)
    query = (df.writeStream.format("exactly_once_kafka")
             .options(**sink_options(bootstrap, topics, app_id, redis_url, faults))
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    txn_id = f"{app_id}.p{PARTITION}"
    try:
        assert wait_for(lambda: any("pid" in f for f in fired(faults, point)), timeout=120), \
            f"the write of batch {BATCH} partition {PARTITION} never reached {point}"
        [record] = fired(faults, point)
        broker.signal(signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            # on into the call, broker frozen (once the worker has stopped itself)
            assert resume(record), "the held Python worker is gone"
            failed = wait_for(lambda: any(error in e for e in failed_task_errors(spark, txn_id)),
                              timeout=within)
            took = time.monotonic() - frozen
        finally:
            broker.signal(signal.SIGCONT)
        assert failed, (f"no task failed with {error} within {within:g} s of the freeze; "
                        f"task errors: {failed_task_errors(spark, app_id)}")
        assert query.awaitTermination(150), "the query did not finish after the broker thawed"
    finally:
        kill_if_still_stopped(fired(faults))
        if query.isActive:
            query.stop()
        broker.wait_ready(timeout=90)  # the next test gets a whole broker
    assert query.exception() is None, str(query.exception())
    report = check_exact(bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
    aborted = len(read_output(bootstrap, topics.out, "read_uncommitted")) - report.observed
    print(f"{error} {took:.1f} s after the freeze; {aborted} aborted records in the log")
    return took


def test_unknown_commit_outcome_is_settled_by_the_retry(
        spark: Any, kafka_broker: KafkaBroker | None, kafka_bootstrap: str, redis_url: str,
        app_id: str, tmp_checkpoint: str, tmp_path: Path) -> None:
    """commit_transaction against a frozen broker times out (librdkafka: retriable
    _TIMED_OUT, "retry call to resume") until the sink's deadline; the sink reports
    the outcome unknown and fails the task. The broker, thawed, may still complete
    the commit: the retry's init_transactions settles it and the marker decides."""
    took = _write_with_frozen_broker(
        spark, kafka_broker, kafka_bootstrap, redis_url, app_id, tmp_checkpoint, tmp_path,
        "sink.before_commit", "CommitOutcomeUnknownError", within=50)
    assert took >= 25, f"the commit failed after {took:.1f} s: not by its deadline (30 s)"


def test_a_stuck_send_offsets_discards_the_producer_and_the_retry_is_exact(
        spark: Any, kafka_broker: KafkaBroker | None, kafka_bootstrap: str, redis_url: str,
        app_id: str, tmp_checkpoint: str, tmp_path: Path) -> None:
    """With the broker frozen, send_offsets_to_transaction ignores its own 10 s
    timeout; the outside bound (15 s) fails the task with ProducerStuckError."""
    took = _write_with_frozen_broker(
        spark, kafka_broker, kafka_bootstrap, redis_url, app_id, tmp_checkpoint, tmp_path,
        "sink.before_send_offsets", "ProducerStuckError", within=35)
    assert took < 30, f"the stuck call failed the task only after {took:.1f} s"
