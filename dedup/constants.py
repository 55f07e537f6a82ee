"""Names shared by the core, the sources and the sinks."""

DEFAULT_ID_COLUMN = "_record_id"
"""Column that :func:`dedup.with_record_id` writes and the sink reads."""

RECORD_ID_HEADER = "dedup-record-id"
"""Kafka header in which the exactly-once sink writes each record's ID."""

KEY_PREFIX = "dedup"
"""First part of every Redis key the toolkit writes."""

STOP_HANDLING_WAIT_S = 15.0
"""Longest wait, in seconds, for the session listener to handle a stopped query's end
(Spark posts it right after the query ends, asynchronously; handling it is a few
Redis calls that release the query's leases): what closing the listener, a new
query's start and a refused take of a sink output's lease wait at most. It bounds
only a stuck Redis or listener bus."""
