"""Operator sequences, explored (issue 33, item 5).

A seeded generator draws sequences of 3-8 operator actions (:data:`ACTION_KINDS`);
each sequence runs on real Redis, Kafka and Spark at small scale (one app id, one
output topic, its own Redis primary with a replica, the chaos runner's shared
broker and SparkSession) and is judged by one oracle:

* the ``read_committed`` output equals the failure-free output of all input sent
  (lost, duplicated and phantom records counted apart), or
* the sequence ended in a refusal with a named error (one of ``docs/refusals.md``)
  whose advice was not followed, and what is visible is an exact prefix (no
  duplicate, no phantom, every record of a committed batch present).

Each action that starts the pipeline also has an expectation taken from the
verdicts of ``docs/operational-changes.md`` ("works exactly" / refused with a
named error): an outcome the table contradicts fails the sequence too.

The input is the synthetic source (pure rows, 20 % re-sent copies of records of
the three batches before); "run k batches" offers k more batches of it (its
``total_rows`` grows, the rows before are unchanged), so every restart after a
change sees more input including re-sent copies of earlier records, and a reset
checkpoint re-reads all of it.

Two documented losses are announced by the toolkit, not silent: a lost catalog
(a flushed Redis) followed by a new checkpoint, and a new app id, each let
duplicates of the records emitted before through (their advice says so). The
oracle then allows duplicates of exactly the IDs visible at that moment, no
others.

``spark_upgrade`` runs one batch in a child process under an older supported Spark
(:mod:`benchmarks.chaos.version_job`, in ``.venv-4.0.0`` or ``.venv-4.1.1``, set up on
first use), held mid-batch half the time; the runs after it are this process's (the
default, newest Spark): an upgrade. When a newer Spark ran the checkpoint already, the
older one is refused at start, and its advice (the newest Spark) is what the next
action runs anyway.
"""

from __future__ import annotations

import json
import random
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from benchmarks.chaos.faults import NON_EMPTY, WORKER_KILL_POINTS, wait_fired
from benchmarks.chaos.model import ChaosEnv, _commit, _first_line, _stop_quietly
from benchmarks.chaos.operational import _follow, _redis, committed_batches, markers
from dedup.failpoints import arm
from dedup.local.services import RedisServer

ROOT = Path(__file__).resolve().parents[2]
ROWS = 480
ROWS_PER_BATCH = 40
PARTITIONS = 4  # shuffle partitions = dedup shards = sink partitions, at the start
HOLD_S = 10.0
MAX_RESTARTS = 4
SHUFFLE = "spark.sql.shuffle.partitions"

ACTION_KINDS: dict[str, str] = {
    "run_batches": "run k more batches of input (k = 1..3)",
    "crash": "a crash: a Python worker SIGKILLed at a fail-point (the task retried), or the "
             "query stopped while one task is held at a fail-point (a driver gone mid-batch)",
    "change_name": "restart with one name of the operational surface changed (numeric names "
                   "up and down), one more batch of input",
    "reset_checkpoint": "restart under a fresh checkpoint location with the same app id",
    "follow_advice": "do literally what the last refusal's message said, then restart",
    "switch_form": "switch two-step <-> one pass, one more batch of input",
    "redis_failover": "the Redis primary killed, its in-sync replica promoted and given a "
                      "replica of its own, the pipeline pointed at it",
    "redis_flush": "FLUSHALL on the Redis (a lost catalog): a kept checkpoint must be refused",
    "broker_restart": "the Kafka broker stopped and started again between runs",
    "spark_upgrade": "one more batch run by an older supported Spark (4.0.0 or 4.1.1, in "
                     "its own virtualenv), held mid-batch half the time; the runs after it "
                     "are the default Spark's: an upgrade (a checkpoint a newer Spark ran "
                     "is refused to the older one at start)",
}
"""The action kinds."""
OLDER_SPARKS = ("4.0.0", "4.1.1")
"""The supported Spark versions older than set-up's default that ``spark_upgrade`` runs
(each in ``.venv-<version>``, set up by :func:`ensure_spark_versions`)."""
UPGRADE_FROM_INDEX = 66
"""Sequences before this index were drawn, and run, before ``spark_upgrade`` joined the
kinds: :func:`generate` draws them from the other kinds so that they stay what they
were (their results are kept); from this index on every kind is drawn."""
PROBE_FROM_INDEX = UPGRADE_FROM_INDEX
"""From this index on, ``follow_advice`` with no refusal standing starts the query first,
as an operator would after a flush, a reset or a change, and follows the advice of the
refusal that start meets (before, it was skipped: 7 hits in sequences 0-65, most after a
flush that no start had met yet). Sequences before it ran without the probe."""
TRANSIENT = frozenset({"ReplicaAckError", "TransactionFailedError", "SinkError"})
"""Registered errors that a query death also shows when a service was briefly away (a
replica's ack, a Kafka transaction, the sink's generic error): restarted, not refusals."""
QUERY_KINDS = frozenset(ACTION_KINDS) - {"redis_flush"}
"""Kinds that start the pipeline (and so have an expected outcome)."""


@dataclass(frozen=True)
class Change:
    """One name of the surface, how a pipeline sets it and its verdict in
    ``docs/operational-changes.md``.

    ``key`` is the explorer's own stable id (``(table, name)``: ``table`` a table of
    the pipeline file, ``"sink.options"`` for a sink option, ``"spark"`` for the
    session's conf, ``""`` for a top-level key); ``spelled`` are the names the file
    or option may have, each with the factor from the value's unit (seconds) to its
    own, the first the code knows being used (the vocabulary is being renamed to
    ``DedupConfig``'s names and seconds: the explorer runs on either spelling).
    """

    key: tuple[str, str]
    spelled: tuple[tuple[str, float], ...]
    values: tuple[Any, ...]  # the changed values: numeric ones up and down
    verdict: str  # "works exactly" or "refused" (at start or at the first claim)
    error: str = ""  # the refusal's named error

    @property
    def id(self) -> str:
        return ".".join(filter(None, self.key))

    def spelling(self) -> tuple[str, float]:
        """The name the running code knows, and its unit factor."""
        known = _known_names(self.key[0])
        for name, factor in self.spelled:
            if known is None or name in known:
                return name, factor
        raise ValueError(f"none of {[n for n, _ in self.spelled]} is a name the code "
                         f"knows in {self.key[0] or 'the top level'}: update CHANGES")

    @property
    def name(self) -> str:
        """The name as ``docs/operational-changes.md`` writes it."""
        table, name = self.key[0], self.spelling()[0]
        if table == "sink.options":
            return f"option {name}"
        if table == "spark":
            return name
        return f"[{table}] {name}" if table else f"pipeline {name}"


