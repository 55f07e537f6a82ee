"""The design document is the repository's own: cited by the code, pointing at real tests."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
SCANNED = ("dedup", "sinks", "sources", "tests", "benchmarks", "docs")
OUTSIDE = ("../shared", "DESIGN.md")


def _files() -> list[Path]:
    found = [ROOT / "README.md"]
    for folder in SCANNED:
        found += [p for p in (ROOT / folder).rglob("*")
                  if p.is_file() and p.suffix in {".py", ".md", ".toml", ".lua", ".sh"}]
    return [p for p in found if p != Path(__file__).resolve()]


def test_nothing_points_outside_the_repository() -> None:
    offending = [f"{p.relative_to(ROOT)}: {word}" for p in _files()
                 for word in OUTSIDE if word in p.read_text(errors="replace")]
    assert not offending, offending


def test_invariants_are_cited_by_the_design_document() -> None:
    loose = []
    for path in _files():
        if path.suffix != ".py":
            continue
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if re.search(r"\binvariant \d", line) and not any(
                    "design.md" in near for near in lines[max(0, number - 2):number + 1]):
                loose.append(f"{path.relative_to(ROOT)}:{number + 1}")
    assert not loose, f"'invariant N' without docs/design.md nearby: {loose}"


def test_design_document_cites_tests_that_exist() -> None:
    text = DESIGN.read_text()
    cited = set(re.findall(r"tests/[\w/]+\.py", text))
    assert len(cited) >= 15, cited
    missing = sorted(c for c in cited if not (ROOT / c).exists())
    assert not missing, missing
    names = set(re.findall(r"`(test_\w+)`", text))
    sources = "".join(p.read_text() for p in (ROOT / "tests").rglob("*.py"))
    unknown = sorted(n for n in names if f"def {n}(" not in sources)
    assert not unknown, unknown


def test_design_document_numbers_every_invariant_once() -> None:
    numbers = [int(n) for n in re.findall(r"^### (\d+)\. ", DESIGN.read_text(), re.M)]
    assert numbers == list(range(1, 14)), numbers
