"""The import rules of the layout (docs/design.md, "Packages"): dependencies point one way.

* the core (``dedup`` without ``dedup.cli`` and ``dedup.local``) imports neither
  Kafka nor the adapters nor the command line nor the service manager;
* ``sinks`` and ``sources`` import only the core (and their own package);
* ``dedup.cli`` is the one place that composes them.

Every import statement counts, also those inside functions: a lazy import is
still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "core": ("confluent_kafka", "sinks", "sources", "dedup.cli", "dedup.local"),
    "sinks": ("sources", "dedup.cli", "dedup.local"),
    "sources": ("sinks", "dedup.cli", "dedup.local"),
}


def _layer(path: Path, root: Path) -> str | None:
    parts = path.relative_to(root).parts
    if parts[0] == "dedup":
        return None if parts[1] in ("cli", "local") else "core"
    return parts[0] if parts[0] in ("sinks", "sources") else None


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def _violations(root: Path = ROOT) -> list[str]:
    out = []
    for package in ("dedup", "sinks", "sources"):
        for path in sorted((root / package).rglob("*.py")):
            layer = _layer(path, root)
            if layer is None:
                continue
            for line, module in _imports(path):
                for banned in FORBIDDEN[layer]:
                    if module == banned or module.startswith(banned + "."):
                        out.append(f"{path.relative_to(root)}:{line}: {layer} imports {module}")
    return out


def test_dependencies_point_one_way() -> None:
    violations = _violations()
    assert not violations, "layering broken:\n" + "\n".join(violations)


@pytest.mark.parametrize("module", ["confluent_kafka", "sinks.config", "dedup.cli.run"])
def test_the_rule_sees_a_forbidden_import(tmp_path: Path, module: str) -> None:
    """The check itself can fail: a core module importing ``module`` is reported."""
    (tmp_path / "dedup" / "cli").mkdir(parents=True)
    (tmp_path / "dedup" / "probe.py").write_text(f"def f() -> None:\n    import {module}\n")
    (tmp_path / "dedup" / "cli" / "ok.py").write_text(f"import {module}\n")
    assert _violations(tmp_path) == [f"dedup/probe.py:2: core imports {module}"]


PRODUCT = ("dedup", "sinks")
"""The packages whose code makes the exactly-once guarantee."""


def _mutant_lines(root: Path = ROOT) -> list[str]:
    """Lines in the product's files that mention a mutant (any case), as ``grep -rni``.

    The deliberately broken variants that prove the chaos checks can fail, and
    their switches, live in benchmarks/chaos/mutant_patches.py and are patched in
    from there; the product keeps only its documented fail-points.
    """
    out = []
    for package in PRODUCT:
        for path in sorted((root / package).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text()
            except (UnicodeDecodeError, OSError):
                continue
            out += [f"{path.relative_to(root)}:{number}: {line.strip()}"
                    for number, line in enumerate(text.splitlines(), 1)
                    if "mutant" in line.lower()]
    return out


def test_no_mutant_in_the_product() -> None:
    found = _mutant_lines()
    assert not found, ("mutants belong in benchmarks/chaos/mutant_patches.py, not in the "
                       "product:\n" + "\n".join(found))


def test_the_rule_sees_a_mutant_in_the_product(tmp_path: Path) -> None:
    """The check itself can fail: a branch, a comment or a data file naming one."""
    (tmp_path / "dedup").mkdir()
    (tmp_path / "sinks" / "lua").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "dedup" / "ok.py").write_text("x = 1\n")
    (tmp_path / "dedup" / "step.py").write_text("x = 1\nif mutant_on('x'):\n    pass\n")
    (tmp_path / "sinks" / "lua" / "claim.lua").write_text("-- a Mutant was here\n")
    (tmp_path / "benchmarks" / "mutants.py").write_text("mutant = 1\n")  # allowed there
    assert _mutant_lines(tmp_path) == ["dedup/step.py:2: if mutant_on('x'):",
                                       "sinks/lua/claim.lua:1: -- a Mutant was here"]


CIRCLE_PACKAGES = ("dedup", "sinks", "sources", "benchmarks")
"""The packages whose modules must import one another in one direction (issue 35)."""


def _module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports (every import statement, also those
    inside functions and under ``TYPE_CHECKING``; relative ones resolved)."""
    paths = {}
    for package in CIRCLE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            paths[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        wanted: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wanted |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                wanted |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        found = set()
        for module in wanted:
            while module and module not in paths:
                module = module.rpartition(".")[0]
            if module and module != name:
                found.add(module)
        graph[name] = found
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_no_import_circle_between_modules() -> None:
    circles = _circles(_module_graph())
    assert not circles, "modules that import one another in a circle:\n" + "\n".join(
        " <-> ".join(group) for group in circles)


def test_the_rule_sees_an_import_circle(tmp_path: Path) -> None:
    """The check itself can fail: a lazy import back, and a relative one, are circles."""
    (tmp_path / "benchmarks" / "chaos").mkdir(parents=True)
    (tmp_path / "benchmarks" / "chaos" / "__init__.py").write_text("")
    (tmp_path / "benchmarks" / "chaos" / "runner.py").write_text(
        "from benchmarks.chaos import kinds\n")
    (tmp_path / "benchmarks" / "chaos" / "kinds.py").write_text(
        "def f() -> None:\n    from .runner import Run\n")
    (tmp_path / "benchmarks" / "chaos" / "model.py").write_text("import os\n")
    assert _circles(_module_graph(tmp_path)) == [
        ["benchmarks.chaos.kinds", "benchmarks.chaos.runner"]]


def test_the_python_workers_modules_leave_pandas_out() -> None:
    """What a Spark Python worker imports to run the toolkit's UDFs and sinks does not
    import pandas (about 0.5 s of CPU for every new worker; the Arrow path never uses it;
    only PySpark 4.0's pandas UDF imports it, where it is called)."""
    import subprocess
    import sys

    code = ("import sys, dedup, dedup.partition_step, sinks, sinks.datasource, "
            "sinks.kafka_io, sources; print(sorted(m for m in sys.modules "
            "if m == 'pandas' or m.startswith('pandas.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2]).stdout
    assert out.strip() == "[]", out[:300]