def _known_names(table: str) -> set[str] | None:
    """The names the code accepts in ``table`` (None: not checked, the session's conf)."""
    if table == "spark":
        return None
    if table == "sink.options":
        from tests.unit.test_operational_surface import sink_options

        return sink_options()
    from dedup.cli.config_file import SCHEMA

    return set(SCHEMA[table])


def _s(*names: str) -> tuple[tuple[str, float], ...]:
    """Spellings in seconds' units, or milliseconds for a name ending in ``.ms``."""
    return tuple((n, 1000.0 if n.endswith(".ms") else 1.0) for n in names)


CHANGES: tuple[Change, ...] = (
    Change(("dedup", "num_shards"), _s("num_shards"), (2, 8), "refused",
           "ShardCountMismatchError"),
    Change(("dedup", "bucket_seconds"),
           _s("retention.bucket_seconds", "retention_bucket_seconds"),
           (3600, 2 * 86400), "refused", "SettingChangedError"),
    Change(("ids", "column"), _s("column"), ("key",), "refused", "SettingChangedError"),
    Change(("", "app_id"), _s("app_id"), ("renamed",), "refused", "SettingChangedError"),
    Change(("dedup", "horizon_seconds"),
           _s("retention.horizon_seconds", "retention_horizon_seconds"),
           (2 * 86400, 14 * 86400), "works exactly"),
    Change(("dedup", "bloom_capacity"), _s("bloom.capacity", "bloom_capacity"),
           (500, 1_000_000), "works exactly"),
    Change(("dedup", "bloom_error_rate"), _s("bloom.error_rate", "bloom_error_rate"),
           (0.001, 0.3), "works exactly"),
    Change(("dedup", "bloom_enabled"), _s("bloom.enabled", "bloom_enabled"), (False,),
           "works exactly"),
    Change(("redis", "failover_wait"), _s("failover_wait", "failover_wait_seconds"),
           (1.0, 60.0), "works exactly"),
    Change(("spark", SHUFFLE), _s(SHUFFLE), (2, 6), "works exactly"),
    Change(("sink.options", "lease"), _s("lease.seconds", "lease.ms"), (5, 180),
           "works exactly"),
    Change(("sink.options", "max_batch_duration"),
           _s("max.batch.duration.seconds", "max.batch.duration.ms"), (20, 50),
           "works exactly"),
    Change(("sink.options", "transaction.retries"), _s("transaction.retries"), (1, 6),
           "works exactly"),
    Change(("sink.options", "strong.productions"), _s("strong.productions"), ("false",),
           "works exactly"),
)
REFUSED_KEYS = tuple(c.key for c in CHANGES if c.verdict == "refused" and c.key[0] != "")
BY_KEY = {c.key: c for c in CHANGES}


def start_settings() -> dict[tuple[str, str], Any]:
    """Every setting a sequence starts with (the sink options: unset)."""
    return {
        ("dedup", "num_shards"): PARTITIONS, ("dedup", "bucket_seconds"): 86400,
        ("dedup", "horizon_seconds"): 7 * 86400, ("dedup", "bloom_capacity"): 100000,
        ("dedup", "bloom_error_rate"): 0.01, ("dedup", "bloom_enabled"): True,
        ("ids", "column"): "event_id", ("redis", "failover_wait"): 10.0,
        ("spark", SHUFFLE): PARTITIONS, ("sink", "one_pass"): True,
    }


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


# -- the generator ---------------------------------------------------------------

@dataclass(frozen=True)
class Action:
    kind: str
    params: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        inner = ",".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.kind}({inner})"


@dataclass(frozen=True)
class SequenceSpec:
    index: int
    seed: int  # the input's seed and the sequence's own draws
    one_pass: bool  # the form it starts in
    actions: tuple[Action, ...]
    rows: int = ROWS  # all input of the sequence (the CI subset runs fewer)

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "seed": self.seed, "one_pass": self.one_pass,
                "rows": self.rows, "actions": [asdict(a) for a in self.actions]}


def _draw_action(rng: random.Random, kind: str) -> Action:
    if kind == "run_batches":
        return Action(kind, {"k": rng.randint(1, 3)})
    if kind == "crash":
        how = rng.choice(("worker_kill", "held_stop"))
        points = WORKER_KILL_POINTS if how == "worker_kill" else (
            "dedup.after_claim", "sink.after_checkpoint")
        return Action(kind, {"how": how, "point": rng.choice(points),
                             "partition": rng.randrange(PARTITIONS)})
    if kind == "change_name":
        change = rng.choice(CHANGES)
        return Action(kind, {"name": change.id, "value": rng.choice(change.values)})
    if kind == "spark_upgrade":
        return Action(kind, {"version": rng.choice(OLDER_SPARKS),
                             "held": rng.random() < 0.5,
                             "partition": rng.randrange(PARTITIONS)})
    return Action(kind)


def generate(count: int, seed: int) -> list[SequenceSpec]:
    """``count`` sequences of 3-8 actions; every kind drawn about equally often, and a
    refusal-prone action followed by ``follow_advice`` half the time (so advice is
    followed in earnest, not only when nothing was refused). Pure in ``seed``; the
    sequences before :data:`UPGRADE_FROM_INDEX` draw no ``spark_upgrade``."""
    rng = random.Random(seed)
    specs = []
    for index in range(count):
        kinds = [k for k in ACTION_KINDS
                 if k != "spark_upgrade" or index >= UPGRADE_FROM_INDEX]
        length = rng.randint(3, 8)
        actions: list[Action] = []
        while len(actions) < length:
            action = _draw_action(rng, rng.choice(kinds))
            actions.append(action)
            prone = (action.kind in {"redis_flush", "reset_checkpoint", "spark_upgrade"}
                     or (action.kind == "change_name" and _change(action).verdict == "refused")
                     or (action.kind == "crash" and action.params["how"] == "held_stop"))
            if prone and len(actions) < length and rng.random() < 0.5:
                actions.append(Action("follow_advice"))
        specs.append(SequenceSpec(index=index, seed=rng.randrange(1, 1_000_000),
                                  one_pass=rng.random() < 0.5, actions=tuple(actions)))
    return specs


