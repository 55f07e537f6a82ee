"""Byte code for PySpark's ``pyspark.zip``, which Spark puts first on the path of every
Python process it starts.

Spark starts its Python processes (the workers, the driver's data source planners and
writers, a Python streaming source's runner, the streaming sink's commits) with
``$SPARK_HOME/python/lib/pyspark.zip`` ahead of everything else on ``PYTHONPATH``, and a
pip-installed PySpark ships that zip with sources only. Python's zip importer never
writes byte code, so each such process compiled every PySpark module it imported:
``pyspark.sql`` and its data source modules 0.9-1.0 CPU s from the zip against 0.4-0.5
from installed byte code (measured 2026-12-04). ``dedup/local/setup.sh`` runs this
module on the project's own virtual environment; a user's PySpark is never touched by
the library.

The zip is rewritten with an unchecked hash-based ``.pyc`` beside each ``.py`` (where the
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

__all__ = ["compile_zip", "has_byte_code", "pyspark_zip"]

_FLAGS_UNCHECKED_HASH = 0b01  # PEP 552: hash-based, source not checked


def pyspark_zip() -> Path:
    """The ``pyspark.zip`` of the PySpark this Python imports (``<pyspark>/python/lib``).

    Raises
    ------
    FileNotFoundError
        That PySpark has no such zip (a PySpark run from a source tree).
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("pyspark is not installed in this Python: run setup.sh")
    path = Path(spec.origin).parent / "python" / "lib" / "pyspark.zip"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: this PySpark ships no pyspark.zip")
    return path


def has_byte_code(path: Path) -> bool:
    """Whether ``path`` holds byte code this Python reads for ``pyspark/__init__.py``."""
    with zipfile.ZipFile(path) as archive:
        try:
            head = archive.read("pyspark/__init__.pyc")[:4]
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
    so a process that starts meanwhile reads one or the other, whole. A module whose
    source this Python cannot compile keeps its source only. Safe to repeat.
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
                    pyc = _pyc(data, info.filename)
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
    """``python -m dedup.local.pyspark_zip``: compile this Python's ``pyspark.zip``."""
    path = pyspark_zip()
    changed = compile_zip(path)
    if "-q" not in sys.argv[1:]:
        print(f"[setup] {path}: {'byte code added' if changed else 'byte code present'}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
