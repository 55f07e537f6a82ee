"""Helpers for the SparkSession the toolkit runs with, classic or Spark Connect.

Nothing here reaches into the JVM through PySpark's private or JVM-only
attributes: a Spark Connect session has none of them, and the same code must
serve both modes
(``tests/unit/test_connect_safe.py`` keeps it so).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from dedup.exceptions import ConfigError, DedupError

# Where classic PySpark keeps a micro-batch's identity on the calling JVM thread.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
RUN_ID_PROPERTY = "spark.jobGroup.id"  # Spark runs a micro-batch under its run id's job group
BATCH_ID_PROPERTY = "streaming.sql.batchId"
JOB_TAGS_PROPERTY = "spark.job.tags"
BATCH_TAG = "dedup-batch="
# Job tag naming the Spark query id of a batch_scope whose decisions go under another
# name (option query.id): the app id's lease records it, so that the driver's
# listener, which hears the query by its Spark id, acts for that name.
SPARK_QUERY_TAG = "dedup-spark-query="
"""Job tag ``dedup-batch=<query id>/<batch id>`` set by :func:`batch_scope` (Spark Connect)."""
CONNECT_TAG = "SparkConnect_"
# How long a wrapped ``spark.stop()`` waits for the Spark Connect client's
# ReleaseExecute RPCs still in flight: what PySpark's own ``client.close()`` waits
# for them, which ``stop()`` calls only after it released the session.
RELEASE_WAIT_S = 10.0


def is_kafka_replay_bug(error: BaseException | str) -> bool:
    """Whether a streaming query's ``error`` is Spark 4.1's Kafka source bug SPARK-55271.

    A query restarted in the middle of a batch replays that batch without asking
    Kafka for the latest offsets; on 4.1.x the source's progress metrics then
    dereference them and the query fails with ``NullPointerException: Cannot invoke
    "scala.collection.IterableOps.map(scala.Function1)" because the return value of
    "scala.Option.get()" is null`` after the batch is committed. Started once more,
    the query plans a new batch and goes on (docs/development.md). Pure.
    """
    text = str(error)
    return ('return value of "scala.Option.get()" is null' in text
            and "IterableOps.map" in text)


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` (a SparkSession or DataFrame) belongs to Spark Connect."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def before_stop(spark: Any, hook: Callable[[Any], None] | None = None) -> None:
    """Make ``spark.stop()`` run ``hook(spark)`` first (each hook once, in the order
    given), then wait up to :data:`RELEASE_WAIT_S` for the Spark Connect client's
    release RPCs still in flight, then stop as before. Safe to repeat.

    PySpark's Connect client acknowledges every command's results with a
    ``ReleaseExecute`` RPC sent from a thread of its own, and ``stop()`` releases the
    session before it waits for those: one that arrives later makes the server log
    ``ERROR ... INVALID_HANDLE.SESSION_CLOSED`` into the user's terminal (a local
    server shares it). A classic session has none to wait for. A session type that
    fixes its attributes keeps its ``stop`` as it is.
    """
    hooks: list[Callable[[Any], None]] | None = getattr(spark.stop, "_dedup_before_stop", None)
    if hooks is None:
        hooks = _wrap_stop(spark)
    if hook is not None and hook not in hooks:
        hooks.append(hook)


def _wrap_stop(spark: Any) -> list[Callable[[Any], None]]:
    """Replace ``spark.stop`` by :func:`before_stop`'s wrapper; its list of hooks."""
    original = spark.stop
    hooks: list[Callable[[Any], None]] = []
    session = weakref.ref(spark)  # the wrapper keeps no session alive

    def stop() -> None:
        current = session()
        if current is not None:
            for each in list(hooks):
                each(current)
            _wait_for_release_rpcs(current)
        original()

    stop.__doc__ = original.__doc__
    stop._dedup_before_stop = hooks  # type: ignore[attr-defined]
    with contextlib.suppress(AttributeError, TypeError):
        spark.stop = stop
    return hooks