def spark_python(version: str) -> Path:
    """The Python of Spark ``version``'s virtualenv (``.venv-<version>``)."""
    return ROOT / f".venv-{version}" / "bin" / "python"


def ensure_spark_versions(specs: list[SequenceSpec], say: Callable[[str], None] = print
                          ) -> None:
    """Set up the virtualenv of every older Spark that ``specs`` run and that is missing
    (``dedup/local/setup.sh`` with ``DEDUP_SPARK_VERSION``, as
    ``benchmarks.spark_versions`` does; a few minutes each). Safe to repeat."""
    import os
    import subprocess

    wanted = sorted({str(a.params["version"]) for s in specs for a in s.actions
                     if a.kind == "spark_upgrade"})
    for version in wanted:
        if spark_python(version).exists():
            continue
        say(f"setting up Spark {version} for the spark_upgrade actions (.venv-{version})")
        env = {**os.environ, "DEDUP_SPARK_VERSION": version, "DEDUP_VENV": f".venv-{version}",
               "DEDUP_SETUP_QUIET": "1"}
        done = subprocess.run(["bash", "dedup/local/setup.sh"], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"set-up of Spark {version} failed ({done.returncode}): "
                             f"{done.stderr.strip()[-500:]}")


def _change(action: Action) -> Change:
    return next(c for c in CHANGES if c.id == action.params["name"])


# -- the refusals' advice (docs/refusals.md) ----------------------------------------

REFUSALS_DOC = ROOT / "docs" / "refusals.md"
ADVICE: tuple[tuple[str, str, str], ...] = (
    # (error, phrase of its message, what the explorer does: literally the advice)
    ("SettingChangedError", "has no record of streaming query", "new_checkpoint"),
    ("SettingChangedError", "joins streaming query", "restore_app_id"),
    ("SettingChangedError", "has no record of it under app id", "new_checkpoint"),
    ("SettingChangedError", "or use a new app id", "restore_recorded"),
    ("ShardCountMismatchError", "re-shard IDs and let duplicates through", "restore_recorded"),
    ("ShardCountMismatchError", "use the recorded count", "restore_recorded"),
    ("AppIdInUseError", "unfinished", "finish_old_query"),
    ("AppIdInUseError", "stop the other query", "wait_for_lease"),
    ("CatalogStateError", "recorded under other settings that decide", "restore_recorded"),
    ("SettingChangedError", "does not promise that an older release resumes", "newer_spark"),
)
"""How the explorer follows each refusal it can meet: the advice its message gives
(``docs/refusals.md``). A lost catalog's advice is the second one the message gives (a
new checkpoint location, duplicates of the records emitted before then pass): the first,
the Redis the query used, is the flushed one. A rename of the app id with the
checkpoint kept is refused at start by the pipeline's check with the same message
("has no record of it under app id"): its literal advice is again the new checkpoint,
under the new app id (the library form's message, "joins streaming query", says
restore the app id instead)."""


def named_errors() -> frozenset[str]:
    """The errors ``docs/refusals.md`` registers (a refusal with advice)."""
    import re

    return frozenset(re.findall(r"^\| `([A-Za-z]+Error)` \|", REFUSALS_DOC.read_text(), re.M))


def _advice(error: str, message: str) -> str | None:
    for name, phrase, what in ADVICE:
        if name == error and phrase in message:
            return what
    return None


# -- one sequence ----------------------------------------------------------------

@dataclass
class Refusal:
    error: str
    message: str
    stage: str  # "start" or "batch"
    checkpoint: str


