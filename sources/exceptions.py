"""Errors of the sources package."""

from __future__ import annotations

from dedup.exceptions import ConfigError, DedupError


class SourceError(DedupError):
    """A source could not be built or read."""


class SourceConfigError(SourceError, ConfigError):
    """A source option is missing, malformed or contradicts another one."""
