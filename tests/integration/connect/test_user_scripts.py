"""A user's script, from start to exit, in both Spark modes (issue 51).

Each of README's three forms is pasted into a script that ends when its
``availableNow`` query ends, as a user writes it: with and without
``spark.stop()``, under a classic session and under Spark Connect. The script
runs as a subprocess against the session's real Redis and Kafka, and must

* write the exact output (read_committed, against the failure-free output),
* exit by itself within :data:`EXIT_BOUND_S` of its last line,
* print no ``Traceback``, ``ERROR`` or ``Exception`` and none of the toolkit's
  false warnings (a lease renewed under another name, a limit of a topic that
  does not exist yet),
* leave the dedup step's app id lease released (what the listener does when
  the query stops is not lost to the exit), where the form releases it.

A Connect script that calls ``spark.stop()`` runs as on a slow network
(:data:`_SLOW_RELEASE`): PySpark's client acknowledges each command's results with
a ``ReleaseExecute`` RPC from a thread of its own, and ``stop()`` releases the
session without waiting for those; one that arrives after it makes the server log
``ERROR ... INVALID_HANDLE.SESSION_CLOSED`` into the user's terminal (seen once in
CI's Connect tier, 2026-12-03).

The output topic does not exist before the run: the broker creates it on
the first write, as on a user's first run.

These tests live with the Connect tier because it runs in a pytest process of
its own (CI's second command); each script is a process of its own either way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Producer

from dedup.catalog import RedisCatalog
from dedup.config import DedupConfig, RedisConfig
from dedup.keys import lease_key
from dedup.local.paths import repo_root
from sinks.kafka_io import ensure_topic
from tests.integration.sinks.pipeline import check_exact

PARENT_CONNECT_ENV = frozenset({"SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_REMOTE",
                                "SPARK_CONNECT_AUTHENTICATE_TOKEN"})

pytestmark = [pytest.mark.integration, pytest.mark.connect, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis]

# How long a script may take to exit after printing its last line.
EXIT_BOUND_S = 20.0
# The whole run (a JVM start, a Connect server, one micro-batch or two).
RUN_BOUND_S = 240.0

# Lines no user's script may print (the last two: the toolkit's false warnings of issue 51).
FORBIDDEN = ("Traceback", "ERROR", "Exception", "renewing the app id lease",
             "could not read max.message.bytes")

_SESSION = {
    "classic": """\
        spark = (SparkSession.builder.master("local[2]")
                 .config("spark.jars", JARS).config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("WARN")
        """,
    # A local Connect server on a free port (several test runs share the machine);
    # the server takes the static settings at its start, the client then warns that
    # it cannot set them again: the conftest of this package does the same.
    "connect": """\
        import socket, warnings
        from pyspark.sql.connect.client.core import DefaultChannelBuilder
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            PORT = probe.getsockname()[1]
        DefaultChannelBuilder.default_port = staticmethod(lambda: PORT)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Failed to set spark", UserWarning)
            spark = (SparkSession.builder.remote("local[2]")
                     .config("spark.jars", JARS).config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false")
                     .config("spark.connect.grpc.binding.port", str(PORT))
                     .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        """,
}

# README's forms, as a user pastes them (the wrap of "Wrap a stream in ten lines"
# and the two others of "Which form to pick").
_FORM = {
    "data_source": """\
        clean = dedup.deduplicate(events, DedupConfig(app_id=APP,
                                                      redis=RedisConfig(url=REDIS)))
        sinks.register(spark)
        writer = (clean.select("key", "value", "_record_id").writeStream
                  .format("exactly_once_kafka")
                  .option("kafka.bootstrap.servers", KAFKA).option("topic", OUT)
                  .option("app.id", APP).option("redis.url", REDIS))
        """,
    "foreach_batch": """\
        clean = dedup.deduplicate(events, DedupConfig(app_id=APP,
                                                      redis=RedisConfig(url=REDIS)))
        writer = clean.select("key", "value", "_record_id").writeStream.foreachBatch(
            sinks.ExactlyOnceKafkaForeachBatch({
                "kafka.bootstrap.servers": KAFKA, "topic": OUT, "app.id": APP,
                "redis.url": REDIS, "query.id": QUERY_ID}))
        """,
    "one_pass": """\
        writer = sinks.deduplicate_to_kafka(
            events.select("key", "value", "_record_id"),
            DedupConfig(app_id=APP, redis=RedisConfig(url=REDIS)),
            {"kafka.bootstrap.servers": KAFKA, "topic": OUT})
        """,
}

# Each ReleaseExecute RPC of the client sent 0.5 s late: the race between the
# client's release thread and ``spark.stop()``'s ReleaseSession, made certain.
_SLOW_RELEASE = """\
    import time
    from pyspark.sql.connect.proto import base_pb2_grpc
    _stub_init = base_pb2_grpc.SparkConnectServiceStub.__init__
    def _slow_release_stub(self, channel):
        _stub_init(self, channel)
        release = self.ReleaseExecute
        def late(*args, **kwargs):
            time.sleep(0.5)
            return release(*args, **kwargs)
        self.ReleaseExecute = late
    base_pb2_grpc.SparkConnectServiceStub.__init__ = _slow_release_stub
    """

_HEAD = """\
    import sys
    from pyspark.sql import SparkSession
    APP, REDIS, KAFKA, SOURCE, OUT, QUERY_ID, CHECKPOINT, JARS = sys.argv[1:9]
    """

_SOURCE = """\
    import dedup, sinks
    from dedup import DedupConfig, RedisConfig, with_record_id

    events = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", KAFKA).option("subscribe", SOURCE)
              .option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed").load())
    events = with_record_id(events, strategy="key")
    """

_TAIL = """\
    query = writer.option("checkpointLocation", CHECKPOINT).trigger(availableNow=True).start()
    query.awaitTermination()
    print("SCRIPT DONE", flush=True)
    """


def script_text(form: str, mode: str, stop: bool) -> str:
    """The script of ``form`` in ``mode``, ending with ``spark.stop()`` or not."""
    slow = [_SLOW_RELEASE] if mode == "connect" and stop else []
    parts = [_HEAD, *slow, _SESSION[mode], _SOURCE, _FORM[form], _TAIL]
    return "".join(textwrap.dedent(part) for part in parts) + ("spark.stop()\n" if stop else "")


def _fill(bootstrap: str, topic: str, records: int = 200, copies: int = 20
          ) -> dict[str, bytes]:
    """The input (keys are the record IDs; the first ``copies`` keys sent twice, each
    copy with its own value) and the failure-free output ``{record_id: value}``."""
    ensure_topic(bootstrap, topic, 2)
    rows = [(f"id-{i:05d}", f"value-{i}") for i in range(records)]
    rows += [(key, f"{value}-copy") for key, value in rows[:copies]]
    producer = Producer({"bootstrap.servers": bootstrap})
    for index, (key, value) in enumerate(rows):
        producer.produce(topic, key=key.encode(), value=value.encode(), partition=index % 2)
    assert producer.flush(30) == 0
    expected: dict[str, bytes] = {}
    for key, value in rows:
        expected.setdefault(key, value.encode())
    return expected


def _run(script: Path, args: list[str], env: dict[str, str]) -> tuple[float | None, int | None,
                                                                       str, str]:
    """Run the script; return (seconds from its last line to its exit, or None when it
    did not exit within the bound; its exit code; stdout; stderr)."""
    out_path, err_path = script.with_suffix(".out"), script.with_suffix(".err")
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen([sys.executable, str(script), *args], stdout=out,
                                stderr=err, env=env, cwd=script.parent)
        deadline = time.monotonic() + RUN_BOUND_S
        done_at: float | None = None
        try:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break
                if done_at is None and "SCRIPT DONE" in out_path.read_text():
                    done_at = time.monotonic()
                if done_at is not None and time.monotonic() - done_at > EXIT_BOUND_S:
                    break
                time.sleep(0.2)
            exited = proc.poll() is not None
            if exited and done_at is None and "SCRIPT DONE" in out_path.read_text():
                done_at = time.monotonic()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    stdout, stderr = out_path.read_text(), err_path.read_text()
    if not exited or done_at is None:
        return None, proc.returncode, stdout, stderr
    return max(0.0, time.monotonic() - done_at), proc.returncode, stdout, stderr


CASES = [(form, mode, stop) for form in ("data_source", "foreach_batch", "one_pass")
         for mode in ("classic", "connect") for stop in (False, True)]


@pytest.mark.parametrize(("form", "mode", "stop"), CASES,
                         ids=[f"{f}-{m}-{'stop' if s else 'no_stop'}" for f, m, s in CASES])
def test_a_users_script_runs_to_its_end_and_exits(
        form: str, mode: str, stop: bool, kafka_bootstrap: str, redis_url: str,
        app_id: str, tmp_path: Path) -> None:
    from dedup.local.paths import spark_kafka_connector_jars

    app = f"{app_id}-{form}-{mode}-{int(stop)}"[:120]
    source, out = f"{app}-in", f"{app}-out"
    expected = _fill(kafka_bootstrap, source)
    # foreachBatch needs a stable query.id: once the app id itself (README's natural
    # choice), once another name
    query_id = app if stop else f"{app}-q"
    script = tmp_path / "script.py"
    script.write_text(script_text(form, mode, stop))
    # a user's shell, not this pytest's: PySpark marks the process that started the
    # Connect tier's session as a Connect client (SPARK_CONNECT_MODE_ENABLED and the
    # like), which a child inheriting it would take for its own mode
    env = {**{k: v for k, v in os.environ.items() if k not in PARENT_CONNECT_ENV},
           "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(repo_root()), os.environ.get("PYTHONPATH", "")])}
    exit_s, code, stdout, stderr = _run(
        script, [app, redis_url, kafka_bootstrap, source, out, query_id,
                 str(tmp_path / "checkpoint"), ",".join(spark_kafka_connector_jars())], env)
    assert "SCRIPT DONE" in stdout, f"the script did not reach its end:\n{stderr[-3000:]}"
    assert exit_s is not None, (
        f"the script did not exit within {EXIT_BOUND_S:.0f} s of its last line:\n"
        f"{stderr[-2000:]}")
    assert code == 0, f"exit code {code}:\n{stderr[-3000:]}"
    printed = [line for line in stderr.splitlines() if any(word in line for word in FORBIDDEN)]
    assert not printed, "the script printed:\n" + "\n".join(printed[:20])
    report = check_exact(kafka_bootstrap, out, expected)
    assert report.ok, report
    catalog = RedisCatalog(DedupConfig(app_id=app, redis=RedisConfig(url=redis_url)))
    if form == "one_pass" and mode == "connect":
        # one pass under Connect decides in the server's foreachBatch process, whose
        # end nobody hears: its lease lapses by itself (docs/guarantees.md)
        catalog._check_unfinished("the-next-query")
        return
    client: Any = redis.Redis.from_url(redis_url)
    until = client.hget(lease_key(app), "until")
    assert until is not None and int(until) == 0, (
        f"the dedup lease of {app!r} was not released when its query stopped "
        f"(until={until!r}, owner={client.hget(lease_key(app), 'owner')!r})")
    # the stopped query left no batch unfinished: the next query of the app id (a new
    # checkpoint) takes the app id at once
    assert catalog.take_lease("the-next-query") > 0