@dataclass
class SequenceResult:
    spec: dict[str, Any]
    verdict: str = ""  # "exact", "refused" (ended refused, exact prefix) or "failed"
    trace: list[dict[str, Any]] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    error: str = ""
    contradictions: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    commit: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Sequence:
    """The state of one sequence while it runs."""

    def __init__(self, env: ChaosEnv, spec: SequenceSpec) -> None:
        self.env, self.spec = env, spec
        self.base_app_id = f"seq-{spec.index}-{uuid.uuid4().hex[:6]}"
        self.app_id = self.base_app_id
        self.topic = f"{self.base_app_id}-out"
        self.dir = env.workdir / "sequences" / self.base_app_id
        self.fp_dir = self.dir / "failpoints"
        self.fp_dir.mkdir(parents=True, exist_ok=True)
        self.settings = start_settings()
        self.settings[("sink", "one_pass")] = spec.one_pass
        self.sink_options: dict[str, Any] = {}
        # the settings the catalog recorded (at the first run on an empty catalog)
        self.recorded: dict[tuple[str, str], Any] | None = None
        self.available = 0
        self.checkpoints = [str(self.dir / "checkpoint-0")]
        self.unfinished = False  # the current checkpoint's last stop left a batch unfinished
        self.pending: Refusal | None = None
        self.flushed_with_batches = False  # flushed while the checkpoint had batches
        self.announced: set[str] = set()  # IDs whose duplicates an announced loss let pass
        self.flushed_visible: set[str] = set()  # IDs visible at the last flush
        self.redis_n = 0
        self.primary = self._redis_server()
        self.replica = self._redis_server()
        _follow(_redis(self.replica.url), self.primary.port)
        self.trace: list[dict[str, Any]] = []
        self.hits: Counter[str] = Counter()
        self.contradictions: list[str] = []

    # -- services ---------------------------------------------------------------
    def _redis_server(self) -> RedisServer:
        self.redis_n += 1
        return RedisServer(self.dir / f"redis-{self.redis_n}", appendfsync="always").start()

    def stop(self) -> None:
        for server in (self.primary, self.replica):
            server.stop()

    @property
    def checkpoint(self) -> str:
        return self.checkpoints[-1]

    # -- the pipeline -------------------------------------------------------------
    def pipeline_text(self) -> str:
        def line(key: tuple[str, str]) -> str:
            name, factor = BY_KEY[key].spelling()
            value = self.settings[key]
            if factor != 1.0:
                value = int(value * factor)
            return f"{name} = {_toml(value)}\n"

        options = ""
        for key, value in self.sink_options.items():
            name, factor = BY_KEY[("sink.options", key)].spelling()
            scaled = int(value * factor) if isinstance(value, int | float) else value
            options += f'"{name}" = "{scaled}"\n'
        dedup = "".join(line(k) for k in self.settings if k[0] == "dedup")
        redis = "".join(line(k) for k in self.settings if k[0] == "redis")
        return f"""
app_id = "{self.app_id}"
[source]
type = "synthetic"
seed = {self.spec.seed}
rows_per_batch = {ROWS_PER_BATCH}
total_rows = {self.available}
duplicate_rate = 0.2
duplicate_distance = "later_batches"
duplicate_gap_batches = 3
num_partitions = 2
[ids]
strategy = "column"
{line(("ids", "column"))}[dedup]
{dedup}[redis]
{redis}[sink]
type = "kafka"
one_pass = {_toml(self.settings[("sink", "one_pass")])}
topic = "{self.topic}"
partitions = 2
key_column = "key"
value_column = "payload"
[sink.options]
{options}
[run]
stop_after_idle_seconds = 5.0
"""

    def _start(self) -> Any:
        from dedup.cli import Addresses, parse_pipeline, start_query

        self.env.spark.conf.set(SHUFFLE, str(self.settings[("spark", SHUFFLE)]))
        bootstrap = self.env.kafka.bootstrap_servers
        return start_query(self.env.spark, parse_pipeline(self.pipeline_text()),
                           Addresses(self.primary.url, bootstrap, bootstrap),
                           self.checkpoint, str(self.fp_dir))

    def offer(self, batches: int) -> None:
        self.available = min(self.spec.rows, self.available + batches * ROWS_PER_BATCH)

    def _refusal(self, text: str, stage: str) -> Refusal | None:
        error = text.split(":", 1)[0].strip()
        if error not in named_errors():
            return None
        return Refusal(error, text, stage, self.checkpoint)

    def run_query(self, hold: Callable[[Any], dict[str, Any]] | None = None) -> dict[str, Any]:
        """Start the pipeline and run it over the input offered so far.

        ``hold`` (given the started query) stops it mid-batch instead. Returns
        ``{"outcome": "works" | "refused" | "error", ...}``; a refusal is kept as
        :attr:`pending`. Transient query deaths are restarted (up to MAX_RESTARTS).
        """
        errors: list[str] = []
        if self.available == 0:
            # the synthetic source reads total_rows = 0 as endless: a first start (a reset
            # or a change as the first action) is offered one batch
            self.offer(1)
        for _ in range(MAX_RESTARTS + 1):
            try:
                query = self._start()
            except Exception as exc:  # refused at start, or a bad setting
                line = _first_line(exc)
                refusal = self._refusal(line, "start")
                if refusal is None:
                    return {"outcome": "error", "error": line, "errors": errors}
                self.pending = refusal
                return {"outcome": "refused", "error": refusal.error, "stage": "start",
                        "message": line[:300], "errors": errors}
            try:
                if hold is not None:
                    evidence = hold(query)
                    self.unfinished = bool(evidence.get("held"))
                    self._ran_once()
                    return {"outcome": "works", **evidence, "errors": errors}
                query.processAllAvailable()
                query.stop()
                self.unfinished = False
                self._ran_once()
                return {"outcome": "works", "errors": errors}
            except Exception as exc:  # a query death: a refusal, or something to restart
                line = _first_line(exc)
                _stop_quietly(query)
                refusal = self._refusal(line, "batch")
                if refusal is not None and refusal.error not in TRANSIENT:
                    self.pending = refusal
                    return {"outcome": "refused", "error": refusal.error, "stage": "batch",
                            "message": line[:300], "errors": errors}
                errors.append(line[:300])
                time.sleep(1.0)
        return {"outcome": "error", "error": errors[-1], "errors": errors}

    def _ran_once(self) -> None:
        if self.recorded is None:
            self.recorded = dict(self.settings)
        self.pending = None

    # -- expectations (docs/operational-changes.md) ---------------------------------
    def expectation(self, action: Action) -> set[str]:
        """The outcomes the table allows for ``action`` in the current state: "works" or
        "refused:<error>" ("refused:*": any named error)."""
        pending = self.standing()
        if pending is not None and action.kind not in {"follow_advice", "reset_checkpoint"}:
            return {"refused:*"}
        if action.kind == "reset_checkpoint":
            if pending is not None:
                return {"works", "refused:*"}
            return {"refused:AppIdInUseError"} if self.unfinished else {"works"}
        if action.kind == "follow_advice":
            # the advice ends the refusal; another one may stand behind it
            return {"works", "refused:*"} if self._differs_from_recorded() else {"works"}
        if action.kind == "spark_upgrade" and self._newer_spark_ran(action):
            # Spark promises only the upgrade: refused at start, before any other check
            # that could also refuse (they run in this order in start_query)
            return {"refused:SettingChangedError"}
        if self.flushed_with_batches:
            # a lost catalog under a checkpoint with committed batches: refused at start
            return {"refused:SettingChangedError"}
        if action.kind == "change_name":
            change = _change(action)
            if change.verdict == "refused" and self._would_differ(change,
                                                                   action.params["value"]):
                return {f"refused:{change.error}"}
        if self._differs_from_recorded():
            return {"refused:*"}
        return {"works"}

    def standing(self) -> Refusal | None:
        """The pending refusal that stands until its advice is followed: not an older
        Spark's refusal of a newer one's checkpoint, whose advice (the newest Spark) is
        what every action but ``spark_upgrade`` runs."""
        pending = self.pending
        if pending is not None and _advice(pending.error, pending.message) == "newer_spark":
            return None
        return pending

    def _newer_spark_ran(self, action: Action) -> bool:
        """Whether a Spark newer than ``action``'s ran the current checkpoint (its stamp,
        ``dedup.cli.pipeline.SPARK_STAMP``)."""
        from dedup.cli.pipeline import SPARK_STAMP, _version  # the stamp's own comparison

        stamp = Path(self.checkpoint) / SPARK_STAMP
        newest = stamp.read_text().strip() if stamp.exists() else ""
        return bool(newest) and _version(action.params["version"]) < _version(newest)

    def _would_differ(self, change: Change, value: Any) -> bool:
        """Whether setting ``change`` to ``value`` departs from what the catalog recorded
        (the app id: whether the kept checkpoint has batches under the old one)."""
        if change.key == ("", "app_id"):
            return committed_batches(self.checkpoint) > 0
        return self.recorded is not None and self.recorded[change.key] != value

    def _differs_from_recorded(self) -> bool:
        if self.app_id != self.base_app_id and committed_batches(self.checkpoint) > 0:
            return True
        if self.recorded is None:
            return False
        return any(self.settings[k] != self.recorded[k] for k in REFUSED_KEYS)

    def _judge(self, action: Action, expected: set[str], outcome: dict[str, Any]) -> None:
        got = outcome["outcome"]
        if got == "error":
            self.contradictions.append(f"{action.label()}: unexpected error "
                                       f"{outcome.get('error', '')[:200]}")
            return
        if got == "works":
            ok = "works" in expected
        else:
            ok = f"refused:{outcome['error']}" in expected or "refused:*" in expected
        if not ok:
            self.contradictions.append(
                f"{action.label()}: expected {sorted(expected)} (docs/operational-changes.md), "
                f"got {got}{' ' + outcome.get('message', '') if got == 'refused' else ''}")

    # -- the actions -------------------------------------------------------------
    def do(self, action: Action) -> dict[str, Any]:
        step: dict[str, Any] = {"action": action.label()}
        expected = self.expectation(action) if action.kind in QUERY_KINDS else set()
        handler = getattr(self, f"_do_{action.kind}")
        outcome = handler(action, step)
        if outcome is None:  # nothing to do in this state: not a hit
            step["skipped"] = True
            return step
        if outcome.pop("no_advice", False):  # started, nothing refused: judged, no hit
            step.update(outcome)
            step["visible"] = len(self.visible())
            return step
        expected = outcome.pop("expected_now", expected)
        step.update(outcome)
        self.hits[action.kind] += 1
        if expected and "outcome" in outcome:
            step["expected"] = sorted(expected)
            self._judge(action, expected, outcome)
        step["visible"] = len(self.visible())
        return step

    def _do_run_batches(self, action: Action, step: dict[str, Any]) -> dict[str, Any]:
        self.offer(int(action.params["k"]))
        return self.run_query()

    def _do_crash(self, action: Action, step: dict[str, Any]) -> dict[str, Any] | None:
        point, how = action.params["point"], action.params["how"]
        if self.standing() is not None:  # refused anyway: the crash cannot be placed
            return self.run_query()
        batch = committed_batches(self.checkpoint)
        self.offer(1)
        if batch * ROWS_PER_BATCH >= self.available:
            return None  # no batch left to crash in
        self._disarm()
        if how == "worker_kill":
            arm(self.fp_dir, point, "kill", match={"batch": batch, **NON_EMPTY})
            outcome = self.run_query()
            outcome["fired"] = bool(_fired(self.fp_dir, point))
        else:
            partition = int(action.params["partition"])
            match = {"batch": batch, **NON_EMPTY}
            if point == "sink.after_checkpoint":
                match["partition"] = partition
            arm(self.fp_dir, point, "sleep", match=match, seconds=HOLD_S)
            outcome = self.run_query(hold=lambda q: self._hold(q, point, batch))
            outcome["fired"] = bool(_fired(self.fp_dir, point))
        self._disarm()
        if not outcome["fired"] and outcome["outcome"] == "works":
            outcome["not_hit"] = f"{point} of batch {batch} never fired (no rows there)"
        return outcome

    def _hold(self, query: Any, point: str, batch: int) -> dict[str, Any]:
        """Stop ``query`` while a task of ``batch`` is held at ``point`` (others ran on)."""
        try:
            hit = wait_fired(self.fp_dir, point, timeout=120,
                             stop=lambda: (not query.isActive
                                           or committed_batches(self.checkpoint) > batch))
            if hit is None:
                query.processAllAvailable()  # the batch had no rows there: run it out
                return {"held": False}
            time.sleep(min(4.0, HOLD_S - 4))  # the other partitions commit meanwhile
            seen = markers(cast(Any, self), PARTITIONS) if point.startswith("sink.") else []
            return {"held": True, "fired_context": hit.get("context", {}),
                    "markers_at_stop": seen}
        finally:
            _stop_quietly(query)

    def _do_change_name(self, action: Action, step: dict[str, Any]) -> dict[str, Any] | None:
        change = _change(action)
        value = action.params["value"]
        if change.key == ("", "app_id"):
            if committed_batches(self.checkpoint) == 0 or self.app_id != self.base_app_id:
                return None  # a new app id under a new query: a new pipeline, not a change
            self.app_id = f"{self.base_app_id}-renamed"
        elif change.key[0] == "sink.options":
            self.sink_options[change.key[1]] = value
        else:
            self.settings[change.key] = value
        step["changed"] = f"{change.name} = {value}"
        self.offer(1)
        return self.run_query()

    def _do_reset_checkpoint(self, action: Action, step: dict[str, Any]) -> dict[str, Any]:
        self._new_query()
        return self.run_query()

    def _new_query(self) -> None:
        """A fresh checkpoint location (a new streaming query) with the app id as it is."""
        self.checkpoints.append(str(self.dir / f"checkpoint-{len(self.checkpoints)}"))
        self.unfinished = False  # a fresh checkpoint has no batch of its own
        self.flushed_with_batches = False
        self.announced |= self.flushed_visible  # a new query on a lost catalog: announced
        if self.app_id != self.base_app_id:
            # a new query under a new app id: a new, empty catalog (the advice says
            # duplicates of the records emitted before then pass)
            self.announced |= set(self.visible())
            self.base_app_id = self.app_id
            self.recorded = None

    def _do_switch_form(self, action: Action, step: dict[str, Any]) -> dict[str, Any]:
        key = ("sink", "one_pass")
        self.settings[key] = not self.settings[key]
        step["form"] = "one pass" if self.settings[key] else "two-step"
        self.offer(1)
        return self.run_query()

    def _do_follow_advice(self, action: Action, step: dict[str, Any]) -> dict[str, Any] | None:
        if self.pending is None:
            if self.spec.index < PROBE_FROM_INDEX:
                return None
            # No start has met a refusal since the last refusal-prone action: start, as
            # the operator would, judged as a plain run; its refusal's advice is followed.
            probe_action = Action("run_batches", {"probe_of": "follow_advice"})
            probe_expected = self.expectation(probe_action)
            probe = self.run_query()
            self._judge(probe_action, probe_expected, probe)
            step["probe"] = {"outcome": probe["outcome"], "error": probe.get("error", ""),
                             "expected": sorted(probe_expected)}
            if self.pending is None:
                return {**probe, "no_advice": True}
        refusal = self.pending
        assert refusal is not None
        expected_now = self.expectation(action)
        what = _advice(refusal.error, refusal.message)
        step["advice_of"] = refusal.message[:200]
        step["followed"] = what
        if what is None:
            self.contradictions.append(f"no literal advice known for {refusal.message[:200]}")
            return {"outcome": "error", "error": "advice unknown"}
        if self.flushed_with_batches and what in {"restore_recorded", "restore_app_id",
                                                  "wait_for_lease", "newer_spark"}:
            # The advice answers the older refusal; the checkpoint it keeps lost its
            # catalog since (a flush under committed batches): refused at start, as a
            # plain run would be (sequence 129 expected "works" here)
            expected_now = {"refused:SettingChangedError"}
        if what == "new_checkpoint":
            self._new_query()
        elif what == "restore_app_id":
            self.app_id = self.base_app_id
        elif what == "restore_recorded":
            recorded = self.recorded or start_settings()
            for key in REFUSED_KEYS:
                self.settings[key] = recorded[key]
        elif what == "wait_for_lease":
            # "stop the other query": it is stopped (the sequence runs one at a time),
            # so its lease lapses in the seconds the message gives
            import re

            found = re.search(r"lease lapses in (\d+) s", refusal.message)
            time.sleep(int(found.group(1)) + 1 if found else 60)
        elif what == "finish_old_query":
            # the query that left its batch unfinished: its checkpoint, run to the end
            self.checkpoints.append(self.checkpoints[-2])
        elif what == "newer_spark":
            pass  # "Run this checkpoint with Spark <newest> or later": the default Spark
                  # (this process's, the newest supported) runs every other action
        self.pending = None
        return {**self.run_query(), "expected_now": expected_now}

    def _do_redis_failover(self, action: Action, step: dict[str, Any]) -> dict[str, Any]:
        old = self.primary
        rep = _redis(self.replica.url)
        deadline = time.monotonic() + 30
        while (_redis(old.url).info("replication").get("master_repl_offset")
               != rep.info("replication").get("slave_repl_offset")):
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not catch up before the failover")
            time.sleep(0.2)
        rep.execute_command("REPLICAOF", "NO", "ONE")
        old.kill()
        self.primary, self.replica = self.replica, self._redis_server()
        _follow(_redis(self.replica.url), self.primary.port)
        old.stop()
        step["promoted"] = self.primary.url
        return self.run_query()

    def _do_redis_flush(self, action: Action, step: dict[str, Any]) -> dict[str, Any]:
        client = _redis(self.primary.url)
        client.flushall()
        step["checkpoint_batches"] = committed_batches(self.checkpoint)
        self.flushed_with_batches = step["checkpoint_batches"] > 0
        # a new query after this (a reset, or the refusal's advice) may let duplicates
        # of these through, as the advice says; the kept checkpoint may not
        self.flushed_visible = set(self.visible())
        self.recorded = None
        # what is in the flushed Redis a moment later (written after the flush by
        # whom?): evidence for a lost catalog that is not refused
        time.sleep(2.0)
        keys = sorted(client.keys("*"))
        step["keys_after_flush"] = {"count": len(keys), "sample": keys[:12]}
        return {"flushed": True}

    def _do_broker_restart(self, action: Action, step: dict[str, Any]) -> dict[str, Any]:
        broker = self.env.kafka
        before = broker.pid
        broker.stop()
        broker.start()
        step["broker_pids"] = [before, broker.pid]
        self.offer(1)
        return self.run_query()

    def _do_spark_upgrade(self, action: Action, step: dict[str, Any]) -> dict[str, Any]:
        """One more batch under an older Spark (a child process in its virtualenv), held
        at the sink's checkpoint of one partition with ``held``; the next runs are the
        default Spark's. A transient death is run again, as :meth:`run_query` does."""
        import os
        import subprocess

        version = str(action.params["version"])
        python = spark_python(version)
        batch = committed_batches(self.checkpoint)
        self.offer(1)
        self._disarm()
        hold = None
        if action.params["held"] and batch * ROWS_PER_BATCH < self.available:
            hold = {"point": "sink.after_checkpoint", "batch": batch}
            arm(self.fp_dir, "sink.after_checkpoint", "sleep", seconds=HOLD_S,
                match={"batch": batch, "partition": int(action.params["partition"]),
                       **NON_EMPTY})
        spec = {"pipeline": self.pipeline_text(), "redis_url": self.primary.url,
                "bootstrap": self.env.kafka.bootstrap_servers, "checkpoint": self.checkpoint,
                "fp_dir": str(self.fp_dir), "shuffle": self.settings[("spark", SHUFFLE)],
                "hold": hold}
        # the child's own interpreter and Spark, not this process's
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME",
                            "VIRTUAL_ENV")}
        errors: list[str] = []
        try:
            for _ in range(MAX_RESTARTS + 1):
                done = subprocess.run(
                    [str(python), "-m", "benchmarks.chaos.version_job", json.dumps(spec)],
                    cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                    check=False)
                lines = done.stdout.strip().splitlines()
                if done.returncode != 0 or not lines:
                    return {"outcome": "error", "spark": version, "errors": errors,
                            "error": f"the Spark {version} run exited {done.returncode}: "
                                     f"{done.stderr.strip()[-300:]}"}
                child = json.loads(lines[-1])
                step["spark"] = child["pyspark"]
                line = str(child["error"])
                if child["outcome"] == "works":
                    self.unfinished = bool(child["held"])
                    self._ran_once()
                    return {"outcome": "works", "held": bool(child["held"]),
                            "fired": bool(_fired(self.fp_dir, "sink.after_checkpoint")),
                            "errors": errors}
                stage = "start" if child["outcome"] == "refused" else "batch"
                refusal = self._refusal(line, stage)
                if refusal is not None and refusal.error not in TRANSIENT:
                    self.pending = refusal
                    return {"outcome": "refused", "error": refusal.error, "stage": stage,
                            "message": line[:300], "errors": errors}
                if child["outcome"] == "refused":  # not a named refusal: a bad setting
                    return {"outcome": "error", "error": line, "errors": errors}
                errors.append(line[:300])
                time.sleep(1.0)
            return {"outcome": "error", "error": errors[-1], "errors": errors}
        finally:
            self._disarm()

    # -- the oracle --------------------------------------------------------------
    def _disarm(self) -> None:
        clear_fail_points(self.fp_dir)

    def visible(self) -> list[str]:
        from sinks.verify import read_observed

        return [rid or "" for rid, _ in read_observed(self.env.kafka.bootstrap_servers,
                                                     self.topic)]

    def judge(self) -> dict[str, Any]:
        """The oracle: exact output of all input, or a refusal and an exact prefix."""
        from sinks.verify import read_observed
        from sources.synthetic_rows import SyntheticOptions, expected_output

        options = SyntheticOptions(seed=self.spec.seed, rows_per_batch=ROWS_PER_BATCH,
                                   total_rows=self.spec.rows, duplicate_rate=0.2,
                                   duplicate_distance="later_batches",
                                   duplicate_gap_batches=3, num_partitions=2)
        expected = expected_output(options, self.available) if self.available else {}
        refused = self.pending is not None
        if refused:  # what is visible must be an exact prefix
            done = max(committed_batches(c) for c in set(self.checkpoints))
            rows = min(self.available, done * ROWS_PER_BATCH)
            must = expected_output(options, rows) if rows else {}
        else:
            must = expected
        observed = read_observed(self.env.kafka.bootstrap_servers, self.topic)
        counts = Counter(rid for rid, _ in observed)
        duplicated = {rid: n - 1 for rid, n in counts.items() if n > 1}
        unannounced = sum(n for rid, n in duplicated.items() if rid not in self.announced)
        first: dict[str | None, bytes | None] = {}
        for rid, value in observed:
            first.setdefault(rid, value)
        report = {
            "ended": "refused" if refused else "ran to the end",
            "rows_sent": self.available, "expected": len(expected), "must": len(must),
            "observed": len(observed),
            "lost": sum(1 for rid in must if rid not in counts),
            "duplicated": sum(duplicated.values()),
            "duplicated_unannounced": unannounced,
            "announced_ids": len(self.announced),
            "phantoms": sum(n for rid, n in counts.items() if rid not in expected),
            # the first copy of an ID carries another payload than its first input copy
            "mismatched": sum(1 for rid, value in first.items()
                              if rid in expected and value != expected[rid].encode()),
        }
        report["ok"] = (report["lost"] == report["phantoms"] == report["mismatched"]
                        == unannounced == 0)
        return report


