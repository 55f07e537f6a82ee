"""Exactly-once deduplication for PySpark Structured Streaming."""

from dedup._version import __version__
from dedup.config import (
    BloomConfig,
    DedupConfig,
    FailPointConfig,
    LatePolicy,
    RedisConfig,
    RetentionConfig,
)
from dedup.exceptions import (
    AppIdInUseError,
    CatalogStateError,
    CatalogUnavailableError,
    ConfigError,
    DedupError,
    MissingToolError,
    RecordIdError,
    ServiceError,
    ShardCountMismatchError,
    UnsafeSettingError,
)

__all__ = [
    "AppIdInUseError",
    "BloomConfig",
    "CatalogStateError",
    "CatalogUnavailableError",
    "ConfigError",
    "DedupConfig",
    "DedupError",
    "FailPointConfig",
    "LatePolicy",
    "MissingToolError",
    "RecordIdError",
    "RedisConfig",
    "RetentionConfig",
    "ServiceError",
    "ShardCountMismatchError",
    "UnsafeSettingError",
    "__version__",
]
