"""benchmarks.security's figures from the docs and the security tests' outcomes (pure)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import security
from dedup.keys import ACL_CLUSTER_COMMANDS, ACL_COMMANDS, acl_key_patterns

ROOT = Path(__file__).resolve().parents[3]
DOCS = (ROOT / "docs" / "operations.md").read_text()


def _all_passed() -> dict[str, str]:
    """An outcome per test case the figures read, every one passed."""
    results = dict.fromkeys((t for tests in security.MISSING.values() for t in tests),
                            "passed")
    results.update(dict.fromkeys(security.EXACT, "passed"))
    for part in (*(f"~{p}" for p in acl_key_patterns("APP")),
                 *(f"+{c}" for c in ACL_COMMANDS if c != "wait")):
        results[f"{security.REDIS}::test_a_user_missing_one_part_of_the_line_is_refused_"
                f"naming_it[{part}]"] = "passed"
    for command in (*ACL_CLUSTER_COMMANDS, "wait"):
        results[f"{security.CLUSTER}::test_a_cluster_user_missing_a_command_is_refused_"
                f"naming_it[+{command}]"] = "passed"
    return results


def test_the_docs_list_every_kafka_acl_and_every_part_of_the_redis_line() -> None:
    kafka = security.kafka_permissions(DOCS)
    assert len(kafka) == 12 and ("TOPIC", "<output_topic>", "WRITE") in kafka, kafka
    redis_parts = security.redis_permissions(DOCS)
    assert len(redis_parts) == 4 + len(ACL_COMMANDS) + len(ACL_CLUSTER_COMMANDS)
    assert "~dedup:{~dedup-orders:*" in redis_parts and "+cluster|slots" in redis_parts


def test_every_tested_permission_counts_and_the_untested_are_named() -> None:
    printed = ("tenant_attempts=56 tenant_attempts_allowed=0\n"
               "kafka_tenant_attempts=11 kafka_tenant_attempts_allowed=1\n")
    found = security.figures(DOCS, _all_passed(), printed)
    assert found["acl_permissions_listed"] == 12 + 4 + len(ACL_COMMANDS) + 2
    assert found["acl_missing_refused"] == found["acl_permissions_listed"] - len(
        found["untested"]), found["untested"]
    assert found["untested"] == [], found["untested"]
    assert (found["tenant_attempts"], found["tenant_attempts_allowed"]) == (67, 1)
    assert found["acl_exact"] is True


def test_a_failed_case_is_not_counted() -> None:
    results = _all_passed()
    refused = security.figures(DOCS, results, "")["acl_missing_refused"]
    results[next(iter(security.MISSING.values()))[0]] = "failed"
    results[f"{security.REDIS}::test_a_user_missing_one_part_of_the_line_is_refused_"
            "naming_it[+ping]"] = "failed"
    results[security.EXACT[0]] = "failed"
    found = security.figures(DOCS, results, "")
    assert found["acl_missing_refused"] == refused - 2 and found["acl_exact"] is False


def test_outcomes_keep_each_parametrized_case_apart() -> None:
    xml = ('<testsuites><testsuite>'
           '<testcase classname="tests.integration.security.test_kafka_acls" '
           'name="test_x[verify-alone]" time="1"/>'
           '<testcase classname="tests.integration.security.test_redis_acl" '
           'name="test_y[~dedup:{APP}*]" time="1"><failure/></testcase>'
           '<testcase classname="tests.integration.security.test_redis_acl" '
           'name="test_z" time="0"><skipped/></testcase>'
           '</testsuite></testsuites>')
    assert security.outcomes(xml) == {
        f"{security.KAFKA}::test_x[verify-alone]": "passed",
        f"{security.REDIS}::test_y[~dedup:{{APP}}*]": "failed",
        f"{security.REDIS}::test_z": "skipped"}
