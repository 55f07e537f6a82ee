"""What the person running ``dedup`` is told when a command fails.

Spark wraps an error of our code on its workers (or in its Python data source
planner) in Java exceptions: ``StreamingQueryException``, Py4J errors, a
``PythonException`` carrying the worker's traceback as text, sometimes only in
the cause chain under ``Writing job failed.``. :func:`find_toolkit_error`
finds the toolkit's own error (every class derives from
:class:`~dedup.exceptions.DedupError`) in that text, so the CLI prints its one
line and exits with the code of its class: every refused setting (a
:class:`~dedup.exceptions.ConfigError`, whether raised here or in a Spark
worker) exits :data:`EXIT_CONFIG`.

The core and the sinks name their fixes in the Python API
(``DedupConfig(allow_shared_app_id=True)``, ``option redis.url``);
:func:`for_pipeline_file` rewrites those to the pipeline file's keys for
``dedup run``, whose users never write a constructor.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dedup.exceptions import ConfigError, DedupError

EXIT_OK = 0
EXIT_RUNTIME = 1
"""A runtime failure: a service unreachable or lost mid-run, a failed batch or verification."""
EXIT_CONFIG = 2
"""Bad usage, or a configuration or unsafe setting refused (any ``ConfigError``)."""
EXIT_INCOMPLETE = 3
"""``dedup run`` stopped by ``--max-seconds`` with input left; run it again to resume."""

EXIT_CODES_HELP = """\
exit codes:
  0 success
  1 runtime failure (a service unreachable or lost mid-run, a failed batch,
    a failed verification)
  2 bad usage or a refused configuration (a missing, malformed or unsafe
    setting: ConfigError, UnsafeSettingError, SinkConfigError, ...)
"""
RUN_EXIT_CODES_HELP = EXIT_CODES_HELP + """\
  3 stopped by --max-seconds with input left (run the same command again to
    resume from the checkpoint)
