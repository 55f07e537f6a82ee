"""The library reaches Spark only through APIs that Spark Connect has too (issue 34).

A Spark Connect session and its DataFrames have no JVM handles: ``_jvm``,
``sparkContext``, ``_jsparkSession``, ``_jdf`` and the classic
``SparkSession._instantiatedSession`` raise or are None there. Every path of
the product (``dedup`` without its local tooling, ``sinks``, and the command line)
must do without them; worker-side ``TaskContext.getLocalProperty`` is fine.
The classic-only lookups of :mod:`dedup.spark_session` go through the public
``SparkContext`` class and are guarded by :func:`dedup.spark_session.is_connect`;
that module alone may also reach the active context's ``_jvm``, for the session
listener's Java wrapper (asked for by PySpark's classic ``addListener`` only).
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
JVM_ONLY = frozenset({"_jvm", "sparkContext", "_jsparkSession", "_jdf", "_instantiatedSession",
                      "_jsc", "_sc"})
# The command line is scanned too: dedup run --remote runs it under Spark Connect.
SKIPPED = ("dedup/local/",)
CLASSIC_ONLY = "_active_spark_context"
CLASSIC_MODULE = "dedup/spark_session.py"
# What CLASSIC_MODULE may reach besides CLASSIC_ONLY (its classic_listener_handle)
CLASSIC_MODULE_JVM = frozenset({"_jvm"})


def _product_files(root: Path = ROOT) -> list[Path]:
    files = [*sorted((root / "dedup").rglob("*.py")), *sorted((root / "sinks").rglob("*.py"))]
    return [p for p in files if not p.relative_to(root).as_posix().startswith(SKIPPED)]


def _uses(root: Path = ROOT) -> list[str]:
    found = []
    for path in _product_files(root):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            name = None
            if isinstance(node, ast.Attribute):
                name = node.attr
            elif isinstance(node, ast.Name):
                name = node.id
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value  # getattr(spark, "_jvm") counts too
            if name in JVM_ONLY and not (rel == CLASSIC_MODULE and name in CLASSIC_MODULE_JVM):
                found.append(f"{rel}:{node.lineno}: {name}")
            elif name == CLASSIC_ONLY and rel != CLASSIC_MODULE:
                found.append(f"{rel}:{node.lineno}: {name} outside {CLASSIC_MODULE}")
    return found


def test_no_jvm_only_attribute_in_the_product() -> None:
    uses = _uses()
    assert not uses, ("attributes a Spark Connect session does not have:\n" + "\n".join(uses))


@pytest.mark.parametrize("code", [
    "def f(spark):\n    return spark.sparkContext.getLocalProperty('x')\n",
    "def f(df):\n    return df._jdf\n",
    "def f(spark):\n    return getattr(spark, '_jvm')\n",
    "from pyspark.sql import SparkSession\nS = SparkSession._instantiatedSession\n",
])
def test_the_scan_sees_a_jvm_attribute(tmp_path: Path, code: str) -> None:
    """The check itself can fail."""
    (tmp_path / "sinks").mkdir()
    (tmp_path / "dedup" / "local").mkdir(parents=True)
    (tmp_path / "sinks" / "probe.py").write_text(code)
    (tmp_path / "dedup" / "local" / "ok.py").write_text(code)  # local tooling: classic only
    uses = _uses(tmp_path)
    assert len(uses) == 1 and uses[0].startswith("sinks/probe.py:"), uses


def test_only_the_classic_module_may_reach_the_contexts_jvm(tmp_path: Path) -> None:
    """``_jvm`` is let through in ``dedup/spark_session.py`` alone, and no other handle."""
    (tmp_path / "dedup").mkdir()
    (tmp_path / "sinks").mkdir()
    code = "def f(context, df):\n    return context._jvm, df._jdf\n"
    (tmp_path / "dedup" / "spark_session.py").write_text(code)
    (tmp_path / "dedup" / "gc.py").write_text(code)
    uses = _uses(tmp_path)
    assert sorted(uses) == ["dedup/gc.py:2: _jdf", "dedup/gc.py:2: _jvm",
                            "dedup/spark_session.py:2: _jdf"], uses


class _ConnectLike:
    """Stands for a Spark Connect object: the mode is told by the class's module."""


_ConnectLike.__module__ = "pyspark.sql.connect.session"


def test_connect_is_told_by_the_class_module() -> None:
    from dedup.spark_session import is_connect

    assert is_connect(_ConnectLike())
    assert not is_connect(SimpleNamespace())