def clear_fail_points(fp_dir: Path) -> None:
    """Disarm every fail-point in ``fp_dir`` and drop the records of those that fired:
    the next action's hold waits for its own firing, not an earlier one's. Safe to
    repeat."""
    for path in [*fp_dir.glob("*.armed"), *fp_dir.glob("*.fired-*")]:
        path.unlink(missing_ok=True)


def _fired(fp_dir: Path, point: str) -> list[dict[str, Any]]:
    from dedup.failpoints import fired

    return fired(fp_dir, point)


def run_sequence(env: ChaosEnv, spec: SequenceSpec) -> SequenceResult:
    """Run one sequence, drain its input unless it ended refused, judge it. Never raises."""
    from sinks.kafka_io import ensure_topic

    started = time.monotonic()
    result = SequenceResult(spec=spec.as_dict())
    seq: Sequence | None = None
    shuffle = env.spark.conf.get(SHUFFLE)
    try:
        seq = Sequence(env, spec)
        ensure_topic(env.kafka.bootstrap_servers, seq.topic, partitions=2)
        for action in spec.actions:
            step = seq.do(action)
            seq.trace.append(step)
            if step.get("outcome") == "refused":
                # the oracle after each refusal: what is visible is an exact prefix
                step["prefix"] = {k: v for k, v in seq.judge().items()
                                  if k in ("ok", "lost", "duplicated", "phantoms",
                                           "mismatched", "duplicated_unannounced")}
                if not step["prefix"]["ok"]:
                    seq.contradictions.append(f"{action.label()}: refused, but the visible "
                                              f"output is no exact prefix: {step['prefix']}")
        if seq.standing() is None:  # the rest of the input, as the operator left it
            seq.offer(spec.rows)
            drain = Action("run_batches", {"k": "rest"})
            expected = seq.expectation(drain)
            outcome = seq.run_query()
            seq.trace.append({"action": "drain", "expected": sorted(expected), **outcome})
            seq._judge(drain, expected, outcome)
        result.report = seq.judge()
    except Exception as exc:  # the harness itself failed: the sequence fails, kept
        result.error = f"{type(exc).__name__}: {_first_line(exc)}"
    finally:
        if seq is not None:
            result.trace = seq.trace
            result.hits = dict(seq.hits)
            result.contradictions = seq.contradictions
            seq._disarm()
            seq.stop()
        env.spark.conf.set(SHUFFLE, shuffle)
        if not env.kafka.pid:  # a broker restart interrupted: bring it back for the next
            env.kafka.start()
    result.duration_s = round(time.monotonic() - started, 1)
    ok = not result.error and not result.contradictions and result.report.get("ok", False)
    result.verdict = ("failed" if not ok else
                      "refused" if result.report.get("ended") == "refused" else "exact")
    return result


