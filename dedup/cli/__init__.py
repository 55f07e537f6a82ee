"""The ``dedup`` console script."""
