"""A local Spark Connect session for the Connect tests (issue 34).

``SparkSession.builder.remote("local[2]")`` starts a Spark Connect server in
this process's JVM (with the Kafka connector in ``spark.jars``) and a client
session on it. Its gRPC port is a free one of this machine instead of the
fixed 15002 (several test runs share the machine), which the client is told
by the same hook PySpark's own tests use. The server stops with the session,
after the last test of this package: later tests of the same pytest run may
start a classic session again.

Run this package in its own pytest process: a classic SparkSession already
running here (tests of other packages first) leaves no room for a local
Connect server, and those tests are then skipped with that reason.
"""

from __future__ import annotations

import os
import socket
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="package")
def connect_spark() -> Iterator[Any]:
    """A Spark Connect session on a local server (``local[2]``, 4 shuffle partitions)."""
    try:
        from pyspark.sql.connect.client.core import DefaultChannelBuilder
        from pyspark.sql.connect.session import SparkSession as ConnectSession  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"pyspark.sql.connect cannot be imported ({exc}): install pyspark[connect]")
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from dedup.local.paths import spark_kafka_connector_jars
    from dedup.worker_daemon import DAEMON_MODULE

    if SparkContext._active_spark_context is not None:
        pytest.skip("a classic SparkSession already runs in this process: run "
                    "tests/integration/connect in a pytest process of its own")
    port = _free_port()
    original_port = DefaultChannelBuilder.__dict__["default_port"]
    DefaultChannelBuilder.default_port = staticmethod(lambda: port)  # type: ignore[method-assign]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    had_token = "SPARK_CONNECT_AUTHENTICATE_TOKEN" in os.environ
    builder = (SparkSession.builder.remote("local[2]")
               .config("spark.jars", ",".join(spark_kafka_connector_jars()))
               .config("spark.connect.grpc.binding.port", str(port))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.pyspark.driver.python", sys.executable)
               # as dedup.local.spark.local_spark_session: workers forked with their
               # imports done
               .config("spark.python.daemon.module", DAEMON_MODULE)
               .config("spark.driver.memory", "1g")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true"))
    with warnings.catch_warnings():
        # The server takes every setting at its start; the client then tries the
        # static ones again as session settings and warns that it cannot.
        warnings.filterwarnings("ignore", "Failed to set spark", UserWarning)
        session = builder.getOrCreate()
    try:
        assert type(session).__module__.startswith("pyspark.sql.connect"), type(session)
        yield session
    finally:
        try:
            session.stop()  # also stops the local server (and its classic session)
        finally:
            DefaultChannelBuilder.default_port = original_port  # type: ignore[method-assign]
            if not had_token:
                os.environ.pop("SPARK_CONNECT_AUTHENTICATE_TOKEN", None)


@pytest.fixture(scope="package")
def connect_url(connect_spark: Any) -> str:
    """The ``sc://`` address of :func:`connect_spark`'s server, for another client.

    ``localhost``, not 127.0.0.1: the local server requires the token it put in
    ``SPARK_CONNECT_AUTHENTICATE_TOKEN``, and PySpark's client sends a token over
    a plain channel only to ``localhost`` (elsewhere it wants TLS).
    """
    from pyspark.sql.connect.client.core import DefaultChannelBuilder

    return f"sc://localhost:{DefaultChannelBuilder.default_port()}"
