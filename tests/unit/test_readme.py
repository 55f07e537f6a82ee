"""README's and the docs' Python examples stay valid: they parse, the names they use exist."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# The front page, every docs page and the changelog: an example moved out of
# README keeps being checked where it went.
PAGES = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [(page, block) for page in PAGES if page.exists()
          for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)]


def test_readme_has_a_python_example() -> None:
    assert any(page == README for page, _ in BLOCKS), "README.md lost its ```python example"


@pytest.mark.parametrize(
    "source", [block for _, block in BLOCKS],
    ids=[f"{page.relative_to(ROOT)}:block{i}" for i, (page, _) in enumerate(BLOCKS)])
def test_example_parses_and_its_names_exist(source: str) -> None:
    tree = ast.parse(source)  # a SyntaxError fails the test, with the block's line
    modules: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules[alias.asname or alias.name] = importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"
    # Attribute calls on an imported package (dedup.deduplicate, sinks.register)
    # must name something that package exports.
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules):
            module = modules[node.value.id]
            assert hasattr(module, node.attr), f"{node.value.id} has no {node.attr}"
