"""Least privilege, measured (issue 50): ``acl_permissions_listed``, ``acl_missing_refused``,
``acl_exact``, ``tenant_attempts`` and ``tenant_attempts_allowed``.

Runs the security tests against the real services they start (a Kafka broker with an
authorizer and SASL users, Redis ACL users, a Redis Cluster): ``tests/integration/
security`` and ``tests/integration/cluster/test_redis_cluster_acl.py``, in a pytest
process of their own with a junit XML, and counts from their outcomes:

* ``acl_permissions_listed``: the permissions docs/operations.md lists: the rows of its
  Kafka ACL table, and the key patterns and commands of the Redis ACL lines (the cluster
  line's two extra commands included).
* ``acl_missing_refused``: those of them whose test of leaving exactly that one out
  passed: refused in one line naming it (or, where the docs say so, the documented
  fallback: a warning and exact output). :data:`MISSING` maps each to its test; a
  permission no test leaves out is named in ``untested`` of ``security.json``.
* ``acl_exact``: every test that runs a pipeline with exactly the listed permissions
  passed (the sink, ``dedup run`` end to end, both library forms as a Redis user).
* ``tenant_attempts`` / ``tenant_attempts_allowed``: tenant A's attempts on tenant B's
  Redis keys and Kafka resources, as the two tenant tests print them.

Writes ``benchmarks/results/security.json`` and merges the figures into
``summary.json``. Takes about 10 minutes on the 2-core machine; safe to repeat::

    python -m benchmarks.security
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchmarks.common import merge_summary, run_metadata, write_json

ROOT = Path(__file__).resolve().parents[1]
TESTS = ("tests/integration/security", "tests/integration/cluster/test_redis_cluster_acl.py")
SECURITY = "tests/integration/security"
KAFKA = f"{SECURITY}/test_kafka_acls.py"
REDIS = f"{SECURITY}/test_redis_acl.py"
CLUSTER = "tests/integration/cluster/test_redis_cluster_acl.py"

EXACT = (f"{KAFKA}::test_the_sink_is_exact_with_exactly_the_documented_acls",
         f"{SECURITY}/test_kafka_acls_run.py::test_run_is_exact_with_exactly_the_documented_"
         "acls[all]",
         f"{REDIS}::test_a_pipeline_as_an_acl_user_with_the_documented_line_is_exact[two-step]",
         f"{REDIS}::test_a_pipeline_as_an_acl_user_with_the_documented_line_is_exact[one-pass]")
"""The tests that run a pipeline with exactly the documented permissions, output checked."""

_LEAVE_ONE_OUT = f"{KAFKA}::test_without_one_acl_the_write_fails_at_once_naming_it"
_DESCRIBE_CONFIGS = (f"{KAFKA}::test_without_describe_configs_of_the_output_the_sink_warns_"
                     "and_is_exact")
_VERIFY_READ = f"{KAFKA}::test_verify_without_read_of_the_output_is_refused_naming_it"
MISSING: dict[tuple[str, str, str], tuple[str, ...]] = {
    ("CLUSTER", "kafka-cluster", "DESCRIBE_CONFIGS"): (
        f"{_LEAVE_ONE_OUT}[CLUSTER-DESCRIBE_CONFIGS]",),
    ("TOPIC", "<marker_topic>", "CREATE"): (f"{_LEAVE_ONE_OUT}[TOPIC-CREATE]",),
    ("TOPIC", "<marker_topic>", "READ"): (f"{_LEAVE_ONE_OUT}[TOPIC-READ]",),
    ("GROUP", "<app_id>.sink.", "READ"): (f"{_LEAVE_ONE_OUT}[GROUP-READ]",),
    ("TRANSACTIONAL_ID", "<app_id>.p", "WRITE"): (f"{_LEAVE_ONE_OUT}[TRANSACTIONAL_ID-WRITE]",),
    ("TOPIC", "<output_topic>", "WRITE"): (f"{_LEAVE_ONE_OUT}[TOPIC-WRITE]",),
    ("TOPIC", "<output_topic>", "DESCRIBE_CONFIGS"): (f"{_DESCRIBE_CONFIGS}[output]",),
    ("TOPIC", "<dead_letter_topic>", "WRITE"): (
        f"{KAFKA}::test_without_write_on_the_dead_letter_topic_the_start_is_refused_naming_it",),
    ("TOPIC", "<dead_letter_topic>", "DESCRIBE_CONFIGS"): (f"{_DESCRIBE_CONFIGS}[dead letter]",),
    ("TOPIC", "<output_topic>", "READ"): (f"{_VERIFY_READ}[verify-alone]",
                                          f"{_VERIFY_READ}[with-the-sinks]"),
    ("GROUP", "dedup-reader-", "DESCRIBE"): (
        f"{KAFKA}::test_verify_needs_the_documented_acls_and_names_a_missing_one",),
    ("TOPIC", "<source_topic>", "READ"): (
        f"{SECURITY}/test_kafka_acls_run.py::test_run_is_exact_with_exactly_the_documented_"
        "acls[without-source-read]",),
}
"""Each Kafka permission of the docs' table (resource type, name, operation) -> the test
cases that leave it out alone (each must pass). Redis's are found by name: the
leave-one-out cases of :data:`REDIS` and :data:`CLUSTER` carry the pattern or command as
their id."""


def kafka_permissions(text: str) -> list[tuple[str, str, str]]:
    """(resource type, name, operation) of each row of docs/operations.md's Kafka ACL
    table. Pure."""
    table = text.split("## Kafka ACLs", 1)[1]
    rows = []
    for line in table.splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 4:
            rows.append((cells[0], cells[1], cells[3]))
        elif rows and not line.startswith("|"):
            break
    return rows


def redis_permissions(text: str) -> list[str]:
    """The key patterns (``~...``) and commands (``+...``) of docs/operations.md's Redis
    ACL lines, the cluster line's extra commands included, each once. Pure."""
    parts: dict[str, None] = {}
    for line in text.splitlines():
        if line.strip().startswith("ACL SETUSER "):
            parts.update(dict.fromkeys(word for word in line.split()
                                       if word[:1] in "~+"))
    return list(parts)


