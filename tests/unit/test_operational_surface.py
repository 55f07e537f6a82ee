"""Every name an operator can set has a row, with a verdict and its test (issue 33, item 2).

The surface is collected from the code, not from a list kept by hand: every field
of ``DedupConfig`` and its nested configs, every option the sink reads (in
``sinks/config.py`` and ``sinks/foreach_batch.py``), every key of the pipeline
file (``dedup.cli.config_file.SCHEMA``), and the settings outside the toolkit
that the guarantee depends on (:data:`OUTSIDE`). Each must be named in a row of
the table "Every name, its verdict" in ``docs/operational-changes.md``; a row's
verdict is one of :data:`VERDICTS`, and a classified row names tests that exist.
Rows not yet classified may only become fewer (:data:`NOT_YET_CLASSIFIED`).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

from dedup.cli.config_file import SCHEMA
from dedup.config import DedupConfig

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "operational-changes.md"
HEADING = "## Every name, its verdict"
OUTSIDE = frozenset({
    "spark.sql.shuffle.partitions", "streaming query id", "checkpoint location",
    "input topic partitions", "output topic partitions", "Redis address",
    "Redis topology", "Kafka cluster", "Spark version", "form",
})
VERDICTS = ("works exactly", "refused at start", "refused at the first batch",
            "refused at the first claim", "refused at the first write",
            "refused at the replay's first write", "needs a named command",
            "not yet classified")
NOT_YET_CLASSIFIED = 0
"""Rows whose change no test makes yet: this number may only go down."""


def _fields(cls: type, prefix: str = "") -> list[str]:
    hints = typing.get_type_hints(cls)
    out: list[str] = []
    for f in dataclasses.fields(cls):
        nested = [a for a in (typing.get_args(hints[f.name]) or (hints[f.name],))
                  if isinstance(a, type) and dataclasses.is_dataclass(a)]
        if nested:
            out += _fields(nested[0], f"{prefix}{f.name}.")
        else:
            out.append(f"{prefix}{f.name}")
    return out


def sink_options() -> set[str]:
    """The option names the sink reads, found in its source; ``kafka.*`` stands for
    the producer settings it passes through."""
    names: set[str] = {"kafka.*"}
    for path in ("sinks/config.py", "sinks/foreach_batch.py"):
        text = (ROOT / path).read_text()
        names |= set(re.findall(r'(?:opts|options)\.get\("([a-z.]+)"', text))
        names |= set(re.findall(r'_(?:bool|int|seconds)\(opts, "([a-z.]+)"', text))
    return names


def surface() -> set[str]:
    names = {f"DedupConfig.{n}" for n in _fields(DedupConfig)}
    names |= {f"option {n}" for n in sink_options()}
    names |= {f"[{table}] {key}" if table else f"pipeline {key}"
              for table, keys in SCHEMA.items() for key in keys}
    return names | OUTSIDE


def rows() -> list[tuple[set[str], str, list[str]]]:
    text = TABLE.read_text()
    assert HEADING in text, f"{TABLE.name} has no section {HEADING!r}"
    out = []
    for line in text.split(HEADING, 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        names = set(re.findall(r"`([^`]+)`", cells[0]))
        tests = re.findall(r"`(tests/[^`]+::[A-Za-z0-9_]+)`", cells[2])
        out.append((names, cells[1], tests))
    return out


def test_the_surface_is_found_in_the_code() -> None:
    names = surface()
    for known in ("DedupConfig.retention.horizon_seconds", "option lease.seconds",
                  "option query.id", "[sink] one_pass", "[run] shuffle_partitions"):
        assert known in names, known
    assert len(names) > 80


def test_every_name_has_a_row() -> None:
    named = set().union(*(names for names, _, _ in rows()))
    missing = sorted(surface() - named)
    assert not missing, (
        "names an operator can set with no row in docs/operational-changes.md ("
        f"{HEADING}): add one with its verdict and test: {missing}")
    unknown = sorted(named - surface())
    assert not unknown, f"rows name what the code no longer has: {unknown}"


def test_every_row_has_a_verdict_and_a_test() -> None:
    problems = []
    for names, verdict, tests in rows():
        label = ", ".join(sorted(names))
        if not any(v in verdict for v in VERDICTS):
            problems.append(f"{label}: verdict {verdict!r} is none of {VERDICTS}")
        if "not yet classified" in verdict:
            continue
        if not tests:
            problems.append(f"{label}: names no test")
        for ref in tests:
            path, _, name = ref.partition("::")
            file = ROOT / path
            if not file.is_file() or not re.search(rf"^def {name}\(", file.read_text(), re.M):
                problems.append(f"{label}: {ref} does not exist")
    assert not problems, "\n".join(problems)


def test_names_not_yet_classified_only_become_fewer() -> None:
    waiting = [", ".join(sorted(n)) for n, verdict, _ in rows()
               if "not yet classified" in verdict]
    assert len(waiting) <= NOT_YET_CLASSIFIED, (
        f"{len(waiting)} rows are not yet classified (at most {NOT_YET_CLASSIFIED}): "
        "change the name at the worst moment in a test and give the row its verdict\n"
        + "\n".join(waiting))
