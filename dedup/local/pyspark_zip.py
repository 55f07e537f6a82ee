"""Byte code for PySpark's ``pyspark.zip`` and Py4J's zip, which Spark puts first on the
path of every Python process it starts.

Spark starts its Python processes (the workers, the driver's data source planners and
writers, a Python streaming source's runner, the streaming sink's commits) with
``$SPARK_HOME/python/lib/pyspark.zip`` and ``py4j-*-src.zip`` ahead of everything else on
``PYTHONPATH``, and a pip-installed PySpark ships those zips with sources only. Python's
zip importer never writes byte code, so each such process compiled every module it
imported from them: ``pyspark.sql`` and its data source modules 0.9-1.0 CPU s from the
zip against 0.4-0.5 from installed byte code, Py4J's gateway 0.03 s more (measured
2026-12-04). ``dedup/local/setup.sh`` runs this module on the project's own virtual
environment; a user's PySpark is never touched by the library.

Each zip is rewritten with an unchecked hash-based ``.pyc`` beside each ``.py`` (where the
zip importer looks for byte code), compiled by the Python that runs this. A Python with
other byte code (another version) reads the magic number, skips the ``.pyc`` and
compiles the source as before; the sources stay in the zip for tracebacks. Safe to
repeat: a zip whose byte code this Python already reads is left as it is.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = ["compile_zip", "has_byte_code", "spark_python_zips"]

_FLAGS_UNCHECKED_HASH = 0b01  # PEP 552: hash-based, source not checked


def spark_python_zips() -> list[Path]:
    """The zips of sources in ``<pyspark>/python/lib`` of the PySpark this Python imports
    (``pyspark.zip`` and Py4J's).

    Raises
    ------
    FileNotFoundError
        That PySpark has no ``pyspark.zip`` (a PySpark run from a source tree).
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("pyspark is not installed in this Python: run setup.sh")
    lib = Path(spec.origin).parent / "python" / "lib"
    if not (lib / "pyspark.zip").is_file():
        raise FileNotFoundError(f"{lib / 'pyspark.zip'} not found: this PySpark ships no "
                                "pyspark.zip")
    return sorted(lib.glob("*.zip"))


def has_byte_code(path: Path) -> bool:
    """Whether the zip at ``path`` holds byte code this Python reads (judged by its first
    ``.py`` file's ``.pyc``); a zip without sources needs none."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        first = next((name for name in names if name.endswith(".py")), None)
        if first is None:
            return True
        try:
            head = archive.read(first + "c")[:4]
        except KeyError:
            return False
    return head == importlib.util.MAGIC_NUMBER


def _pyc(source: bytes, name: str) -> bytes:
    code = compile(source, name, "exec", dont_inherit=True)
    return b"".join([importlib.util.MAGIC_NUMBER,
                     _FLAGS_UNCHECKED_HASH.to_bytes(4, "little"),
                     importlib.util.source_hash(source), marshal.dumps(code)])


def compile_zip(path: Path) -> bool:
    """Rewrite the zip at ``path`` with byte code beside each of its ``.py`` files.

    Returns False (and leaves the file alone) when it already holds this Python's
    byte code, True after a rewrite. The new zip replaces the old one in one rename,
    so a process that starts meanwhile reads one or the other, whole (one already
    importing from the old zip would not: run it, as ``setup.sh`` does, right after
    pip has installed PySpark, before Spark runs). A module whose source this Python
    cannot compile keeps its source only. Safe to repeat.
    """
    if has_byte_code(path):
        return False
    handle, temporary = tempfile.mkstemp(prefix=".pyspark-", suffix=".zip", dir=path.parent)
    os.close(handle)
    try:
        with zipfile.ZipFile(path) as source, \
                zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                if info.filename.endswith(".pyc"):
                    continue  # another Python's byte code: replaced by this one's
                data = source.read(info)
                target.writestr(info, data)
                if not info.filename.endswith(".py"):
                    continue
                try:
                    # the path the zip importer gives a module compiled from the zip's
                    # source, so that tracebacks read as before
                    pyc = _pyc(data, os.path.join(str(path), info.filename))
                except (SyntaxError, ValueError):
                    continue
                entry = zipfile.ZipInfo(info.filename + "c", info.date_time)
                entry.compress_type = zipfile.ZIP_DEFLATED
                target.writestr(entry, pyc)
        os.chmod(temporary, path.stat().st_mode & 0o777)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return True


def main() -> int:
    """``python -m dedup.local.pyspark_zip [-q]``: compile this Python's PySpark zips."""
    for path in spark_python_zips():
        changed = compile_zip(path)
        if "-q" not in sys.argv[1:]:
            print(f"[setup] {path}: {'byte code added' if changed else 'byte code present'}",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
