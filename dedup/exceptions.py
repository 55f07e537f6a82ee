"""Errors of the core package.

Every error raised by this toolkit derives from :class:`DedupError`. Where a
builtin fits, errors inherit from it too, so ``except ValueError`` keeps
working for callers that do not know this package. Errors that come from an
outside service say whether a retry may help (:meth:`DedupError.retriable`) and
whether the client that raised them must be discarded (:meth:`DedupError.fatal`),
in the manner of confluent-kafka's ``KafkaError``.
"""

from __future__ import annotations


class DedupError(Exception):
    """Root of every error raised by this toolkit."""

    _retriable = False
    _fatal = False

    def retriable(self) -> bool:
        """Whether repeating the same operation may succeed (a batch retry)."""
        return self._retriable

    def fatal(self) -> bool:
        """Whether the client that raised this must be thrown away."""
        return self._fatal


class ConfigError(DedupError, ValueError):
    """A setting is missing, malformed or contradicts another one."""


class UnsafeSettingError(ConfigError):
    """A setting would break the exactly-once guarantee; refused unless overridden."""


class SettingChangedError(ConfigError):
    """A setting that decides where a record goes differs from the one recorded for
    this app id on first use (shards, partitions, placement, bucket width, ID strategy),
    or a streaming query deduplicated under one app id goes on under another."""


class ShardCountMismatchError(SettingChangedError):
    """The shard count differs from the one recorded for this app id."""


class AppIdInUseError(ConfigError):
    """Another live pipeline already uses this app id."""


class RecordIdError(DedupError, ValueError):
    """A record ID is null, empty or malformed, or the ID column is missing."""


class CatalogUnavailableError(DedupError, ConnectionError):
    """Redis could not be reached or did not answer in time; the batch must fail."""

    _retriable = True


class ReplicaAckError(CatalogUnavailableError):
    """Fewer Redis replicas than required acknowledged a claim in time: a failover
    could forget it, so the batch fails (retriable once the replicas catch up)."""


class CatalogStateError(DedupError, RuntimeError):
    """Redis answered with state the catalog cannot interpret (corruption or misuse)."""


class RedisPermissionError(CatalogStateError):
    """The Redis user may not run a command or touch a key the toolkit needs (its ACL):
    the message names the command or key, and what to grant. A retry cannot help."""


class ServiceError(DedupError, RuntimeError):
    """A local service (redis-server, Kafka broker) could not be started or stopped."""


class MissingToolError(ServiceError, FileNotFoundError):
    """A program or jar folder the local services need is not installed."""


class InjectedFault(DedupError, RuntimeError):  # noqa: N818 - the name of the event, not a bug
    """Raised by an armed fail-point with action ``raise`` (tests and chaos runs)."""

    _retriable = True
