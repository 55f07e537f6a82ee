"""The record-ID step of the source helpers: one of the core's strategies, or none.

The strategies and their names are the core's (:func:`dedup.ids.with_record_id`);
``none`` (or ``None``: no ID column) is a choice of the source helpers only.
"""

from __future__ import annotations

from dedup.exceptions import ConfigError
from dedup.ids import STRATEGIES, strategy_name
from sources.exceptions import SourceConfigError

ID_STRATEGIES: tuple[str, ...] = (*STRATEGIES, "none")
"""What the source helpers accept as ``id_strategy``."""
KAFKA_ONLY = ("kafka", "key", "header")
"""Strategies that read columns only a Kafka source has."""


def source_strategy(id_strategy: str | None, column: str | None) -> str | None:
    """``id_strategy``, or ``None`` for no ID (``"none"`` or ``None``).

    Checked before Spark is touched. Pure.

    Raises
    ------
    SourceConfigError
        Unknown strategy (the message lists the names), or ``column`` without
        the name of the ID ``column``.
    """
    if id_strategy is None or id_strategy == "none":
        return None
    try:
        name = strategy_name(id_strategy)
    except ConfigError as exc:
        raise SourceConfigError(f"unknown record id strategy {id_strategy!r}; use one of "
                                f"{', '.join(ID_STRATEGIES)}") from exc
    if name == "column" and not column:
        raise SourceConfigError("id strategy 'column' needs the name of the ID column")
    return name