"""


def toolkit_error_classes() -> dict[str, type[DedupError]]:
    """Every error class of the toolkit by name (the roots' subclasses, recursively)."""
    # Import the packages whose errors Spark may carry back from a worker, so
    # their classes are registered as subclasses of the root.
    import dedup.cli.exceptions  # noqa: F401  (DemoFailedError)
    import sinks.exceptions  # noqa: F401  (KafkaUnavailableError)
    import sources.exceptions  # noqa: F401

    found: dict[str, type[DedupError]] = {}
    todo: list[type[DedupError]] = [DedupError]
    while todo:
        cls = todo.pop()
        if cls.__name__ not in found:
            found[cls.__name__] = cls
            todo.extend(cls.__subclasses__())
    return found


@dataclass(frozen=True)
class ToolkitError:
    """A toolkit error found in a wrapped error's text."""

    cls: type[DedupError]
    message: str

    @property
    def line(self) -> str:
        """``ClassName: message``, one line."""
        return f"{self.cls.__name__}: {self.message}"

    @property
    def exit_code(self) -> int:
        """:data:`EXIT_CONFIG` for a refused setting, else :data:`EXIT_RUNTIME`."""
        return EXIT_CONFIG if issubclass(self.cls, ConfigError) else EXIT_RUNTIME


def _pattern(names: Iterable[str]) -> re.Pattern[str]:
    alternatives = "|".join(sorted(names, key=len, reverse=True))
    # "dedup.exceptions.CatalogUnavailableError: Redis at ..." at the start of a
    # line (the last line of a worker traceback) or after "Caused by: " / "...: ";
    # never "raise CatalogUnavailableError(" (a traceback's source line).
    return re.compile(rf"(?:^|\s|: )(?:[A-Za-z_]\w*\.)*({alternatives}): (\S.*)$")


def find_toolkit_error(texts: Iterable[str]) -> ToolkitError | None:
    """The toolkit error named in ``texts`` (outermost wrapper first), or None.

    In the first text that names one, the last match wins: a Python
    traceback prints the error that was raised after the ones it chains.
    """
    classes = toolkit_error_classes()
    pattern = _pattern(classes)
    for text in texts:
        best: ToolkitError | None = None
        for line in text.splitlines():
            match = pattern.search(line.rstrip())
            if match:
                best = ToolkitError(classes[match.group(1)], match.group(2).strip())
        if best is not None:
            return best
    return None


def from_spark(exc: BaseException) -> bool:
    """Whether ``exc`` is PySpark's or Py4J's (a query's error, whose text holds Java's)."""
    return type(exc).__module__.split(".")[0] in {"pyspark", "py4j"}


def exception_texts(exc: BaseException, limit: int = 20) -> list[str]:
    """The messages of ``exc`` and of everything it wraps, outermost first.

    Follows Python's ``__cause__`` / ``__context__``, PySpark's captured
    ``_cause`` and a Py4J error's Java exception with its ``getCause()`` chain.
    A captured exception whose ``str()`` needs the JVM (PySpark 4.2's
    ``PythonException`` asks it for the message parameters) and fails gives
    its own description instead; its causes are followed all the same.
    """
    texts: list[str] = []
    seen: set[int] = set()
    todo: list[Any] = [exc]
    while todo and len(texts) < limit:
        item = todo.pop(0)
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        try:
            texts.append(str(item) if isinstance(item, BaseException) else str(item.toString()))
        except Exception:  # needs a JVM that is not there (any more)
            if not isinstance(item, BaseException):
                continue  # a Java object: nothing more to read
            desc = getattr(item, "_desc", None)
            if isinstance(desc, str):
                texts.append(desc)
        if isinstance(item, BaseException):
            todo += [getattr(item, "_cause", None), getattr(item, "java_exception", None),
                     item.__cause__, item.__context__]
        else:
            with contextlib.suppress(Exception):  # the JVM may be gone
                todo.append(item.getCause())
    return texts


# Phrases of the core's and the sinks' messages -> what to write in the pipeline
# file instead. The sink's options that have no key of their own go under
# [sink.options] (by their dotted names, quoted or not).
PIPELINE_KEYS: dict[str, str] = {
    "DedupConfig(allow_shared_app_id=True)":
        "dedup.allow_shared_app_id = true in the pipeline file",
    'DedupConfig(invalid_ids="dead_letter")':
        'dedup.invalid_ids = "dead_letter" in the pipeline file',
    "RedisConfig(require_persistence=False)":
        "redis.require_persistence = false in the pipeline file",
    "option redis.require.persistence=false":
        "redis.require_persistence = false in the pipeline file",
    "set RedisConfig(wait_replicas=N)": "set redis.wait_replicas = N in the pipeline file",
    "option redis.url": "redis.url in the pipeline file (or --redis-url)",
    "option topic": "sink.topic in the pipeline file",
    "option dead.letter.topic":
        'sink.options."dead.letter.topic" in the pipeline file',
    "Lower kafka.transaction.timeout.ms":
        'Lower sink.options."kafka.transaction.timeout.ms" in the pipeline file',
    "Raise kafka.transaction.timeout.ms":
        'Raise sink.options."kafka.transaction.timeout.ms" in the pipeline file',
}

_NUM_SHARDS = re.compile(r"\buse num_shards=(\d+)")
_BUCKET = re.compile(r"\bset RetentionConfig\(bucket_seconds=(\d+)\)")


def for_pipeline_file(message: str) -> str:
    """``message`` with its fixes named as pipeline file keys (for ``dedup run``)."""
    for phrase, key in PIPELINE_KEYS.items():
        message = message.replace(phrase, key)
    message = _BUCKET.sub(r"set dedup.retention.bucket_seconds = \1 in the pipeline file",
                          message)
    return _NUM_SHARDS.sub(r"use dedup.num_shards = \1 in the pipeline file", message)