def outcomes(xml_text: str) -> dict[str, str]:
    """``path::name[id]`` -> passed / failed / skipped of a junit XML. Pure."""
    from benchmarks.test_times import _key

    found = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        name = case.get("name", "")
        params = name[name.index("["):] if "[" in name else ""
        tags = {child.tag for child in case}
        found[_key(case.get("classname", ""), name, ROOT) + params] = (
            "failed" if tags & {"failure", "error"} else
            "skipped" if "skipped" in tags else "passed")
    return found


def figures(docs: str, results: dict[str, str], printed: str) -> dict[str, Any]:
    """The summary figures and what stands behind them, from the docs' text, the tests'
    outcomes and their printed lines. Pure."""
    kafka = kafka_permissions(docs)
    redis_parts = redis_permissions(docs)
    refused, untested = [], []
    for permission in kafka:
        tests = MISSING.get(permission)
        if not tests:
            untested.append("kafka " + " ".join(permission))
        elif all(results.get(test) == "passed" for test in tests):
            refused.append("kafka " + " ".join(permission))
    # the pattern or command each leave-one-out case drops -> its outcomes
    left_out: dict[str, list[str]] = {}
    for name, outcome in results.items():
        if name.startswith((f"{REDIS}::test_a_user_missing_one_part",
                            f"{CLUSTER}::test_a_cluster_user_missing")):
            left_out.setdefault(_generic(name.partition("[")[2].removesuffix("]")),
                                []).append(outcome)
    for part in redis_parts:
        seen = left_out.get(_generic(part))
        if not seen:
            untested.append(f"redis {part}")
        elif set(seen) == {"passed"}:
            refused.append(f"redis {part}")
    attempts = {key: int(value) for key, value in re.findall(
        r"\b((?:kafka_)?tenant_attempts(?:_allowed)?)=(\d+)", printed)}
    exact = [results.get(test) for test in EXACT]
    return {
        "acl_permissions_listed": len(kafka) + len(redis_parts),
        "acl_missing_refused": len(refused),
        "acl_exact": all(outcome == "passed" for outcome in exact) and len(exact) > 0,
        "tenant_attempts": attempts.get("tenant_attempts", 0)
        + attempts.get("kafka_tenant_attempts", 0),
        "tenant_attempts_allowed": attempts.get("tenant_attempts_allowed", 0)
        + attempts.get("kafka_tenant_attempts_allowed", 0),
        "untested": untested,
        "exact_tests": dict(zip(EXACT, exact, strict=True)),
        "tenant_attempts_by_service": attempts,
    }


def _generic(part: str) -> str:
    # the docs' line is app id 'orders', user 'dedup-orders'; the tests' ids say 'APP'
    return part.replace("dedup-orders", "dedup-APP").replace("orders", "APP")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds before the test run is given up (default 1800)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        xml_path = Path(tmp) / "security.xml"
        print(f"running {' '.join(TESTS)} (about 10 minutes)", flush=True)
        run = subprocess.run([sys.executable, "-m", "pytest", *TESTS, "-q", "-s", "-p",
                              "no:randomly", f"--junitxml={xml_path}"], cwd=ROOT,
                             check=False, timeout=args.timeout, capture_output=True,
                             text=True)
        xml_text = xml_path.read_text() if xml_path.exists() else ""
    if not xml_text:
        print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
        print("the security tests left no junit XML: nothing recorded", file=sys.stderr)
        return 1
    results = outcomes(xml_text)
    docs = (ROOT / "docs" / "operations.md").read_text()
    found = figures(docs, results, run.stdout)
    counts = {outcome: sum(1 for o in results.values() if o == outcome)
              for outcome in ("passed", "failed", "skipped")}
    data = {"meta": {**run_metadata(), "seconds": round(time.monotonic() - started)},
            "tests": counts, "failed": sorted(n for n, o in results.items() if o == "failed"),
            **found}
    path = write_json("security.json", data)
    summary = {key: found[key] for key in ("acl_permissions_listed", "acl_missing_refused",
                                           "acl_exact", "tenant_attempts",
                                           "tenant_attempts_allowed")}
    merge_summary(summary)
    print(f"wrote {path}: {summary}; tests {counts}; untested: {found['untested']}")
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
