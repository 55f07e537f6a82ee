"""Errors of the command line itself (the core's, the sink's and the sources' errors
live in their packages' ``exceptions`` modules, under :class:`~dedup.exceptions.DedupError`)."""

from __future__ import annotations

from dedup.exceptions import DedupError

__all__ = ["DemoFailedError"]


class DemoFailedError(DedupError, RuntimeError):
    """The demo did not reach an exact output (or its crash did not happen)."""