# -- the explorer: many sequences, resumable ---------------------------------------

PROGRESS_NAME = "chaos_sequences"


def finished(progress: Path, specs: list[SequenceSpec]) -> list[dict[str, Any]]:
    """The finished sequences recorded in ``progress`` (same seed: same specs)."""
    if not progress.exists():
        return []
    by_index = {s.index: s.as_dict() for s in specs}
    out = []
    for line in progress.read_text().splitlines():
        if not line.strip():
            continue
        data = json.loads(line)
        if by_index.get(data["spec"]["index"]) != data["spec"]:
            raise SystemExit(f"{progress} holds a sequence of another seed (sequence "
                             f"{data['spec']['index']}); rerun without --resume to start over")
        out.append(data)
    return out


def explore(specs: list[SequenceSpec], done: list[dict[str, Any]], progress: Path,
            max_minutes: float, failed_dir: Path) -> list[dict[str, Any]]:
    """Run every spec not in ``done``, one JSON line each in ``progress`` as it ends;
    a failed sequence's seed and trace also in ``failed_dir/chaos_sequences_failed_<i>.json``.
    Stops starting sequences after ``max_minutes`` (0: no limit)."""
    import tempfile

    have = {d["spec"]["index"] for d in done}
    ensure_spark_versions([s for s in specs if s.index not in have])
    commit = _commit()
    workdir = Path(tempfile.mkdtemp(prefix="dedup-seq-"))
    env = ChaosEnv(workdir).start()
    started = time.monotonic()
    try:
        for spec in specs:
            if spec.index in have:
                continue
            if max_minutes and time.monotonic() - started > max_minutes * 60:
                print(f"time limit reached after {len(done)} sequences", flush=True)
                break
            result = run_sequence(env, spec)
            result.commit = commit
            data = result.as_dict()
            done.append(data)
            with progress.open("a") as handle:
                handle.write(json.dumps(data, default=str) + "\n")
            if result.verdict == "failed":
                path = failed_dir / f"chaos_sequences_failed_{spec.index}.json"
                path.write_text(json.dumps(data, indent=2, default=str) + "\n")
            report = result.report
            print(f"sequence {spec.index + 1}/{len(specs)} {result.verdict:<7} "
                  f"{result.duration_s:.0f}s lost={report.get('lost', '?')} "
                  f"dup={report.get('duplicated', '?')} "
                  f"phantom={report.get('phantoms', '?')} "
                  f"{' '.join(a.label() for a in spec.actions)} "
                  f"{(result.error or '; '.join(result.contradictions))[:200]}", flush=True)
    finally:
        env.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return done


