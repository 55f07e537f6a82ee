"""The sink's Redis clients are cached per process by the whole RedisConfig (issue 35):
two configs that differ only in a password or TLS option must not share one client, or
the second would talk to Redis with the first one's credentials and certificates."""

from __future__ import annotations

import pytest

from dedup.config import RedisConfig
from sinks.checkpoint import CheckpointStore

URL = "redis://127.0.0.1:1/0"  # never connected: clients open connections lazily


@pytest.mark.parametrize(("one", "other"), [
    (RedisConfig("redis://:first@127.0.0.1:1/0"), RedisConfig("redis://:second@127.0.0.1:1/0")),
    (RedisConfig(URL, options={"password": "first"}),
     RedisConfig(URL, options={"password": "second"})),
    (RedisConfig(URL, options={"username": "a", "password": "p"}),
     RedisConfig(URL, options={"username": "b", "password": "p"})),
    (RedisConfig("rediss://127.0.0.1:1/0", options={"ssl_ca_certs": "/first/ca.pem"}),
     RedisConfig("rediss://127.0.0.1:1/0", options={"ssl_ca_certs": "/second/ca.pem"})),
    (RedisConfig("rediss://127.0.0.1:1/0"),
     RedisConfig("rediss://127.0.0.1:1/0", options={"ssl_cert_reqs": "none"})),
], ids=["url-password", "option-password", "username", "tls-ca", "tls-verify"])
def test_configs_differing_in_password_or_tls_get_their_own_clients(
        one: RedisConfig, other: RedisConfig) -> None:
    first = CheckpointStore(one, "clients").client
    second = CheckpointStore(other, "clients").client
    assert first is not second
    wanted = dict(other.options)
    got = second.connection_pool.connection_kwargs
    assert all(got.get(k) == v for k, v in wanted.items()), got


def test_an_equal_config_shares_the_client() -> None:
    """The cache still caches: equal configs (also separate instances) get one client."""
    one = RedisConfig(URL, options={"password": "p", "ssl_ca_certs": "/ca.pem"})
    again = RedisConfig(URL, options={"ssl_ca_certs": "/ca.pem", "password": "p"})
    assert CheckpointStore(one, "a").client is CheckpointStore(again, "b").client
