"""A Redis failover right after a clean stop loses the listener's last writes; the
refusal that follows must end when its advice is followed (issue 33, the operator-
sequence explorer's sequence 154: benchmarks/results/chaos_sequences_failed_154.json).

Spark delivers a stopped query's last progress and termination events to the
session's listener after ``query.stop()`` returned. On them the listener records the
batch Spark committed (``commit_progress``) and collects the decisions of committed
batches (dedup/gc.py). A failover in that window loses both writes (the listener logs
a warning), while the batch's claims and decisions, which the replica acknowledged
before the batch was emitted, survive on the promoted replica. There the committed
batch looks unfinished: a new checkpoint on the app id is refused with
``AppIdInUseError`` ("restart that query from its checkpoint to finish the batch").
Restarted with nothing new to read, the old query runs no batch and no event records
it again: the start must record what its checkpoint committed, or the advice never
ends the refusal.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
import redis

from dedup.catalog import RedisCatalog
from dedup.cli.pipeline import (
    Addresses,
    checkpoint_history,
    dedup_config,
    start_query,
)
from dedup.failpoints import arm, fired
from dedup.keys import lease_key
from tests.integration.cli.runs import run_to_end
from tests.integration.cli.test_pipeline_key_changes import MORE, RECORDS, _more_input, _pipeline
from tests.integration.dedup.helpers import replicate
from tests.integration.sinks.pipeline import check_exact, fill_input, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis]

HOLD_S = 12.0  # the listener held at the last progress event, while the test fails over


def _refusal(error: str) -> str:
    """The dedup error's line in a query's error text (the rest is Spark's trace)."""
    found = re.search(r"dedup\.exceptions\.(\w+Error: [^\n]*)", error)
    return found.group(1) if found else error


def _fail_over(primary: Any, replica_url: str, spare_url: str) -> None:
    """The primary killed once its replica holds everything; the replica promoted and
    given a replica of its own (the claims wait for the one recorded at set-up)."""
    old, new = redis.Redis.from_url(primary.url), redis.Redis.from_url(replica_url)
    assert wait_for(lambda: old.info("replication")["master_repl_offset"]
                    == new.info("replication").get("slave_repl_offset"), timeout=30), \
        "the replica did not catch up before the failover"
    new.execute_command("REPLICAOF", "NO", "ONE")
    primary.kill()
    replicate(replica_url, spare_url)


@pytest.mark.slow
def test_a_failover_losing_the_last_progress_record_is_mended_by_the_refusals_advice(
        spark: Any, kafka_bootstrap: str, app_id: str, tmp_path: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    from dedup.local.services import RedisServer

    faults = str(tmp_path / "faults")
    checkpoint, fresh = str(tmp_path / "checkpoint"), str(tmp_path / "checkpoint-new")
    topics, expected = fill_input(kafka_bootstrap, app_id, records=RECORDS, duplicates=30)
    # two-step (one pass records the committed batch in foreachBatch, before Spark's
    # commit); failover_wait 1 s: the held listener's writes to the dead primary fail soon
    pipeline = _pipeline(app_id, topics, sink__one_pass="false", redis__failover_wait="1")
    with RedisServer(tmp_path / "primary") as primary, \
            RedisServer(tmp_path / "replica") as replica, \
            RedisServer(tmp_path / "spare") as spare:
        replicate(primary.url, replica.url)
        before = Addresses(primary.url, kafka_bootstrap, kafka_bootstrap)
        assert run_to_end(spark, pipeline, before, checkpoint) == ""
        history = checkpoint_history(checkpoint)
        assert history is not None
        query_id, last = history
        # one more batch; its progress event is held in the listener, past the stop
        _more_input(kafka_bootstrap, topics.source, expected)
        arm(faults, "dedup.before_progress_record", "sleep", seconds=HOLD_S,
            match={"batch": last + 1})
        caplog.set_level(logging.WARNING, logger="dedup.gc")
        query = start_query(spark, pipeline, before, checkpoint, fail_point_dir=faults)
        try:
            query.processAllAvailable()
            assert wait_for(lambda: bool(fired(faults, "dedup.before_progress_record")),
                            timeout=60), f"the listener was never held: {query.lastProgress}"
        finally:
            query.stop()
        assert checkpoint_history(checkpoint) == (query_id, last + 1)
        _fail_over(primary, replica.url, spare.url)
        # the held event's writes and the termination's reach the dead primary and fail
        assert wait_for(lambda: f"lease of query {query_id} failed" in caplog.text,
                        timeout=HOLD_S + 90), caplog.text
        after = Addresses(replica.url, kafka_bootstrap, kafka_bootstrap)
        promoted = RedisCatalog(dedup_config(pipeline, replica.url))
        assert promoted.committed_batch(query_id) == last, \
            "the failover did not lose the last progress record: the scenario is not set up"
        error = run_to_end(spark, pipeline, after, fresh)
        # the lost termination did not release the lease either: it lapses by itself,
        # which the test makes happen now rather than waiting out its 60 s (the lease
        # hash's deadline, as lease.lua reads it against Redis's clock)
        if re.search(r"is in use by streaming query \S+; its lease lapses in \d+ s", error):
            redis.Redis.from_url(replica.url).hset(lease_key(app_id), "until", 0)
            error = run_to_end(spark, pipeline, after, fresh)
        refusal = _refusal(error)
        assert refusal.startswith("AppIdInUseError"), refusal
        assert f"left batch {last + 1} unfinished" in refusal, refusal
        assert "restart that query from its checkpoint" in refusal, refusal
        # the advice, literally: the old query restarted from its checkpoint (nothing new)
        assert run_to_end(spark, pipeline, after, checkpoint) == ""
        # ... after which the new checkpoint runs
        error = run_to_end(spark, pipeline, after, fresh)
        assert error == "", "restarting the query from its checkpoint did not end the " \
            f"refusal: {_refusal(error)}"
        report = check_exact(kafka_bootstrap, topics.out, expected)
        assert report.ok, report.summary()
        assert len(expected) == RECORDS + MORE