def surface_figures() -> dict[str, int]:
    """The operational surface as tests/unit/test_operational_surface.py collects it: its
    names, and the rows of docs/operational-changes.md no test classifies yet."""
    from tests.unit.test_operational_surface import rows, surface

    return {"operational_surface_names": len(surface()),
            "operational_surface_untested": sum(1 for _, verdict, _ in rows()
                                                if "not yet classified" in verdict)}


def figures(done: list[dict[str, Any]], seed: int, scheduled: int,
            metadata: dict[str, Any]) -> dict[str, Any]:
    """The explorer's figures (``chaos_sequences.json``)."""
    hits: Counter[str] = Counter()
    for data in done:
        hits.update(data.get("hits", {}))
    durations = [float(d.get("duration_s", 0.0)) for d in done]
    failed = [d for d in done if d.get("verdict") == "failed"]
    return {
        **metadata, "seed": seed, "sequences_scheduled": scheduled,
        "sequences": len(done),
        "exact": sum(1 for d in done if d.get("verdict") == "exact"),
        "refused": sum(1 for d in done if d.get("verdict") == "refused"),
        "failed": len(failed),
        "failed_indexes": [d["spec"]["index"] for d in failed],
        "actions_hit": {kind: hits.get(kind, 0) for kind in ACTION_KINDS},
        "action_kinds_left_out": {"spark_upgrade": "no second Spark version's virtualenv "
                                                   "(.venv-4.0.0, ...) to run it in"},
        "lost": sum(d.get("report", {}).get("lost", 0) for d in done),
        "duplicated": sum(d.get("report", {}).get("duplicated_unannounced", 0) for d in done),
        "duplicated_announced": sum(d.get("report", {}).get("duplicated", 0)
                                    - d.get("report", {}).get("duplicated_unannounced", 0)
                                    for d in done),
        "phantoms": sum(d.get("report", {}).get("phantoms", 0)
                        + d.get("report", {}).get("mismatched", 0) for d in done),
        "contradictions": sum(len(d.get("contradictions", [])) for d in done),
        "sequence_s_mean": round(sum(durations) / len(durations), 1) if durations else None,
        "commits": dict(Counter(d.get("commit") or "unrecorded" for d in done)),
        **surface_figures(),
    }


