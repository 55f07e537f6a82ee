"""The tests' own query runners meet Spark 4.1's SPARK-55271 as users do: start once more.

On PySpark 4.1.x a query restarted in the middle of a batch replays and commits that
batch, then fails in its progress report (``dedup.spark_session.is_kafka_replay_bug``);
started once more it goes on. docs/operations.md tells library users to restart on that
error and ``dedup run`` does so by itself; the runners here do the same, once, so the
4.1.x tier tests the toolkit rather than that bug. 4.0.x and 4.2.x never take this path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dedup.spark_session import is_kafka_replay_bug


def met_replay_bug(error: Any) -> bool:
    """Whether ``error`` (an exception, text, or None) is SPARK-55271's. Pure."""
    return error is not None and bool(str(error)) and is_kafka_replay_bug(error)


def run_available_now(start: Callable[[], Any], timeout: float) -> tuple[Any, bool]:
    """Start a query with ``start()``, wait up to ``timeout`` s for it to end, stop it if
    it has not; on SPARK-55271's error start it once more (a fresh ``timeout``).

    Returns the last query (its error, if any, for the caller to read) and whether it
    ended by itself within the time.
    """
    for attempt in (1, 2):
        query = start()
        try:
            finished = bool(query.awaitTermination(timeout))
        except Exception:
            if query.exception() is None:
                raise  # not the query's error: nothing for the caller to read
            finished = True  # the query's error: the caller reads query.exception()
        finally:
            if query.isActive:
                query.stop()
        if attempt == 1 and met_replay_bug(query.exception()):
            continue
        return query, finished
    raise AssertionError("unreachable")
