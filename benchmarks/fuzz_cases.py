"""Hostile input, generated: the strategies and properties of the fuzz tests (issue 50).

Shared by the unit and integration tests (a few hundred seeded examples) and by
``python -m benchmarks.fuzz`` (ten thousand and more). Each property takes one
generated case and returns the problems it shows, as short strings; no problem is
the pass. A problem is one of:

* ``traceback``: an exception that is not a :class:`~dedup.exceptions.DedupError`;
* ``multi-line``: a refusal whose message spans lines (a user reads one line);
* ``secret``: :data:`PASSWORD` (given only as a password: in a URL's user info, a
  ``password=`` query argument, or a secret Kafka option) in a message or a ``repr``;
* ``lost`` / ``duplicated`` / ``phantom``: the written output differs from the model
  (:mod:`benchmarks.fuzz_records`).

The configuration properties here are pure (no service); the record properties, which
need Redis and Kafka, are in :mod:`benchmarks.fuzz_records`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from dedup.exceptions import DedupError

PASSWORD = "P4ss-fuzz"
"""The secret every generated input hides; it must never be printed."""

ODD_TEXT = ["", " ", "\n", "a\nb", "\r", "\t", "\x00", "é", "\U0001f4a5", "nan", "inf", "-1",
            "1e309", "true", "no", "[", "'", '"', "\\", "${HOME}", "..", "a" * 300, "x" * 5000]
HUGE_INTS = [2**63 - 1, -(2**63), 10**30, -(10**30), 2**31, 0, -1]
ODD_FLOATS = [math.nan, math.inf, -math.inf, 1e308, -0.0, 5e-324]


def odd_text() -> st.SearchStrategy[str]:
    """Strings a user should not but could write (never holding :data:`PASSWORD`)."""
    return st.one_of(st.sampled_from(ODD_TEXT), st.text(max_size=12))


def scalars() -> st.SearchStrategy[Any]:
    """Any TOML scalar, odd ones often."""
    return st.one_of(st.booleans(), st.integers(), st.sampled_from(HUGE_INTS),
                     st.floats(allow_nan=True, allow_infinity=True),
                     st.sampled_from(ODD_FLOATS), odd_text())


def toml_values() -> st.SearchStrategy[Any]:
    """Any TOML value: scalars, arrays and inline tables of them."""
    return st.one_of(scalars(), st.lists(scalars(), max_size=3),
                     st.dictionaries(st.sampled_from(["a", "b.c", "x"]), scalars(), max_size=2))


# ---------------------------------------------------------------- secrets in URLs
REDIS_SCHEMES = ["redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "http",
                 "", "REDIS", "redis "]
URL_SEPARATORS = ["://", ":/", ":", "//", "", ":///"]
USER_INFO = [f"u:{PASSWORD}@", f":{PASSWORD}@", f"u:{PASSWORD}@x@", f"default:{PASSWORD}@",
             f"u:{PASSWORD}/x@", f"u:{PASSWORD}#x@", f"u:{PASSWORD}?x@", ""]
URL_HOSTS = ["h:1", "h", "[::1]:1", "[h:1", "h:1]", "h:1,h2:2", "h:x", "", "h:99999",
             "h:1, h2:2", ",", "h:-1"]
URL_TAILS = ["/0", "", "?db=1", "/0#f", f"/0?password={PASSWORD}", "/x y", "/\n"]


def redis_urls() -> st.SearchStrategy[str]:
    """Redis URLs, well and badly formed, most of them carrying :data:`PASSWORD`."""
    return st.builds(lambda *parts: "".join(parts), st.sampled_from(REDIS_SCHEMES),
                     st.sampled_from(URL_SEPARATORS), st.sampled_from(USER_INFO),
                     st.sampled_from(URL_HOSTS), st.sampled_from(URL_TAILS))


# ---------------------------------------------------------------- outcomes
def outcome(call: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``call``: its result (None when it raised) and the problems of how it ended."""
    try:
        result = call()
    except DedupError as exc:
        return None, message_problems(f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        first = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
        return None, [f"traceback: {first[:300]}", *secret_problems(str(exc))]
    return result, []


def message_problems(message: str) -> list[str]:
    """A refusal's problems: more than one line, or a secret in it."""
    problems = []
    if "\n" in message or "\r" in message:
        problems.append(f"multi-line: {message[:300]!r}")
    return problems + secret_problems(message)


def secret_problems(text: str) -> list[str]:
    return [f"secret: {text[:300]!r}"] if PASSWORD in text else []


def name_problems(config: Any) -> list[str]:
    """A built config whose app id (or output name) spans lines: every Redis key and
    transactional id derives from it (``phantom``: a name the checks should refuse)."""
    names = [getattr(config, "app_id", ""), getattr(config, "output_name", "")]
    return [f"phantom: name {name!r} accepted" for name in names
            if isinstance(name, str) and any(ord(c) < 0x20 for c in name)]


def kind(problem: str) -> str:
    """``traceback``, ``multi-line``, ``secret``, ... of one problem string."""
    return problem.split(":", 1)[0]


# ---------------------------------------------------------------- pipeline files
def toml_text(value: Any) -> str:
    """``value`` written as TOML (tomllib only reads)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_string(k)} = {toml_text(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(value)


def toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, but for the surrogates JSON
    writes as pairs (TOML takes \\U0001F4A5)."""
    out = []
    for char in text:
        if ord(char) > 0xFFFF:
            out.append(f"\\U{ord(char):08X}")
        elif ord(char) < 0x20 or char in '"\\' or ord(char) == 0x7F:
            out.append(json.dumps(char)[1:-1] if ord(char) != 0x7F else "\\u007F")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


SECRET_OPTIONS = {"kafka.sasl.password": PASSWORD, "kafka.ssl.key.password": PASSWORD,
                  "kafka.sasl.oauthbearer.config": f"clientSecret={PASSWORD}"}
RAW_VALUES = ["9" * 5000, "1e99999", "-" + "9" * 400, "0x" + "f" * 40, "nan", "-inf",
              "1979-05-27T07:32:00Z", "[[]]", '"""a\nb"""']
"""Values written verbatim into a pipeline file (what the serializer cannot make)."""


@st.composite
def pipeline_files(draw: st.DrawFn) -> str:
    """The text of a pipeline file: the schema's tables and keys with values of the
    right type mostly (so checks past the first run), wrong ones, unknown keys and
    tables, odd strings, huge numbers, NaN and inf; passwords in URLs and options."""
    from dedup.cli.config_file import SCHEMA

    lines: list[str] = []
    top: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        top["app_id"] = draw(st.one_of(st.just("fuzz-app"), st.just("fuzz.app_1"),
                                       st.sampled_from(["", "-x", "a/b", "a" * 101,
                                                        "fuzz-app\n"]),
                                       toml_values()))
    tables = draw(st.lists(st.sampled_from([t for t in SCHEMA if t] + ["unknown", "dedup.bloom"]),
                           unique=True, max_size=5))
    raw: dict[tuple[str, str], str] = {}
    for name in ["", *tables]:
        given = dict(top) if name == "" else {}
        defaults = SCHEMA.get(name, {"x": 1})
        if name == "dedup.bloom":
            defaults = {"capacity": 1, "error_rate": 0.5, "enabled": True}
        keys = draw(st.lists(st.sampled_from([*sorted(defaults), "unknown_key"]), unique=True,
                             max_size=4))
        for key in keys:
            default = defaults.get(key)
            choice = draw(st.integers(0, 9))
            if choice < 5 and default is not None:
                given[key] = draw(like(default))
            elif choice < 6:
                raw[(name, key)] = draw(st.sampled_from(RAW_VALUES))
            else:
                given[key] = draw(toml_values())
        if name == "redis" and draw(st.booleans()):
            given["url"] = draw(redis_urls())
        if name == "sink" and draw(st.booleans()):
            given_options = given.get("options")
            options: dict[str, Any] = (given_options if isinstance(given_options, dict)
                                       else {})
            given["options"] = {**options, **draw(st.dictionaries(
                st.sampled_from(sorted(SECRET_OPTIONS) + list(SINK_OPTION_NAMES)),
                toml_values(), max_size=3))}
            for option in SECRET_OPTIONS:
                if option in given["options"]:
                    given["options"][option] = SECRET_OPTIONS[option]
        if name:
            lines.append(f"[{name}]")
        lines += [f"{toml_string(k)} = {toml_text(v)}" for k, v in given.items()
                  if (name, k) not in raw]
        lines += [f"{toml_string(k)} = {v}" for (t, k), v in raw.items() if t == name]
    return "\n".join(lines) + "\n"


def like(default: Any) -> st.SearchStrategy[Any]:
    """Values of ``default``'s type, odd ones often."""
    if isinstance(default, bool):
        return st.booleans()
    if isinstance(default, int):
        return st.one_of(st.integers(-5, 100), st.sampled_from(HUGE_INTS))
    if isinstance(default, float):
        return st.one_of(st.floats(-10, 100), st.sampled_from(ODD_FLOATS))
    if isinstance(default, str):
        return st.one_of(st.just(default), odd_text())
    if isinstance(default, list):
        return st.lists(st.one_of(odd_text(), scalars()), max_size=3)
    return st.dictionaries(st.sampled_from(["a", "kafka.acks", "kafka.linger.ms"]), scalars(),
                           max_size=2)


def build_pipeline(text: str) -> Any:
    """What ``dedup run`` builds from a pipeline file before it starts Spark: the parsed
    file, its :class:`~dedup.config.DedupConfig`, the synthetic source's options and the
    sink's :class:`~sinks.config.SinkConfig` (with the options ``start_query`` passes)."""
    from dedup.cli.config_file import SCHEMA, SYNTHETIC_KEYS, parse_pipeline
    from dedup.cli.pipeline import dedup_config
    from sinks.config import SinkConfig
    from sources.synthetic_rows import SyntheticOptions

    pipeline = parse_pipeline(text, "fuzz.toml")
    for table, defaults in SCHEMA.items():
        for key, default in defaults.items():
            value = pipeline.table(table)[key]
            _check_type(f"{table}.{key}", value, default)
    redis_url = pipeline.table("redis")["url"] or "redis://127.0.0.1:6379/0"
    config = dedup_config(pipeline, redis_url)
    source = pipeline.table("source")
    synthetic = (SyntheticOptions(**{key: source[key] for key in SYNTHETIC_KEYS})
                 if source["type"] == "synthetic" else None)
    sink = pipeline.table("sink")
    sink_config = None
    if sink["type"] == "kafka":
        sink_config = SinkConfig.from_options({
            "app.id": pipeline.app_id, "kafka.bootstrap.servers": "127.0.0.1:9092",
            "topic": sink["topic"], "redis.url": redis_url,
            "redis.require.persistence": str(pipeline.table("redis")["require_persistence"]),
            **{str(k): str(v) for k, v in sink["options"].items()}})
    return pipeline, config, synthetic, sink_config


def _check_type(label: str, value: Any, default: Any) -> None:
    """A parsed value the rest of ``dedup run`` can use: the schema's type, finite
    numbers, lists of strings (a violation is a ``traceback``: parse let it through)."""
    if default is None:
        return
    if isinstance(default, float) and not (isinstance(value, float) and math.isfinite(value)):
        raise AssertionError(f"{label} parsed as {value!r}")
    if isinstance(default, list) and not all(isinstance(v, str) for v in value):
        raise AssertionError(f"{label} parsed as {value!r}")
    if isinstance(default, dict) and not all(isinstance(v, (str, int, float, bool))
                                             for v in value.values()):
        raise AssertionError(f"{label} parsed as {value!r}")


def pipeline_problems(text: str) -> list[str]:
    """The pipeline property: a valid file builds, any other is one refusal line,
    and no password shows (neither in the refusal nor in a built config's repr)."""
    built, problems = outcome(lambda: build_pipeline(text))
    if built is not None:
        problems += secret_problems(" ".join(repr(part) for part in built[1:]))
        problems += name_problems(built[1]) + name_problems(built[3])
    return problems


# ---------------------------------------------------------------- sink options
SINK_OPTION_NAMES = ("app.id", "kafka.bootstrap.servers", "topic", "redis.url",
                     "redis.require.persistence", "strong.productions", "record.id.column",
                     "dead.letter.topic", "marker.topic", "max.batch.duration.seconds",
                     "transaction.retries", "fail.points.directory", "output.name",
                     "lease.seconds", "timings.path", "kafka.transaction.timeout.ms",
                     "kafka.message.max.bytes", "kafka.enable.idempotence",
                     "kafka.transactional.id", "kafka.compression.type", "kafka.acks",
                     "kafka.key.serializer", "KAFKA.SASL.PASSWORD", "query.id", "output.name")


@st.composite
def sink_options(draw: st.DrawFn) -> dict[Any, Any]:
    """Options of the sink as Spark (strings) or a Python caller (anything) gives them."""
    names = st.one_of(st.sampled_from(SINK_OPTION_NAMES), odd_text())
    values = st.one_of(odd_text(), st.sampled_from(["fuzz-app", "127.0.0.1:9092", "out", "o\n",
                                                    "redis://127.0.0.1:1/0", "true", "0",
                                                    "60", "1e9", "-5", "none"]),
                       scalars(), st.none())
    options: dict[Any, Any] = {}
    if draw(st.integers(0, 3)):
        options.update({"app.id": "fuzz-app", "kafka.bootstrap.servers": "127.0.0.1:9092",
                        "topic": "out", "redis.url": "redis://127.0.0.1:1/0"})
    options.update(draw(st.dictionaries(names, values, max_size=5)))
    if draw(st.booleans()):
        options["redis.url"] = draw(redis_urls())
    for name in draw(st.lists(st.sampled_from(sorted(SECRET_OPTIONS)), max_size=2)):
        options[name] = SECRET_OPTIONS[name]
    return options


def sink_option_problems(options: dict[Any, Any]) -> list[str]:
    from sinks.config import SinkConfig

    config, problems = outcome(lambda: SinkConfig.from_options(options))
    return problems + (secret_problems(repr(config)) + name_problems(config)
                       if config is not None else [])


# ---------------------------------------------------------------- DedupConfig / RedisConfig
def config_values() -> st.SearchStrategy[Any]:
    """A keyword argument's value: valid ones and any other Python value."""
    return st.one_of(st.none(), scalars(), st.sampled_from([b"bytes", [], {}, (1,), object]),
                     st.integers(1, 64), st.floats(0.01, 100))


@st.composite
def redis_kwargs(draw: st.DrawFn) -> dict[str, Any]:
    names = ["socket_timeout", "connect_timeout", "require_persistence", "options",
             "wait_replicas", "replica_timeout", "failover_wait"]
    kwargs = draw(st.dictionaries(st.sampled_from(names), config_values(), max_size=3))
    kwargs["url"] = draw(st.one_of(redis_urls(), redis_urls(), config_values()))
    return kwargs


@st.composite
def dedup_kwargs(draw: st.DrawFn) -> dict[str, Any]:
    """``DedupConfig`` keyword arguments; nested configs built from generated values."""
    from dedup.config import BloomConfig, RedisConfig, RetentionConfig

    names = ["id_column", "num_shards", "allow_shared_app_id", "lease_seconds",
             "journal_versions", "invalid_ids"]
    kwargs = draw(st.dictionaries(st.sampled_from(names), st.one_of(
        config_values(), st.sampled_from(["fail", "dead_letter", "FAIL", "_record_id"])),
        max_size=3))
    kwargs["app_id"] = draw(st.one_of(st.just("fuzz-app"), st.just("fuzz-app\n"),
                                      config_values()))
    nested = {"bloom": (BloomConfig, ["enabled", "capacity", "error_rate"]),
              "retention": (RetentionConfig, ["horizon_seconds", "bucket_seconds",
                                              "event_time_column", "late_policy"]),
              "redis": (RedisConfig, [])}
    for field, (cls, keys) in nested.items():
        if draw(st.booleans()):
            args = (draw(redis_kwargs()) if field == "redis" else
                    draw(st.dictionaries(st.sampled_from(keys), config_values(), max_size=2)))
            kwargs[field] = (cls, args)
    return kwargs


def dedup_config_problems(kwargs: dict[str, Any]) -> list[str]:
    """Build the nested configs, then the DedupConfig: a config or one refusal line."""
    from dedup.config import DedupConfig

    def build() -> DedupConfig:
        built = {k: (v[0](**v[1]) if isinstance(v, tuple) and len(v) == 2
                     and isinstance(v[0], type) else v) for k, v in kwargs.items()}
        return DedupConfig(**built)

    config, problems = outcome(build)
    return problems + (secret_problems(repr(config)) + name_problems(config)
                       if config is not None else [])


def redis_config_problems(kwargs: dict[str, Any]) -> list[str]:
    from dedup.config import RedisConfig

    config, problems = outcome(lambda: RedisConfig(**kwargs))
    return problems + (secret_problems(repr(config)) if config is not None else [])
