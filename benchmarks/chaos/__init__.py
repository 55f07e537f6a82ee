"""The chaos suite: failure transparency under crashes of every component.

``python -m benchmarks.chaos --runs 200`` runs the full matrix; a short subset
runs in the test suite (``tests/chaos``). See :mod:`benchmarks.chaos.runner`.
"""
