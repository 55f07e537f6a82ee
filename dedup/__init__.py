"""Exactly-once deduplication for PySpark Structured Streaming."""

from dedup._version import __version__
from dedup.bloom import FilterCache, ShardFilter
from dedup.catalog import RedisCatalog
from dedup.claim import ShardClaimer, ShardOutcome
from dedup.config import (
    BloomConfig,
    DedupConfig,
    FailPointConfig,
    InvalidIdPolicy,
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
    RedisPermissionError,
    ReplicaAckError,
    ServiceError,
    SettingChangedError,
    ShardCountMismatchError,
    UnsafeSettingError,
)
from dedup.ids import with_record_id
from dedup.metrics import DedupMetrics
from dedup.operator import Deduplicator, deduplicate, metric_name

__all__ = [
    "AppIdInUseError",
    "BloomConfig",
    "CatalogStateError",
    "CatalogUnavailableError",
    "ConfigError",
    "DedupConfig",
    "DedupError",
    "DedupMetrics",
    "Deduplicator",
    "FailPointConfig",
    "FilterCache",
    "InvalidIdPolicy",
    "LatePolicy",
    "MissingToolError",
    "RecordIdError",
    "RedisCatalog",
    "RedisConfig",
    "RedisPermissionError",
    "ReplicaAckError",
    "RetentionConfig",
    "ServiceError",
    "SettingChangedError",
    "ShardClaimer",
    "ShardCountMismatchError",
    "ShardFilter",
    "ShardOutcome",
    "UnsafeSettingError",
    "__version__",
    "deduplicate",
    "metric_name",
    "with_record_id",
]
