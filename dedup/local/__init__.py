"""Local services for the demo, the CLI, the tests and the benchmarks."""

from dedup.local.kafka_cluster import KafkaCluster
from dedup.local.paths import kafka_broker_jars, repo_root, spark_kafka_connector_jars
from dedup.local.services import KafkaBroker, RedisServer, free_port
from dedup.local.spark import local_spark_session
from dedup.local.spark_cluster import SparkStandaloneCluster

__all__ = [
    "KafkaBroker",
    "KafkaCluster",
    "RedisServer",
    "SparkStandaloneCluster",
    "free_port",
    "kafka_broker_jars",
    "local_spark_session",
    "repo_root",
    "spark_kafka_connector_jars",
]
