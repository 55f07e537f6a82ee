"""Helpers for the SparkSession the toolkit's data sources are used with."""

from __future__ import annotations

from typing import Any


def make_active(spark: Any) -> None:
    """Make ``spark`` the JVM's active session for the calling thread. Safe to repeat.

    Spark looks Python data sources up in the *calling thread's* active JVM
    session. With PySpark's pinned threads, a Python thread can end up on a
    JVM thread whose active session is unset (seen after a long pause of the
    driver thread), and ``format("exactly_once_kafka")`` then fails with
    ``ClassNotFoundException: exactly_once_kafka.DefaultSource`` although the
    source is registered.
    """
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