def summary_figures(data: dict[str, Any]) -> dict[str, Any]:
    """The keys merged into summary.json."""
    return {
        "chaos_sequences": data["sequences"],
        "chaos_sequence_failures": data["failed"],
        "chaos_sequence_actions_hit": data["actions_hit"],
        "operational_surface_names": data["operational_surface_names"],
        "operational_surface_untested": data["operational_surface_untested"],
    }


def markdown(data: dict[str, Any]) -> str:
    """The figures as markdown (chaos_sequences.md)."""
    lines = [
        f"Operator-sequence explorer of {data['date']} on {data['machine']}: "
        f"{data['sequences']} of {data['sequences_scheduled']} sequences (seed {data['seed']}), "
        f"{data['exact']} exact, {data['refused']} ended refused with an exact prefix, "
        f"**{data['failed']} failed**; {data['lost']} lost, {data['duplicated']} duplicated "
        f"(plus {data['duplicated_announced']} announced by a lost catalog's or new app id's "
        f"advice), {data['phantoms']} phantoms; {data['contradictions']} outcomes the "
        f"operational-changes table contradicts. Mean {data['sequence_s_mean']} s per "
        f"sequence. Spark {data.get('pyspark', '?')}.",
        "",
        "| action kind | hit |",
        "|---|---:|",
    ]
    lines += [f"| {kind} | {n} |" for kind, n in data["actions_hit"].items()]
    lines += ["", "Left out: " + "; ".join(f"{k} ({v})" for k, v
                                          in data["action_kinds_left_out"].items()) + ".",
              "", f"Operational surface: {data['operational_surface_names']} names, "
              f"{data['operational_surface_untested']} rows not yet classified."]
    return "\n".join(lines) + "\n"


def main(runs: int, seed: int, resume: bool, max_minutes: float, summary: bool,
         report_only: bool = False) -> int:
    """``python -m benchmarks.chaos --sequences``: run, write the figures, merge them."""
    from benchmarks.common import RESULTS_DIR, merge_summary, run_metadata

    specs = generate(runs, seed)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    progress = RESULTS_DIR / f"{PROGRESS_NAME}.progress.jsonl"
    done = finished(progress, specs) if resume or report_only else []
    if done:
        print(f"{len(done)} sequences already done in {progress}", flush=True)
    elif not report_only:
        progress.write_text("")
    if not report_only:
        explore(specs, done, progress, max_minutes, RESULTS_DIR)
    done.sort(key=lambda d: d["spec"]["index"])
    data = figures(done, seed, len(specs), run_metadata())
    (RESULTS_DIR / f"{PROGRESS_NAME}.json").write_text(
        json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    (RESULTS_DIR / f"{PROGRESS_NAME}.md").write_text(markdown(data))
    if summary:
        merge_summary(summary_figures(data))
    print(json.dumps({k: data[k] for k in ("sequences", "failed", "actions_hit",
                                           "sequence_s_mean")}))
    return 0 if data["failed"] == 0 else 1