def test_under_connect_the_one_active_query_is_the_batch_s_query() -> None:
    from dedup.spark_session import batch_identity

    query = SimpleNamespace(id="q-1", runId="r-1")
    df = _ConnectLike()
    df.sparkSession = _ConnectLike()  # type: ignore[attr-defined]
    df.sparkSession.streams = SimpleNamespace(active=[query])  # type: ignore[attr-defined]
    assert batch_identity(df) == ("q-1", "r-1")
    df.sparkSession.streams = SimpleNamespace(active=[query, query])  # type: ignore[attr-defined]
    assert batch_identity(df) == (None, None)  # several: not guessed


def test_under_connect_make_active_does_nothing() -> None:
    from dedup.spark_session import make_active

    make_active(_ConnectLike())  # no createDataFrame on it: nothing to call


def test_a_worker_without_the_toolkit_is_refused_in_one_line() -> None:
    """What the worker check raises, from a stand-in session whose job reports a
    missing module (the check runs the probe on a real worker in the Connect tests)."""
    import json

    from dedup.spark_session import WorkerImportError, check_worker_imports

    class Rows:
        def mapInArrow(self, probe: object, schema: str) -> Rows:
            return self

        def collect(self) -> list[dict[str, str]]:
            return [{"python": "/usr/bin/python3",
                     "missing": json.dumps(["sinks (ModuleNotFoundError: No module named "
                                            "'sinks')"])}]

    spark = SimpleNamespace(conf=SimpleNamespace(get=lambda key: "app-test-worker-check"),
                            range=lambda *a, **k: Rows())
    with pytest.raises(WorkerImportError) as caught:
        check_worker_imports(spark, ["sinks"])
    message = str(caught.value)
    assert "\n" not in message
    assert "/usr/bin/python3" in message and "PYSPARK_PYTHON" in message
    assert "No module named 'sinks'" in message


def test_foreach_batch_functions_pickle_without_their_run_state() -> None:
    """Spark Connect pickles a foreachBatch function to run it on the server: the
    copy starts afresh (no session, no identity of the client's runs)."""
    from pyspark import cloudpickle

    from sinks import ExactlyOnceKafkaForeachBatch

    sink = ExactlyOnceKafkaForeachBatch({"kafka.bootstrap.servers": "localhost:1", "topic": "t",
                                         "app.id": "a", "strong.productions": "false"})
    sink._manager = object()
    sink._runs["q"] = {"r"}
    copy = cloudpickle.loads(cloudpickle.dumps(sink))
    assert copy._manager is None and copy._runs == {} and copy.config == sink.config


def test_the_connect_extra_has_the_bounds_of_the_pyspark_dependency() -> None:
    """``pip install .[connect]`` brings PySpark's Connect client (grpcio, ...) for
    the PySpark this project allows, and set-up installs it."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = next(r for r in map(Requirement, project["dependencies"]) if r.name == "pyspark")
    (extra,) = map(Requirement, project["optional-dependencies"]["connect"])
    assert (extra.name, extra.extras, extra.specifier) == ("pyspark", {"connect"},
                                                           base.specifier)
    assert '".[dev,connect]"' in (ROOT / "dedup" / "local" / "setup.sh").read_text()


class _Task:
    def __init__(self, **properties: str) -> None:
        self.properties = properties

    def getLocalProperty(self, key: str) -> str | None:
        return self.properties.get(key)


def test_a_task_finds_its_batch_in_local_properties_or_the_connect_tag() -> None:
    from dedup.spark_session import task_batch

    classic = _Task(**{"sql.streaming.queryId": "q", "streaming.sql.batchId": "3"})
    assert task_batch(classic, streaming=True) == ("q", "3")
    tagged = _Task(**{"spark.job.tags": (
        "SparkConnect_OperationTag_User__Session_s_Operation_o,"
        "SparkConnect_SessionTag_User__Session_s_Tag_dedup-batch=q-1/7,spark-session-x")})
    assert task_batch(tagged, streaming=True) == ("q-1", "7")
    assert task_batch(_Task(), streaming=True) == (None, None)  # a batch DataFrame's job
    assert task_batch(None, streaming=True) == (None, None)


def test_a_connect_foreach_batch_job_without_the_tag_is_refused_in_one_line() -> None:
    from dedup.exceptions import ConfigError
    from dedup.spark_session import task_batch

    untagged = _Task(**{"spark.job.tags": "SparkConnect_OperationTag_User__Session_s_Operation_o"})
    with pytest.raises(ConfigError, match="batch_scope") as caught:
        task_batch(untagged, streaming=True)
    assert "\n" not in str(caught.value)
    assert task_batch(untagged, streaming=False) == (None, None)  # a batch DataFrame: as before
