"""The Redis ACL of one app id (docs/operations.md, "Redis ACL"): the documented line is
the one the code derives, it covers every command a script runs, its key patterns
cover the app id's keys and no other app id's, and a permission refusal names what to
grant in one line."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
import redis

from dedup import keys
from dedup.config import RedisConfig
from dedup.exceptions import RedisPermissionError
from dedup.redis_client import redis_errors
from sinks.config import sink_identity

ROOT = Path(__file__).resolve().parents[3]
URL = "redis://dedup-orders:pw@127.0.0.1:6379/0"


def _every_key(app_id: str) -> list[str]:
    """One of each key the catalog and the sink write for ``app_id``."""
    out = [keys.state_key(app_id, 3), keys.decisions_key(app_id, 3),
           keys.journal_key(app_id, 3), keys.index_key(app_id, 3, 7),
           keys.index_key(app_id, 3, 7) + ":2", keys.ack_key(app_id, 3),
           keys.slot_ack_key(keys.queries_key(app_id)), keys.meta_key(app_id),
           keys.lease_key(app_id), keys.queries_key(app_id),
           keys.old_id_sets_pattern(app_id, 3).replace("*", "1"),
           keys.query_apps_key(f"dedup-{app_id}", "q"),
           keys.slot_ack_key(keys.query_apps_key(f"dedup-{app_id}", "q")),
           keys.query_outputs_key(f"dedup-{app_id}", "q")]
    for identity in (sink_identity(app_id), sink_identity(app_id, "main")):
        out += [keys.sink_checkpoint_key(identity, "q", 4, 2),
                keys.sink_checkpoint_index_key(identity), keys.sink_marker_key(identity, 2),
                keys.sink_meta_key(identity), keys.sink_lease_key(identity)]
    return out


def _granted(key: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in patterns)


def test_the_documented_acl_line_is_the_one_the_code_derives() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    lines = [line.strip() for line in text.splitlines()
             if line.strip().startswith("ACL SETUSER ")]
    assert lines == [keys.acl_setuser_line("orders"),
                     keys.acl_setuser_line("orders", cluster=True)], lines
    migrate = " ".join(f"+{command}" for command in keys.ACL_MIGRATE_COMMANDS)
    assert f"`{migrate}`" in text, f"docs/operations.md does not list {migrate}"


def test_every_command_of_a_lua_script_is_granted() -> None:
    used = {name.lower() for path in (ROOT / "dedup" / "lua").glob("*.lua")
            for name in re.findall(r"redis\.p?call\(\s*'(\w+)'", path.read_text())}
    assert used and used <= set(keys.ACL_COMMANDS), sorted(used - set(keys.ACL_COMMANDS))


@pytest.mark.parametrize("other", ["orders2", "orders.eu", "orders-x", "order", "Orders"])
def test_an_app_ids_patterns_grant_its_keys_and_no_other_app_ids(other: str) -> None:
    """Every key of an app id, its query records included, is granted by its own line's
    patterns alone: no pattern is shared with another app id run by another user."""
    patterns = keys.acl_key_patterns("orders")
    assert all(_granted(key, patterns) for key in _every_key("orders"))
    assert not [key for key in _every_key(other) if _granted(key, patterns)]
    for key in _every_key("orders"):
        assert keys.acl_key_pattern(key) in patterns and \
            fnmatch.fnmatchcase(key, keys.acl_key_pattern(key)), key


def _refusal(exc: Exception, **context: object) -> str:
    with pytest.raises(RedisPermissionError) as caught, \
            redis_errors(RedisConfig(URL), "the claim of shard 3", **context):  # type: ignore[arg-type]
        raise exc
    message = str(caught.value)
    assert "\n" not in message and "pw" not in message, message
    return message


def test_a_key_refusal_names_the_user_the_key_and_the_pattern_to_grant() -> None:
    key = keys.state_key("orders", 3)
    message = _refusal(redis.exceptions.NoPermissionError(
        "this user has no permissions to access one of the keys used as arguments"),
        keys=[key])
    for part in ("Redis user 'dedup-orders'", f"key '{key}'", "~dedup:{orders:*",
                 "docs/operations.md, Redis ACL"):
        assert part in message, message


@pytest.mark.parametrize("reply", [
    "this user has no permissions to run the 'evalsha' command",
    "User dedup-orders has no permissions to run the 'evalsha' command",  # Redis 7.2
])
def test_a_command_refusal_names_the_command_to_add(reply: str) -> None:
    message = _refusal(redis.exceptions.NoPermissionError(reply), keys=["dedup:{orders}:x"])
    assert "'evalsha' command" in message and "+evalsha" in message, message


def test_a_refusal_inside_a_script_names_its_commands() -> None:
    """Redis names neither the command nor the key a script's call was refused."""
    message = _refusal(redis.exceptions.ResponseError(
        "The user executing the script can't run this command or subcommand script: "
        "d3c2, on @user_script:1."), keys=["dedup:{orders}:queries"], script="progress")
    assert "progress.lua" in message and "+exists" in message and "+hset" in message, message


@pytest.mark.parametrize("user", ["dedup:orders", "a}b", "x*", "t\u00e9nant", "50%"])
def test_a_user_name_with_a_glob_or_a_tag_character_gets_a_pattern_of_its_own(user: str) -> None:
    """The query records sit under the Redis user's name: a name holding ':', '}', a glob
    character or '%' must neither match another user's pattern nor escape its own."""
    key = keys.query_apps_key(user, "q")
    pattern = keys.acl_key_pattern(key)
    assert fnmatch.fnmatchcase(key, pattern) and pattern in keys.acl_key_patterns("o", user)
    for other in ("dedup", "a", "x", "t", "50", "default"):
        assert not fnmatch.fnmatchcase(keys.query_apps_key(other, "q"), pattern), other


@pytest.mark.parametrize(("url", "options", "user"), [
    ("redis://127.0.0.1:6379/0", {}, "default"),
    ("redis://:pw@127.0.0.1:6379/0", {}, "default"),
    ("redis://dedup-orders:pw@127.0.0.1:6379/0", {}, "dedup-orders"),
    ("redis://dedup%2Dx:pw@127.0.0.1:6379/0", {"username": "other"}, "dedup-x"),
    ("redis://127.0.0.1:6379/0", {"username": "other"}, "other"),
    ("redis+cluster://u1:pw@h1:6379,h2:6379", {}, "u1"),
])
def test_the_user_of_a_redis_config_is_the_one_redis_py_authenticates_as(
        url: str, options: dict[str, str], user: str) -> None:
    """redis-py lets the URL's user name win over option ``username``."""
    assert RedisConfig(url, options=options).user == user
