"""The pipeline file of ``dedup run``: TOML, read with :mod:`tomllib`, checked strictly.

Every table has a fixed set of keys; an unknown key is an error naming it and
the allowed keys (a typo must not silently fall back to a default). Service
addresses left empty are filled from ``dedup services up``'s state file. The keys
of ``[dedup]`` and ``[redis]`` are the field names of ``DedupConfig`` and its
``RedisConfig``, nested ones dotted as TOML nests them (``bloom.capacity = 20``
under ``[dedup]``, or a table ``[dedup.bloom]``), in the same units.
"""

from __future__ import annotations

import datetime
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dedup.config import BloomConfig, DedupConfig, RetentionConfig, shown, validate_app_id
from dedup.constants import RECORD_ID_HEADER
from dedup.exceptions import ConfigError
from sources.synthetic_rows import SyntheticOptions

SYNTHETIC_KEYS = ("seed", "rows_per_batch", "total_rows", "rows_per_second", "duplicate_rate",
                  "duplicate_distance", "duplicate_gap_batches", "num_keys", "key_skew",
                  "payload_bytes", "num_partitions")
# Defaults live in the config dataclasses; the file's keys take theirs.
_DEDUP = DedupConfig(app_id="defaults")
_BLOOM, _RETENTION, _SYNTHETIC = BloomConfig(), RetentionConfig(), SyntheticOptions()

# table -> {key: default}. None means "no default" (required or optional).
SCHEMA: dict[str, dict[str, Any]] = {
    "": {"app_id": None, "checkpoint": ""},
    "source": {
        "type": "synthetic",
        **{key: getattr(_SYNTHETIC, key) for key in SYNTHETIC_KEYS},
        # kafka
        "bootstrap_servers": "", "topics": [], "starting_offsets": "earliest",
        "max_offsets_per_trigger": 0,
        # Spark's Kafka source options, verbatim (kafka.security.protocol, ...)
        "options": {},
        # files
        "path": "", "format": "json", "schema": "", "max_files_per_trigger": 0,
    },
    "ids": {"strategy": "", "column": "", "columns": [], "header": RECORD_ID_HEADER},
    # DedupConfig's own names (nested ones dotted), but "enabled" (a dedup step or none)
    "dedup": {
        "enabled": True, "num_shards": _DEDUP.num_shards, "bloom.enabled": _BLOOM.enabled,
        "bloom.capacity": _BLOOM.capacity, "bloom.error_rate": _BLOOM.error_rate,
        "retention.horizon_seconds": _RETENTION.horizon_seconds,
        "retention.bucket_seconds": _RETENTION.bucket_seconds,
        "retention.event_time_column": _RETENTION.event_time_column or "",
        "retention.late_policy": str(_RETENTION.late_policy),
        "allow_shared_app_id": _DEDUP.allow_shared_app_id,
        "invalid_ids": str(_DEDUP.invalid_ids),
    },
    # RedisConfig's names; wait_replicas -1: the count recorded for the app id (its None)
    "redis": {"url": "", "require_persistence": _DEDUP.redis.require_persistence,
              "wait_replicas": -1, "failover_wait": _DEDUP.redis.failover_wait},
    "sink": {
        "type": "kafka", "bootstrap_servers": "", "topic": "", "partitions": 2,
        # one_pass: when the file does not set it, on wherever it can run (dedup on,
        # a Kafka sink); see parse_pipeline
        "key_column": "key", "value_column": "", "one_pass": True, "options": {},
    },
    "run": {
        "trigger_seconds": 0.0, "stop_after_idle_seconds": 10.0, "max_seconds": 0.0,
        # 0: one per core of a local master (dedup.cli.run.shuffle_partitions)
        "shuffle_partitions": 0, "master": "local[2]",
        # a Spark Connect server (sc://host:port) instead of the classic session of master
        "remote": "",
    },
}
SOURCE_TYPES = ("synthetic", "kafka", "files")
SINK_TYPES = ("kafka", "console")


@dataclass(frozen=True)
class PipelineFile:
    """A parsed pipeline file: ``tables[table][key]`` with defaults filled in."""

    path: str
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def app_id(self) -> str:
        return str(self.tables[""]["app_id"])

    def table(self, name: str) -> dict[str, Any]:
        return self.tables[name]


def _check_keys(where: str, given: dict[str, Any], allowed: dict[str, Any]) -> None:
    for key in given:
        if key not in allowed:
            label = f"[{where}]" if where else "the top level"
            raise ConfigError(
                f"unknown key {key!r} in {label}; allowed keys: {', '.join(sorted(allowed))}"
            )


def _typed(where: str, key: str, value: Any, default: Any) -> Any:
    if default is None or value is None:
        return value
    expected: tuple[type, ...]
    if isinstance(default, bool):
        expected = (bool,)
    elif isinstance(default, float):
        expected = (int, float)
    elif isinstance(default, int):
        expected = (int,)
    else:
        expected = (type(default),)
    label = f"{where}.{key}" if where else key
    if not isinstance(value, expected) or (expected != (bool,) and isinstance(value, bool)):
        raise ConfigError(
            f"{label} must be a {expected[0].__name__} like {default!r}, not {_shown(value)}"
        )
    if isinstance(value, list) and not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{label} must be a list of strings like [\"a\", \"b\"], not "
                          f"{_shown(value)}")
    if isinstance(value, dict):
        for name, item in _flat(value).items():
            if not isinstance(item, (str, int, float, bool)):
                raise ConfigError(f"{label}.{name} must be a string, number or boolean "
                                  f"(the option's value), not {_shown(item)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{label} must be a finite number like {default!r}, not {value!r}")
    if expected == (int, float):
        try:
            return float(value)
        except OverflowError as exc:  # an integer past float's range
            raise ConfigError(f"{label} must be a number like {default!r}, not one of "
                              f"{len(str(value))} digits") from exc
    return value