def _wait_for_release_rpcs(spark: Any) -> None:
    """Wait (bounded) for the release RPCs a Spark Connect client has in flight; never
    raises: a client without them (another PySpark) or closed has nothing to wait for.
    """
    if not is_connect(spark):
        return
    try:
        # PySpark's client keeps them here for its own close() (seen in PySpark 4.2; a
        # client without the attribute has nothing this can wait for).
        pending = list(getattr(spark.client, "_release_futures", ()))
        if pending:
            concurrent.futures.wait(pending, timeout=RELEASE_WAIT_S)
    except Exception:  # a stop must not fail for want of a courtesy wait
        return


def session_stopped(spark: Any) -> bool:
    """Whether ``spark`` was stopped (Spark Connect: released; classic: its context is
    gone). Safe to call on any session, any number of times."""
    stopped = getattr(spark, "is_stopped", None)  # Spark Connect's property
    if isinstance(stopped, bool):
        return stopped
    from pyspark import SparkContext

    return SparkContext._active_spark_context is None


def make_active(spark: Any) -> None:
    """Make ``spark`` the JVM's active session for the calling thread. Safe to repeat.

    Spark looks Python data sources up in the *calling thread's* active JVM
    session. With PySpark's pinned threads, a Python thread can end up on a
    JVM thread whose active session is unset (seen after a long pause of the
    driver thread), and ``format("exactly_once_kafka")`` then fails with
    ``ClassNotFoundException: exactly_once_kafka.DefaultSource`` although the
    source is registered.

    Classic PySpark's ``createDataFrame`` makes its session the calling
    thread's active one (JVM and Python); an empty local relation costs no
    job. A Spark Connect session has no JVM thread of its own here: the
    server resolves each request in the session that sent it, so nothing is
    needed.
    """
    if is_connect(spark):
        return
    spark.createDataFrame([], "_dedup_active int")


class ConnectUnreachableError(DedupError, RuntimeError):
    """The Spark Connect server of a ``sc://`` URL did not answer."""


def connect_session(url: str, conf: dict[str, str] | None = None) -> Any:
    """A Spark Connect session on the server at ``url`` (``sc://host:port``).

    Only session settings can be given (``conf``, set one by one): the
    server's static ones (``spark.jars``, ``spark.pyspark.python``, memory) were
    fixed when it started, so its Kafka connector jars and the Python its
    workers run (one that can import the toolkit) are the server's business. A
    token-protected server takes ``;token=...`` in the URL or
    ``SPARK_CONNECT_AUTHENTICATE_TOKEN``.

    Parameters
    ----------
    url:
        The server's address, ``sc://host:port[/;param=value...]``.
    conf:
        Session settings, e.g. ``spark.sql.shuffle.partitions``.

    Returns
    -------
    pyspark.sql.connect.session.SparkSession

    Raises
    ------
    ConnectUnreachableError
        The server did not answer the first request (the settings'), in one line.
    """
    from pyspark.sql import SparkSession

    try:
        spark = SparkSession.builder.remote(url).getOrCreate()
        # The first request: the client connects lazily, and an unreachable
        # server should be named here rather than at the query's start.
        spark.conf.get("spark.sql.session.timeZone")
        for key, value in (conf or {}).items():
            spark.conf.set(key, value)
    except ImportError as exc:
        raise ConnectUnreachableError(
            f"Spark Connect's client cannot be imported ({exc}): install "
            "spark-exactly-once-dedup[connect]") from None
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConnectUnreachableError(
            f"the Spark Connect server at {url} did not answer ({first[:300]}): start it "
            "(Spark's sbin/start-connect-server.sh) or correct the address") from None
    return spark


