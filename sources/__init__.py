"""Sources that attach record IDs: Kafka, files, and a replayable synthetic stream."""

__all__: list[str] = []