def _shown(value: Any) -> str:
    """A wrong value in one line: a string (redacted: it may be a URL with a password)
    or number as written, an array or table by its TOML type (it may hold secrets)."""
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, (datetime.date, datetime.time)):
        return f"a date or time ({type(value).__name__})"
    return shown(value)


def _flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``: TOML's nested tables of an unquoted dotted key."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def parse_pipeline(text: str, path: str = "<string>") -> PipelineFile:
    """Parse and check a pipeline file's text.

    Raises
    ------
    ConfigError
        Invalid TOML, an unknown table or key, a wrongly typed value, a
        missing or invalid ``app_id``, or an unknown source / sink type.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    except ValueError as exc:  # int(): a number longer than Python reads (4300 digits)
        raise ConfigError(f"{path} holds a number too long to read ({exc.args[0]}".split(";")[0]
                          + "): no setting takes such a number") from exc
    top = {k: v for k, v in data.items() if not isinstance(v, dict)}
    nested = {k: v for k, v in data.items() if isinstance(v, dict)}
    _check_keys("", top, SCHEMA[""])
    for name in nested:
        if name not in SCHEMA or name == "":
            names = ", ".join(f"[{t}]" for t in SCHEMA if t)
            raise ConfigError(f"unknown table [{name}] in {path}; allowed tables: {names}")
    tables: dict[str, dict[str, Any]] = {}
    for name, defaults in SCHEMA.items():
        given = top if name == "" else nested.get(name, {})
        if name == "dedup":
            given = _flat(given)  # bloom.capacity = 20, or a table [dedup.bloom]
        _check_keys(name, given, defaults)
        tables[name] = {key: _typed(name, key, given.get(key, default), default)
                        for key, default in defaults.items()}
    # The sink's options are Spark option names, dotted (kafka.acks,
    # strong.productions): written unquoted, TOML nests them.
    tables["sink"]["options"] = _flat(tables["sink"]["options"])
    tables["source"]["options"] = {key: str(value) for key, value
                                   in _flat(tables["source"]["options"]).items()}
    validate_app_id(tables[""]["app_id"])
    if tables["source"]["type"] not in SOURCE_TYPES:
        raise ConfigError(f"source.type must be one of {', '.join(SOURCE_TYPES)}, not "
                          f"{tables['source']['type']!r}")
    if tables["sink"]["type"] not in SINK_TYPES:
        raise ConfigError(f"sink.type must be one of {', '.join(SINK_TYPES)}, not "
                          f"{tables['sink']['type']!r}")
    if tables["sink"]["type"] == "kafka" and not tables["sink"]["topic"]:
        raise ConfigError("sink.topic is required for sink.type = \"kafka\": name the output "
                          "topic")
    given_run = nested.get("run", {})
    if "master" in given_run and given_run.get("remote"):
        raise ConfigError(f"{path} sets both run.master and run.remote: a pipeline runs either "
                          "in a classic session (master) or through a Spark Connect server "
                          "(remote); remove one of them")
    check_remote_url(tables["run"]["remote"], "run.remote")
    sink = tables["sink"]
    fits = tables["dedup"]["enabled"] and sink["type"] == "kafka"
    if "one_pass" not in nested.get("sink", {}):
        # One pass is the cheaper form with the same guarantees; a file that does not
        # choose gets it wherever it can run, and the two-step form elsewhere.
        sink["one_pass"] = bool(fits)
    elif sink["one_pass"] and not fits:
        raise ConfigError("sink.one_pass = true needs dedup.enabled = true and sink.type = "
                          "\"kafka\" (it runs the dedup step inside the Kafka sink's write): "
                          "set sink.one_pass = false or leave it out")
    return PipelineFile(path=path, tables=tables)


def check_remote_url(url: str, where: str) -> None:
    """Refuse a Spark Connect address that is not ``sc://host:port`` (empty: none given)."""
    if url and not url.startswith("sc://"):
        raise ConfigError(f"{where} must be a Spark Connect URL like sc://127.0.0.1:15002, "
                          f"not {shown(url)} (a classic master such as local[2] goes in run.master "
                          "or --master)")


def load_pipeline(path: str | Path) -> PipelineFile:
    """Read and check a pipeline file; see :func:`parse_pipeline`."""
    file = Path(path)
    try:
        text = file.read_text()
    except FileNotFoundError as exc:
        raise ConfigError(f"pipeline file {file} not found: check the path "
                          "(an example: dedup run --example)") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline file {file}: {exc}") from exc
    return parse_pipeline(text, str(file))


def example_path() -> Path:
    """The example pipeline file shipped with the package."""
    return Path(__file__).with_name("example.toml")