def batch_identity(df: Any) -> tuple[str | None, str | None]:
    """``(query id, run id)`` of the streaming query whose ``foreachBatch`` got ``df``
    (None where it cannot be told). Call on the driver, inside the function.

    Classic: the local properties Spark sets on the micro-batch's thread (the
    function runs on it). Spark Connect runs the function in a Python process
    of the server, whose requests run on other threads without those
    properties: the query is then the one active query of ``df``'s session
    (the session that started it); with several active there, None (the
    caller asks for an explicit name rather than guess).
    """
    spark = df.sparkSession
    if is_connect(spark):
        active = spark.streams.active
        if len(active) != 1:
            return None, None
        return str(active[0].id), str(active[0].runId)
    from pyspark import SparkContext

    context = SparkContext._active_spark_context  # classic only (not reached under Connect)
    if context is None:
        return None, None
    return (context.getLocalProperty(QUERY_ID_PROPERTY) or None,
            context.getLocalProperty(RUN_ID_PROPERTY) or None)


def classic_listener_handle(callback: Any) -> Any:
    """The JVM's ``PythonStreamingQueryListenerWrapper`` around ``callback`` (a Py4J
    callback implementing Spark's ``PythonStreamingQueryListener``), for a listener's
    ``_jlistener``: what PySpark's classic ``streams.addListener`` and
    ``removeListener`` hand to Spark. Classic only: Spark Connect never asks a
    listener for it. Raises ``DedupError`` without an active classic SparkContext."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context  # classic only (see the docstring)
    jvm = context._jvm if context is not None else None
    if jvm is None:
        raise DedupError("no active SparkContext to register a streaming listener with")
    return jvm.PythonStreamingQueryListenerWrapper(callback)


def query_session(df: Any) -> Any:
    """The session whose query manager runs the streaming query of ``df``, a
    ``foreachBatch`` DataFrame, or None when there is none.

    Classic: the micro-batch DataFrame belongs to the query's cloned session,
    whose query manager and listener bus never hear the query; the session
    that started it is, in nearly every program, the process's first one
    (what ``builder.getOrCreate()`` returns while a SparkContext runs). Spark
    Connect: ``df``'s session is the one that started the query.
    """
    spark = df.sparkSession
    if is_connect(spark):
        return spark
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is None:  # stopping: do not start another
        return None
    return SparkSession.builder.getOrCreate()


@contextmanager
def batch_scope(df: Any, batch_id: int, query_id: str | None = None,
                spark_query_id: str | None = None) -> Iterator[None]:
    """Inside a ``foreachBatch`` function: let the tasks of the jobs started in the
    block see which micro-batch they compute, as classic Spark does by itself.

    ``dedup.deduplicate`` upstream of the function needs it: its decisions are
    recorded under the query and batch id, so that a re-run of the batch
    replays them. Classic Spark passes both to the tasks (local properties of
    the micro-batch's thread): nothing to do. Spark Connect runs the function
    in a process of the server whose jobs carry neither; this tags them with
    ``dedup-batch=<query id>/<batch id>`` (a job tag, which does reach the
    tasks). ``query_id``: the name to record decisions under, the same on
    every run from one checkpoint; default the query's id (see
    :func:`batch_identity`; with several queries in the session, pass it).
    ``spark_query_id``: Spark's id of the query, when known and other than
    ``query_id`` (tagged too: see :data:`SPARK_QUERY_TAG`).
    The toolkit's foreachBatch sinks do this themselves.
    """
    spark = df.sparkSession
    if not is_connect(spark):
        yield
        return
    if query_id is None:
        query_id, _ = batch_identity(df)
        if query_id is None:
            raise ConfigError(
                "batch_scope under Spark Connect: the session runs several streaming queries, "
                "so this micro-batch's query cannot be told: pass query_id (a stable name, "
                "the same across restarts of this query)")
    tags = [f"{BATCH_TAG}{query_id}/{int(batch_id)}"]
    if spark_query_id and spark_query_id != query_id:
        tags.append(f"{SPARK_QUERY_TAG}{spark_query_id}")
    for tag in tags:
        spark.addTag(tag)
    try:
        yield
    finally:
        for tag in tags:
            spark.removeTag(tag)


def task_batch(context: Any, streaming: bool) -> tuple[str | None, str | None]:
    """``(query id, batch id)`` of the micro-batch the running task computes, from
    its local properties (classic Spark) or the tag of :func:`batch_scope` (Spark
    Connect); ``(None, None)`` outside a micro-batch. Worker side.

    Raises :class:`~dedup.exceptions.ConfigError` for a task of a streaming
    plan (``streaming``) run by Spark Connect without either: a ``foreachBatch``
    function's job, whose re-run could not replay its decisions.
    """
    if context is None:
        return None, None
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
    if query_id and batch_id is not None:
        return query_id, batch_id
    tags = context.getLocalProperty(JOB_TAGS_PROPERTY) or ""
    for tag in tags.split(","):
        _, found, value = tag.rpartition("_Tag_" + BATCH_TAG)
        if found and "/" in value:
            query_id, _, batch_id = value.rpartition("/")
            return query_id, batch_id
    if streaming and CONNECT_TAG in tags:
        raise ConfigError(
            "dedup.deduplicate feeds a foreachBatch function under Spark Connect, whose "
            "jobs do not tell their tasks the micro-batch: write with "
            "ExactlyOnceKafkaForeachBatch or deduplicate_to_kafka, or run the function's "
            "body in `with dedup.spark_session.batch_scope(df, batch_id):`")
    return query_id, batch_id  # as found (the caller falls back to a batch DataFrame's token)


def task_spark_query(context: Any) -> str | None:
    """Spark's id of the streaming query whose micro-batch the running task computes
    (classic: its local property; Spark Connect: :data:`SPARK_QUERY_TAG`), None where
    it cannot be told. Worker side."""
    if context is None:
        return None
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    if query_id:
        return str(query_id)
    for tag in (context.getLocalProperty(JOB_TAGS_PROPERTY) or "").split(","):
        _, found, value = tag.rpartition("_Tag_" + SPARK_QUERY_TAG)
        if found and value:
            return value
    return None


# Spark application ids whose Python workers were seen to import the toolkit
_WORKERS_CHECKED: set[str] = set()
_WORKERS_LOCK = threading.Lock()


class WorkerImportError(DedupError, RuntimeError):
    """Spark's Python workers cannot import a module the toolkit runs there."""


