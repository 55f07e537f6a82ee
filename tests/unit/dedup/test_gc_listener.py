"""The session's one GC listener dispatches by app id, without Spark or Redis."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from dedup.config import FailPointConfig
from dedup.exceptions import CatalogUnavailableError
from dedup.gc import DecisionGcListener


class RecordingCatalog:
    def __init__(self, fail: bool = False) -> None:
        self.collected: list[tuple[str, int]] = []
        self.released: list[str] = []
        self.renewed: list[str] = []
        self.fail = fail
        self.names: dict[str, str] = {}
        self.config = SimpleNamespace(allow_shared_app_id=False, fail_points=FailPointConfig())

    def take_lease(self, query_id: str, spark_query_id: str | None = None) -> int:
        if self.fail:
            raise CatalogUnavailableError("redis down")
        self.renewed.append(query_id)
        return 1

    def lease_name(self, spark_query_id: str) -> str:
        """The lease's owner name for a Spark query id (``names``: the aliases)."""
        if self.fail:
            raise CatalogUnavailableError("redis down")
        return self.names.get(spark_query_id, spark_query_id)

    def commit_progress(self, query_id: str, batch_id: int) -> int:
        return self.collect_garbage(query_id, batch_id)

    def collect_garbage(self, query_id: str, batch_id: int) -> int:
        if self.fail:
            raise CatalogUnavailableError("redis down")
        self.collected.append((query_id, batch_id))
        return 1

    def release(self, query_id: str) -> None:
        self.released.append(query_id)


def progress(query_id: str, batch_id: int, *names: str) -> Any:
    return SimpleNamespace(progress=SimpleNamespace(
        id=query_id, batchId=batch_id, observedMetrics={n: object() for n in names}))


def listener_with(**catalogs: RecordingCatalog) -> DecisionGcListener:
    listener = DecisionGcListener()
    for name, catalog in catalogs.items():
        listener.watch(name, catalog)  # type: ignore[arg-type]
    return listener


def test_progress_collects_only_for_the_app_ids_it_carries() -> None:
    a, b = RecordingCatalog(), RecordingCatalog()
    listener = listener_with(dedup_a=a, dedup_b=b)
    listener.onQueryProgress(progress("q1", 4, "dedup_a", "other"))
    listener.onQueryProgress(progress("q2", 1, "unrelated"))
    assert a.collected == [("q1", 4)] and b.collected == []
    assert listener.collected == 1 and listener.watched == ["dedup_a", "dedup_b"]


def test_termination_releases_the_lease_where_the_query_ran() -> None:
    a, b = RecordingCatalog(), RecordingCatalog()
    listener = listener_with(dedup_a=a, dedup_b=b)
    listener.onQueryProgress(progress("q1", 0, "dedup_a"))
    listener.onQueryTerminated(SimpleNamespace(id="q1"))
    assert a.released == ["q1"] and b.released == []
    # A query that died before any progress: its app is unknown, release everywhere.
    listener.onQueryTerminated(SimpleNamespace(id="q9"))
    assert a.released == ["q1", "q9"] and b.released == ["q9"]


def test_a_failed_collection_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    listener = listener_with(dedup_a=RecordingCatalog(fail=True))
    listener.onQueryProgress(progress("q1", 3, "dedup_a"))
    assert "GC for query q1 failed" in caplog.text


def test_watching_twice_keeps_one_entry_the_newest() -> None:
    old, new = RecordingCatalog(), RecordingCatalog()
    listener = listener_with(dedup_a=old)
    listener.watch("dedup_a", new)  # type: ignore[arg-type]
    listener.onQueryProgress(progress("q1", 2, "dedup_a"))
    assert listener.watched == ["dedup_a"] and new.collected == [("q1", 2)] and not old.collected


def test_progress_and_idle_events_renew_the_lease_of_the_apps_the_query_runs() -> None:
    a, b = RecordingCatalog(), RecordingCatalog()
    listener = listener_with(dedup_a=a, dedup_b=b)
    listener.onQueryProgress(progress("q1", 0, "dedup_a"))
    listener.onQueryIdle(SimpleNamespace(id="q1"))
    listener.onQueryIdle(SimpleNamespace(id="q-unknown"))
    assert a.renewed == ["q1", "q1"] and b.renewed == []


def test_stop_callbacks_run_once_for_their_query_and_failures_are_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    listener = DecisionGcListener()
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("redis down")

    listener.on_stop("q1", "sink lease a", lambda: calls.append("a"))
    listener.on_stop("q1", "sink lease a", lambda: calls.append("a-newest"))
    listener.on_stop("q1", "sink lease b", broken)
    listener.on_stop("q2", "sink lease c", lambda: calls.append("c"))
    with caplog.at_level("WARNING"):
        listener.onQueryTerminated(SimpleNamespace(id="q1"))
        listener.onQueryTerminated(SimpleNamespace(id="q1"))
    assert calls == ["a-newest"]
    assert "sink lease b" in caplog.text and "redis down" in caplog.text


