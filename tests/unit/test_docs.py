"""The design document is the repository's own: cited by the code, pointing at real tests."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
SCANNED = ("dedup", "sinks", "sources", "tests", "benchmarks", "docs")
OUTSIDE = ("../shared", "DESIGN.md")


def _files() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    for folder in SCANNED:
        found += [p for p in (ROOT / folder).rglob("*")
                  if p.is_file() and p.suffix in {".py", ".md", ".toml", ".lua", ".sh"}]
    return [p for p in found if p.exists() and p != Path(__file__).resolve()]


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


# README is the front page; the rest lives in docs/ and CHANGELOG.md (issue 35).
README = ROOT / "README.md"
OWN_PAGES = [p for p in (README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md")))
             if p.exists()]
PAGES = OWN_PAGES + sorted((ROOT / "benchmarks" / "results").glob("*.md"))
# The two commands CI (.ci/run) and the hooks find in README, as fenced blocks.
COMMANDS = ("bash dedup/local/setup.sh && .venv/bin/dedup demo",
            "bash dedup/local/setup.sh && "
            '.venv/bin/python -m pytest -m "not slow and not chaos and not cluster and '
            'not connect" -n 2 --dist worksteal',
            '.venv/bin/python -m pytest -m "(slow or chaos or cluster) and not connect" '
            "-n 2 --dist loadfile && "
            ".venv/bin/python -m pytest -p no:cacheprovider tests/integration/connect -n 2 "
            "--dist worksteal")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FOLDERS = ("dedup", "sinks", "sources", "benchmarks", "tests", "docs", ".ci")


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a link inside one is code, not a link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", _prose(page.read_text()), re.M)}


def test_readme_is_a_front_page_with_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250, "README.md grew past 250 lines: move detail to docs/"
    for command in COMMANDS:
        assert f"```\n{command}\n```" in text, f"README.md lost the fenced command {command!r}"


def test_every_relative_link_resolves_inside_the_repository() -> None:
    broken = []
    for page in PAGES:
        for groups in LINK.findall(_prose(page.read_text())):
            target = groups[0] or groups[1]
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not resolved.is_relative_to(ROOT):
                broken.append(f"{where} (outside the repository)")
            elif not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{where} (no such heading)")
    assert not broken, broken


def test_pages_cite_tests_and_files_that_exist() -> None:
    sources = "".join(p.read_text() for p in (ROOT / "tests").rglob("*.py"))
    missing = []
    for page in OWN_PAGES:
        text = page.read_text()
        cited = set(re.findall(r"tests/[\w/]+\.py", text))
        cited |= {p for p in re.findall(r"`([\w.-]+/[\w./-]*)`", text)
                  if p.split("/")[0] in FOLDERS}
        missing += [f"{page.relative_to(ROOT)}: {c}" for c in sorted(cited)
                    if not (ROOT / c).exists()]
        missing += [f"{page.relative_to(ROOT)}: {n}"
                    for n in sorted(set(re.findall(r"`(test_\w+)`", text)))
                    if f"def {n}(" not in sources]
    assert not missing, missing
