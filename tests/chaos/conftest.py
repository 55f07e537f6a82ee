"""The chaos tests' Spark workers can carry the mutants (benchmarks/chaos/mutant_patches.py).

Runs at collection, so before the session's SparkSession (tests/conftest.py) starts
its JVM: the JVM, and the Python workers it starts, inherit ``PYTHONPATH`` with
``benchmarks/chaos/worker_site`` first, whose ``sitecustomize.py`` installs the
wrappers in each worker. They stay inert unless a run arms its mutant in its own
fail-point folder; ``ChaosEnv`` installs them in this process and refuses a mutant
run whose workers lack them.
"""

from __future__ import annotations

import os

from benchmarks.chaos.mutant_patches import worker_pythonpath

os.environ["PYTHONPATH"] = worker_pythonpath()
