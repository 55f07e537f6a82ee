"""README's Python examples stay valid: they parse, and the names they use exist."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_a_python_example() -> None:
    assert BLOCKS, "README.md lost its ```python example"


@pytest.mark.parametrize("source", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
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