def check_worker_imports(spark: Any, modules: Sequence[str]) -> None:
    """Refuse, in one line, when Spark's Python workers cannot import ``modules``.

    One tiny job (one task) per Spark application and process, the first
    time; later calls return at once. A worker on another Python than the
    one with the toolkit installed (``PYSPARK_PYTHON`` unset or wrong) would
    otherwise fail each task with an import error deep in a stack trace.
    Raises :class:`WorkerImportError` naming the missing modules, the
    worker's Python and what ``PYSPARK_PYTHON`` must be.
    """
    try:
        app = str(spark.conf.get("spark.app.id"))
    except Exception:  # no app id to key by: check every time
        app = ""
    key = f"{app}:{','.join(sorted(modules))}"
    with _WORKERS_LOCK:
        if app and key in _WORKERS_CHECKED:
            return
    wanted = list(modules)

    def probe(batches: Iterator[Any]) -> Iterator[Any]:
        import importlib
        import sys as worker_sys

        import pyarrow as pa

        missing = []
        for name in wanted:
            try:
                importlib.import_module(name)
            except Exception as exc:
                missing.append(f"{name} ({type(exc).__name__}: {exc})")
        yield pa.RecordBatch.from_pydict({"python": [worker_sys.executable],
                                          "missing": [json.dumps(missing)]})

    fix = (f"set PYSPARK_PYTHON (and spark.pyspark.python) to the Python that has "
           f"spark-exactly-once-dedup and its dependencies installed (here: {sys.executable})")
    try:
        rows = spark.range(1, numPartitions=1).mapInArrow(
            probe, "python string, missing string").collect()
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WorkerImportError(
            f"Spark's Python workers could not run the toolkit's import check ({first[:300]}): "
            f"{fix}") from None
    missing = json.loads(rows[0]["missing"]) if rows else []
    if missing:
        raise WorkerImportError(
            f"Spark's Python workers ({rows[0]['python']}) cannot import "
            f"{'; '.join(missing)}: {fix}")
    if app:
        with _WORKERS_LOCK:
            _WORKERS_CHECKED.add(key)
