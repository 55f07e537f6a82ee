"""The ``dedup`` console script: the one composition root of the project.

Only here do the core (``dedup``), the adapters (``sinks``, ``sources``) and
the local service manager (``dedup.local``) meet; the core imports none of
them, and the adapters import only the core (``tests/unit/test_layering.py``).

The pipeline API is what ``dedup run`` does, for a program that drives pipelines
itself (the chaos harness does): :func:`load_pipeline` or :func:`parse_pipeline`
read and check a pipeline file (``docs/configuration.md``), and :func:`start_query`
starts it on a SparkSession against the :class:`Addresses` of its services, with
the start-up refusals of ``dedup run``. A program that composes its own query from
the file's parts takes :func:`dedup_config`, :func:`source_frame` and
:func:`sink_frame`.
"""

from dedup.cli.config_file import PipelineFile, load_pipeline, parse_pipeline
from dedup.cli.pipeline import Addresses, dedup_config, sink_frame, source_frame, start_query

__all__ = ["Addresses", "PipelineFile", "dedup_config", "load_pipeline", "parse_pipeline",
           "sink_frame", "source_frame", "start_query"]
