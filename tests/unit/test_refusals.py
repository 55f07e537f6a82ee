"""Every refusal that tells an operator what to do is registered, and followed in a test.

The product's refusals are found in the source (no import, no processes): each
``raise`` of one of the toolkit's errors (and each error a function builds and
returns) whose message gives an instruction must match a row of
``docs/refusals.md`` by a phrase of its message; every row names the tests that
do literally what the message says and check the output exact afterwards, or says
why none can. Rows not yet followed in a test may only become fewer
(:data:`NOT_YET_FOLLOWED`). And advice that cannot end exactly must say what is
lost: a message that offers a new app id (an empty catalog) must say that
duplicates of the records emitted before then pass.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = ROOT / "docs" / "refusals.md"
PACKAGES = ("dedup", "sinks", "sources")
SKIPPED = ("dedup/local/",)  # process management of the local services, not the guarantee
# Errors about a value that is invalid on its own (a type, a range, a missing column):
# refused before anything runs, their fix is the value itself. Checked where defined.
VALUE_ERRORS = frozenset({
    "ConfigError", "SinkConfigError", "SourceConfigError", "SinkSchemaError",
    "RecordIdError", "UnsafeSinkSettingError", "ServiceError", "MissingToolError",
    "ValueError", "TypeError", "KeyError", "RuntimeError", "ConnectionError",
    "NotImplementedError", "FileNotFoundError", "OSError", "AssertionError",
})
INSTRUCTION = re.compile(
    r"\b(restart|restore|run `|run dedup|set (option|it|RedisConfig|Dedup|maxmemory|"
    r"RetentionConfig)|give (this|each)|point (the|redis)|use (num_shards|the recorded|"
    r"--num-shards|ExactlyOnceKafkaForeachBatch|a new)|start with|call |reattach|raise |"
    r"stop (that|the other)|rename|pass num_partitions|enable it|fix the input|"
    r"make the source|derive IDs|finish it|check the output|release\(\))", re.I)
NEW_APP_ID = re.compile(r"new app[._ ]?id", re.I)
LOSS_STATED = re.compile(r"duplicates of (the )?records (it )?emitted (before|so far)", re.I)
NOT_YET_FOLLOWED = 0
"""Rows whose advice no test follows yet: this number may only go down."""


@dataclass(frozen=True)
class Site:
    path: str
    line: int
    error: str
    text: str  # the message's literal parts, formatted values as {}

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.error}: {self.text[:160]}"


def _message(call: ast.Call) -> str:
    parts: list[str] = []
    for node in ast.walk(call):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts.append(node.value)
        elif isinstance(node, ast.FormattedValue):
            parts.append("{}")
    return "".join(parts)


def _error_name(node: ast.AST | None) -> str:
    if not isinstance(node, ast.Call):
        return ""
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    return name if name.endswith("Error") else ""


def refusal_sites() -> list[Site]:
    """Raised (or built and returned) errors of the product with an instruction."""
    sites = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(SKIPPED):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                call = node.exc if isinstance(node, ast.Raise) else (
                    node.value if isinstance(node, ast.Return) else None)
                error = _error_name(call)
                if not error or error in VALUE_ERRORS:
                    continue
                assert isinstance(call, ast.Call)
                text = _message(call)
                if INSTRUCTION.search(text):
                    sites.append(Site(rel, node.lineno, error, text))
    return sites


@dataclass(frozen=True)
class Row:
    error: str
    phrase: str
    tests: tuple[str, ...]
    not_yet: bool


def registry() -> list[Row]:
    rows = []
    for line in REGISTRY.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`") or cells[0] == "`error`":
            continue
        error = cells[0].strip("`")
        phrase = re.findall(r"`([^`]+)`", cells[1])
        assert phrase, f"docs/refusals.md row of {error}: no `phrase` in its second cell"
        tests = tuple(re.findall(r"`(tests/[^`]+::[A-Za-z0-9_]+)`", cells[3]))
        not_yet = cells[3].lower().startswith("not yet")
        rows.append(Row(error, phrase[0], tests, not_yet))
    return rows


def test_the_scan_finds_the_refusals_it_is_about() -> None:
    found = {(s.error, s.path) for s in refusal_sites()}
    for known in [("AppIdInUseError", "dedup/catalog.py"),
                  ("OutputChangedError", "sinks/checkpoint.py"),
                  ("QueryIdReusedError", "sinks/transactions.py"),
                  ("CheckpointSchemaError", "sinks/writer.py")]:
        assert known in found, f"the scan misses {known}: {sorted(found)}"


def test_every_refusal_with_advice_has_a_row() -> None:
    rows = registry()
    missing = [str(s) for s in refusal_sites()
               if not any(r.error == s.error and r.phrase in s.text for r in rows)]
    assert not missing, (
        "refusals that tell the operator what to do but have no row in docs/refusals.md "
        "(add one, with a test that does what the message says):\n" + "\n".join(missing))


def test_every_row_names_tests_that_exist_or_says_why_none() -> None:
    problems = []
    for row in registry():
        if row.not_yet:
            continue
        if not row.tests:
            problems.append(f"{row.error} `{row.phrase}`: names no test")
        for ref in row.tests:
            path, _, name = ref.partition("::")
            file = ROOT / path
            if not file.is_file() or not re.search(rf"^def {name}\(", file.read_text(), re.M):
                problems.append(f"{row.error} `{row.phrase}`: {ref} does not exist")
    assert not problems, "\n".join(problems)


def test_rows_whose_advice_no_test_follows_only_become_fewer() -> None:
    waiting = [f"{r.error} `{r.phrase}`" for r in registry() if r.not_yet]
    assert len(waiting) <= NOT_YET_FOLLOWED, (
        f"{len(waiting)} rows of docs/refusals.md are not followed in a test (at most "
        f"{NOT_YET_FOLLOWED}): write the test instead\n" + "\n".join(waiting))


def test_advice_to_take_a_new_app_id_says_what_is_lost() -> None:
    """A new app id starts from an empty catalog: every record emitted under the old one
    passes again if it is re-sent. Advice that cannot end exact must say so."""
    silent = [str(s) for s in refusal_sites()
              if NEW_APP_ID.search(s.text) and not LOSS_STATED.search(s.text)]
    assert not silent, ("messages that offer a new app id without saying that duplicates "
                        "of the records emitted before then pass:\n" + "\n".join(silent))
