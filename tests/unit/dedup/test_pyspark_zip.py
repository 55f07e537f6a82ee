"""PySpark's zip of sources gets byte code its importers read (dedup/local/pyspark_zip.py)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from dedup.local.pyspark_zip import compile_zip, has_byte_code, spark_python_zips


def _zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def _import(path: Path, module: str) -> list[str]:
    code = (f"import sys; sys.path.insert(0, {str(path)!r}); import {module} as m; "
            "print(m.__file__); print(m.VALUE); "
            "print(m.__spec__.loader.get_code(m.__name__).co_filename)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return done.stdout.split()


def test_each_module_is_imported_from_its_byte_code_and_the_sources_stay(tmp_path: Path) -> None:
    path = _zip(tmp_path / "pyspark.zip", {
        "pyspark/__init__.py": b"VALUE = 'package'\n",
        "pyspark/sql/__init__.py": b"",
        "pyspark/sql/mod.py": b"VALUE = 6 * 7\n",
        "pyspark/broken.py": b"def (:\n",
        "pyspark/data.txt": b"not code",
    })
    assert not has_byte_code(path)
    assert compile_zip(path) is True
    assert has_byte_code(path)
    names = set(zipfile.ZipFile(path).namelist())
    assert {"pyspark/__init__.pyc", "pyspark/sql/mod.pyc", "pyspark/sql/mod.py",
            "pyspark/broken.py", "pyspark/data.txt"} <= names
    assert "pyspark/broken.pyc" not in names  # no byte code for what does not compile
    origin, value, compiled_as = _import(path, "pyspark.sql.mod")
    assert origin.endswith("pyspark.zip/pyspark/sql/mod.pyc") and value == "42"
    assert compiled_as == f"{path}/pyspark/sql/mod.py"  # tracebacks name the source
    assert compile_zip(path) is False  # present: left alone
    assert not list(tmp_path.glob(".pyspark-*"))  # no temporary file left


def test_another_pythons_byte_code_is_replaced(tmp_path: Path) -> None:
    other = b"\x00\x00\r\n" + bytes(12) + b"junk"
    path = _zip(tmp_path / "pyspark.zip", {"pyspark/__init__.py": b"VALUE = 1\n",
                                           "pyspark/__init__.pyc": other})
    assert not has_byte_code(path)
    assert compile_zip(path) is True
    archive = zipfile.ZipFile(path)
    assert archive.namelist().count("pyspark/__init__.pyc") == 1
    assert archive.read("pyspark/__init__.pyc") != other
    assert _import(path, "pyspark")[1] == "1"


def test_py4js_zip_is_compiled_too_and_a_zip_without_sources_needs_nothing(
        tmp_path: Path) -> None:
    path = _zip(tmp_path / "py4j-src.zip", {"py4j/version.py": b"VALUE = '0.10'\n",
                                            "py4j/__init__.py": b"VALUE = 'py4j'\n"})
    assert not has_byte_code(path)
    assert compile_zip(path) is True and has_byte_code(path)
    assert _import(path, "py4j.version")[:2] == [f"{path}/py4j/version.pyc", "0.10"]
    empty = _zip(tmp_path / "data.zip", {"README": b"no code"})
    assert has_byte_code(empty) and compile_zip(empty) is False


def test_the_zips_of_this_pysparks_lib_are_found() -> None:
    names = [path.name for path in spark_python_zips()]
    assert "pyspark.zip" in names and any(name.startswith("py4j-") for name in names)
