"""The JIT tier of the suite's JVMs (docs/development.md, issue 52).

Every JVM the suite starts (a Spark session's, each `dedup run` child's, each user
script's, the Spark Connect server, a standalone cluster's daemons and executors, the
Kafka brokers) lives seconds to minutes, and on two cores the C2 compiler's work for
them is time no test gets: C1 alone cut the CPU of two Spark test files by 23% and of
the three cluster files by 35%, and a broker spent 35-45% of its CPU in C2
(docs/development.md). Only the JIT tier changes, not what runs.
"""

from __future__ import annotations

from collections.abc import Mapping

C1_ONLY = "-XX:TieredStopAtLevel=1"


def with_c1_jvms(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for a Spark standalone cluster's daemons, whose JVMs then take C1 alone.

    ``SPARK_SUBMIT_OPTS`` (tests/conftest.py) reaches only a driver's JVM; the master,
    the workers and the executors a worker starts (with the worker's environment) read
    ``JAVA_TOOL_OPTIONS``, as every JVM does. The note it prints goes to the daemons' and
    executors' own logs, which no test reads for warnings. A value already set is kept.
    """
    return {"JAVA_TOOL_OPTIONS": C1_ONLY, **environ}