def test_a_held_query_keeps_its_lease_when_idle_and_gives_it_up_when_it_ends() -> None:
    """The one-pass writer's queries observe nothing, yet their app id stays theirs."""
    catalog, other = RecordingCatalog(), RecordingCatalog()
    listener = listener_with(dedup_b=other)
    listener.hold("q1", "dedup_a", catalog)  # type: ignore[arg-type]
    listener.onQueryIdle(SimpleNamespace(id="q1"))
    listener.onQueryIdle(SimpleNamespace(id="q2"))
    assert catalog.renewed == ["q1"] and other.renewed == []
    listener.onQueryTerminated(SimpleNamespace(id="q1"))
    assert catalog.released == ["q1"] and other.released == []
    # nothing known to be committed by Spark: nothing collected at the end
    assert catalog.collected == []


def test_a_query_known_by_another_name_is_renewed_collected_and_released_under_it() -> None:
    """Under Spark Connect a foreachBatch sink with option query.id records the dedup
    step's decisions and lease under that name; the listener hears the query by Spark's
    id and acts for the name the lease records beside it (issue 51, finding 3)."""
    catalog = RecordingCatalog()
    catalog.names["spark-id"] = "orders-v1"
    listener = listener_with(dedup_a=catalog)
    listener.onQueryStarted(SimpleNamespace(id="spark-id"))
    listener.onQueryProgress(progress("spark-id", 3, "dedup_a"))
    listener.onQueryIdle(SimpleNamespace(id="spark-id"))
    assert catalog.renewed == ["orders-v1", "orders-v1"]
    assert catalog.collected == [("orders-v1", 3)]
    listener.onQueryTerminated(SimpleNamespace(id="spark-id"))
    assert catalog.released == ["orders-v1"]
    assert catalog.collected[-1] == ("orders-v1", 4)


def test_closing_waits_for_the_terminations_of_stopped_queries_only() -> None:
    listener = DecisionGcListener()
    listener.onQueryStarted(SimpleNamespace(id="stopped"))
    listener.onQueryStarted(SimpleNamespace(id="running"))
    assert listener.wait_for_terminations({"running"}, timeout=0.0) == {"stopped"}
    listener.onQueryTerminated(SimpleNamespace(id="stopped"))
    assert listener.wait_for_terminations({"running"}, timeout=0.0) == set()


class _Streams:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.active: list[Any] = []

    def addListener(self, listener: Any) -> None:
        self.log.append("add")

    def removeListener(self, listener: Any) -> None:
        self.log.append("remove")


class _Session:
    """A session as the listener sees it: its query manager and stop()."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.streams = _Streams(self.log)
        self.is_stopped = False

    def stop(self) -> None:
        self.log.append("stop")
        self.is_stopped = True


def test_stopping_the_session_removes_the_listener_first_and_a_new_use_adds_one() -> None:
    from dedup.gc import close_session_listener, session_listener

    spark = _Session()
    first = session_listener(spark)
    assert session_listener(spark) is first and spark.log == ["add"]
    spark.stop()
    assert spark.log == ["add", "remove", "stop"]
    close_session_listener(spark)  # again, and on a stopped session: nothing
    assert spark.log == ["add", "remove", "stop"]
    spark.is_stopped = False
    assert session_listener(spark) is not first and spark.log[-1] == "add"
    spark.stop()  # wrapped once, not once per listener the session had
    assert spark.log[-3:] == ["add", "remove", "stop"] and spark.log.count("stop") == 2


def test_closing_waits_for_a_query_held_after_its_start() -> None:
    """The one-pass writer holds its query's lease from inside a batch, on a listener
    that may have been added after the query started (it heard no start)."""
    listener = DecisionGcListener()
    listener.hold("one-pass", "dedup_a", RecordingCatalog())  # type: ignore[arg-type]
    listener.on_stop("sink-only", "sink lease", lambda: None)
    assert listener.wait_for_terminations(set(), timeout=0.0) == {"one-pass", "sink-only"}
    listener.onQueryTerminated(SimpleNamespace(id="one-pass"))
    listener.onQueryTerminated(SimpleNamespace(id="sink-only"))
    assert listener.wait_for_terminations(set(), timeout=0.0) == set()


def test_the_java_handle_is_refused_in_one_line_without_a_classic_context(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no classic SparkContext runs (a Spark Connect client, which never asks for
    it), the listener's Java handle is a one-line refusal, not an attribute error."""
    from pyspark import SparkContext

    from dedup.exceptions import DedupError

    # The worker process may hold the session of an integration test that ran before
    # this one (pytest-xdist's worksteal mixes the tiers' files): no context for this call.
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    with pytest.raises(DedupError, match="no active SparkContext"):
        _ = DecisionGcListener()._jlistener
