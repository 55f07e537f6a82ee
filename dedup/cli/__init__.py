"""The ``dedup`` console script: the one composition root of the project.

Only here do the core (``dedup``), the adapters (``sinks``, ``sources``) and
the local service manager (``dedup.local``) meet; the core imports none of
them, and the adapters import only the core (``tests/unit/test_layering.py``).
"""
