"""Keep the fetched jars visible when a test points DEDUP_CACHE_DIR elsewhere."""

from __future__ import annotations

from pathlib import Path

from dedup.local.paths import kafka_broker_jars, spark_kafka_connector_jars


def jar_env() -> dict[str, str]:
    connector = spark_kafka_connector_jars()
    env = {"DEDUP_KAFKA_JARS": str(kafka_broker_jars())}
    if connector:
        env["DEDUP_SPARK_KAFKA_JARS"] = str(Path(connector[0]).parent)
    return env
