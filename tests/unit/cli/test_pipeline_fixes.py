"""From ``dedup run``, a suggested fix names the pipeline file's key, not a Python constructor."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from dedup.cli.config_file import SCHEMA
from dedup.cli.main import main
from dedup.exceptions import AppIdInUseError, UnsafeSettingError

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).with_name("data")
CONSTRUCTOR = re.compile(r"\b[A-Z]\w*Config\(\w+=[^()]*\)")
NO_PIPELINE_KEY = {
    # dedup run always names the ID column itself (_record_id, from [ids]).
    "DedupConfig(id_column=...)",
}
PIPELINE_KEY = re.compile(r"\b(\w+)\.(\w+) = (\S+) in the pipeline file")


def constructor_phrases() -> set[str]:
    """Every ``SomeConfig(field=value)`` in a string of the core's, sinks' or sources' code."""
    found: set[str] = set()
    for package in ("dedup", "sinks", "sources"):
        for path in (ROOT / package).rglob("*.py"):
            if "cli" in path.relative_to(ROOT).parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.update(CONSTRUCTOR.findall(node.value))
    return found


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEDUP_CACHE_DIR", str(tmp_path / "cache"))


def _printed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
             error: BaseException, command: str = "run") -> str:
    def handler(args: Any) -> int:
        raise error

    monkeypatch.setattr(f"dedup.cli.{command}.{command}_command", handler)
    main([command, "pipeline.toml"] if command == "run" else [command])
    return capsys.readouterr().err


def test_the_scan_finds_the_known_phrases() -> None:
    phrases = constructor_phrases()
    assert {"DedupConfig(allow_shared_app_id=True)",
            "RedisConfig(require_persistence=False)"} <= phrases, phrases


@pytest.mark.parametrize("phrase", sorted(constructor_phrases() - NO_PIPELINE_KEY))
def test_every_constructor_phrase_is_translated(phrase: str, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    err = _printed(monkeypatch, capsys, UnsafeSettingError(f"refused: or set {phrase} if sure"))
    assert phrase not in err and "Config(" not in err, err
    match = PIPELINE_KEY.search(err)
    assert match, err
    table, key, value = match.groups()
    assert key in SCHEMA[table], f"{table}.{key} is not a pipeline file key: {err}"
    field, _, python_value = phrase.partition("(")[2].rstrip(")").partition("=")
    assert key == field
    assert value == {"True": "true", "False": "false"}.get(python_value, python_value)


def test_the_real_messages(monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    err = _printed(monkeypatch, capsys, AppIdInUseError(
        "app id 'a' is in use by streaming query q (it claimed within the last 60 s): give "
        "this pipeline its own app id, stop the other query, or set "
        "DedupConfig(allow_shared_app_id=True) if both are the same pipeline"))
    assert ("or set dedup.allow_shared_app_id = true in the pipeline file if both are the "
            "same pipeline") in err
    err = _printed(monkeypatch, capsys, UnsafeSettingError(
        "the checkpoint Redis runs with appendonly=no: ... Enable AOF (CONFIG SET appendonly "
        "yes) or set option redis.require.persistence=false"))
    assert "or set redis.require_persistence = false in the pipeline file" in err
    err = _printed(monkeypatch, capsys, UnsafeSettingError(
        "app id 'a' was created with num_shards=4 but this pipeline uses num_shards=8: use "
        "num_shards=4 or a new app id"))
    assert "use dedup.num_shards = 4 in the pipeline file or a new app id" in err
    # The sink's transaction-timeout refusal, as Spark carries it back.
    tail = (DATA / "analysis_txn_timeout.txt").read_text().splitlines()[-2]
    err = _printed(monkeypatch, capsys, UnsafeSettingError(tail.split(": ", 1)[1]))
    assert ('Lower sink.options."kafka.transaction.timeout.ms" in the pipeline file to '
            '<= 900000') in err


def test_the_pipeline_fixes_name_existing_keys() -> None:
    from dedup.cli.errors import PIPELINE_KEYS, for_pipeline_file

    for phrase, fix in PIPELINE_KEYS.items():
        assert for_pipeline_file(f"x: {phrase} y") == f"x: {fix} y"
        match = re.search(r"\b(\w+)\.(\w+)", fix)  # table.key (sink.options."name")
        assert match, fix
        table, key = match.groups()
        assert key in SCHEMA[table], fix


def test_other_commands_keep_the_python_names(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # The demo builds its configuration in Python: no pipeline file to point at.
    err = _printed(monkeypatch, capsys,
                   UnsafeSettingError("set DedupConfig(allow_shared_app_id=True)"), "demo")
    assert "set DedupConfig(allow_shared_app_id=True)" in err
