"""Names shared by the core, the sources and the sinks."""

DEFAULT_ID_COLUMN = "_record_id"
"""Column that :func:`dedup.with_record_id` writes and the sink reads."""

RECORD_ID_HEADER = "dedup-record-id"
"""Kafka header in which the exactly-once sink writes each record's ID."""

KEY_PREFIX = "dedup"
"""First part of every Redis key the toolkit writes."""
