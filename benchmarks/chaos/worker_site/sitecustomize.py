"""Chaos runs only: put the mutants' wrappers into every Python process started here.

This folder is on ``PYTHONPATH`` only where the chaos runner or ``tests/chaos`` put
it (:func:`benchmarks.chaos.mutant_patches.enable_in_workers`): Python runs this
file at the start of each process that inherits it, among them Spark's Python
workers. It loads ``../mutant_patches.py`` by its path (the workers have no
``benchmarks`` package on their path) and calls its ``install()``, which only
wraps; a mutant acts only when its file is in the run's fail-point folder. A
``sitecustomize`` this one shadows still runs, after it.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _load(name: str, path: str) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _install() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    module = (sys.modules.get("benchmarks.chaos.mutant_patches")
              or sys.modules.get("_dedup_chaos_mutant_patches")
              or _load("_dedup_chaos_mutant_patches",
                       os.path.join(os.path.dirname(here), "mutant_patches.py")))
    module.install()  # type: ignore[attr-defined]


def _chain() -> None:
    """Run the ``sitecustomize`` that this file hides (the next one on ``sys.path``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        folder = os.path.abspath(entry or os.curdir)
        candidate = os.path.join(folder, "sitecustomize.py")
        if folder != here and os.path.isfile(candidate):
            _load("_dedup_chaos_next_sitecustomize", candidate)
            return


try:
    _install()
except Exception as exc:  # never break the process; the missing hits show it
    print(f"benchmarks/chaos/worker_site: mutants not installed: {exc!r}", file=sys.stderr)
_chain()
