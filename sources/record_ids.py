"""Deprecated: record IDs are attached by :func:`dedup.with_record_id`.

This module keeps :func:`attach_record_id` and :func:`normalize_strategy` for
one more release; both warn (:class:`DeprecationWarning`). The strategies are
the core's (``column``, ``hash``, ``kafka``, ``key``, ``header``); the old names
``coordinates`` and ``columns`` still work, with a warning of their own.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dedup.constants import DEFAULT_ID_COLUMN, RECORD_ID_HEADER
from sources._ids import ID_STRATEGIES, source_strategy
from sources.exceptions import SourceConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["ID_STRATEGIES", "attach_record_id", "normalize_strategy"]

_OLD_STRATEGIES = ("coordinates", "key", "header", "column", "columns", "none")
_OLD_ALIASES = {"kafka": "coordinates", "hash": "columns"}


def normalize_strategy(strategy: str) -> str:
    """Deprecated: the sources' old name of ``strategy`` (``kafka`` -> ``coordinates``).

    Use :func:`dedup.ids.strategy_name`, which returns today's names. Pure.

    Raises
    ------
    SourceConfigError
        Unknown strategy.
    """
    warnings.warn("sources.record_ids.normalize_strategy is deprecated; use "
                  "dedup.ids.strategy_name", DeprecationWarning, stacklevel=2)
    name = _OLD_ALIASES.get(strategy, strategy)
    if name not in _OLD_STRATEGIES:
        raise SourceConfigError(
            f"unknown id strategy {strategy!r}; use one of {', '.join(_OLD_STRATEGIES)}"
        )
    return name


def attach_record_id(
    df: DataFrame,
    strategy: str,
    *,
    column: str | None = None,
    columns: Sequence[str] | None = None,
    header: str = RECORD_ID_HEADER,
    output_column: str = DEFAULT_ID_COLUMN,
) -> DataFrame:
    """Deprecated: use :func:`dedup.with_record_id` (``none``: leave ``df`` as it is).

    ``df`` plus ``output_column`` (a pure projection, safe to repeat); the
    strategy ``none`` returns ``df`` unchanged.

    Raises
    ------
    SourceConfigError
        Unknown strategy, ``column`` without a column, or ``key`` / ``header``
        without Kafka's ``key`` / ``headers`` column.
    """
    from dedup.ids import with_record_id

    warnings.warn("sources.attach_record_id is deprecated; use dedup.with_record_id",
                  DeprecationWarning, stacklevel=2)
    name = source_strategy(strategy, column, stacklevel=2)
    if name is None:
        return df
    # The errors this function raised before it delegated to the core.
    needs = {"key": "key", "header": "headers"}.get(name)
    if needs is not None and needs not in df.columns:
        raise SourceConfigError(
            f"id strategy {name!r} needs column {needs!r} (a Kafka source DataFrame); "
            f"available columns: {df.columns}"
        )
    return with_record_id(df, name, columns=columns, column=column,
                          output_column=output_column, header=header)
