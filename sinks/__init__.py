"""Exactly-once sinks (a transactional Kafka sink for Spark Structured Streaming)."""

__all__: list[str] = []
