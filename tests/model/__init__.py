"""A small-step model of the exactly-once protocol and its exhaustive explorer (docs/model.md).

Test and development code: nothing here is shipped or imported by ``dedup`` / ``sinks``.
"""
