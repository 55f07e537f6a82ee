"""The ACL table of docs/operations.md ("Kafka ACLs") and :func:`sinks.acls.required_acls`
list the same permissions: one source, which the ACL tests grant and nothing more."""

from __future__ import annotations

import re
from pathlib import Path

from sinks.acls import KafkaAcl, required_acls

DOC = Path(__file__).resolve().parents[3] / "docs" / "operations.md"


def _section() -> str:
    text = DOC.read_text()
    start = text.index("\n## Kafka ACLs\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def _documented() -> list[tuple[str, ...]]:
    rows = []
    for line in _section().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 7 or cells[0] in {"resource", ""} \
                or set(cells[0]) <= {"-"}:
            continue
        rows.append(tuple(cell.strip("`") for cell in cells))
    return rows


def _listed() -> list[KafkaAcl]:
    return required_acls("<app_id>", "<output_topic>", marker_topic="<marker_topic>",
                         dead_letter_topic="<dead_letter_topic>",
                         source_topics=["<source_topic>"])


def test_the_docs_table_lists_exactly_the_acls_of_the_code() -> None:
    expected = [(acl.resource_type, acl.name, acl.pattern, acl.operation, acl.part, acl.when,
                 acl.command()) for acl in _listed()]
    assert _documented() == expected


def test_the_docs_count_the_permissions_they_list() -> None:
    counted = re.search(r"(\d+) permissions", _section())
    assert counted is not None and int(counted.group(1)) == len(_listed())


def test_a_named_output_and_no_source_change_only_the_names() -> None:
    acls = required_acls("app", "out", output_name="copy")
    assert ("TRANSACTIONAL_ID", "app/copy.p", "PREFIXED") in {
        (a.resource_type, a.name, a.pattern) for a in acls}
    assert not any(a.part == "source" for a in acls)
    assert all(a.operation != "DESCRIBE" for a in acls if a.part.startswith("sink"))


def test_a_command_line_grants_one_acl() -> None:
    [group] = [a for a in required_acls("app", "out")
               if a.resource_type == "GROUP" and a.part == "sink"]
    assert group.command("User:pipe", "kafka:9093") == (
        "kafka-acls.sh --bootstrap-server kafka:9093 --add --allow-principal User:pipe "
        "--operation Read --group 'app.sink.' --resource-pattern-type prefixed")


def test_a_refusal_names_the_acl_of_the_sink_in_one_line() -> None:
    from confluent_kafka import KafkaError, KafkaException

    from sinks import SinkConfig
    from sinks.acls import authorization_error, denied, sink_needs
    from sinks.exceptions import KafkaUnavailableError

    config = SinkConfig(app_id="app", bootstrap_servers="127.0.0.1:1", topic="out",
                        strong_productions=False, output_name="copy")
    raw = KafkaException(KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    wrapped = KafkaUnavailableError("could not ...")
    wrapped.__cause__ = raw
    assert authorization_error(wrapped) == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    assert authorization_error(KafkaError(KafkaError._TIMED_OUT)) is None
    error = denied("init_transactions of app/copy.p0", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                   sink_needs(config, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "marker"))
    assert str(error) == (
        "Kafka denied init_transactions of app/copy.p0 (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): "
        "grant the pipeline's principal WRITE on transactional id prefix 'app/copy.p' "
        "(PREFIXED) (docs/operations.md, Kafka ACLs)")
    assert error.fatal() and not error.retriable()
    assert [a.resource for a in sink_needs(config, "TOPIC_AUTHORIZATION_FAILED", "produce",
                                           ("out", "dead"))] == ["topic 'out'", "topic 'dead'"]
    assert [a.operation for a in sink_needs(config, "TOPIC_AUTHORIZATION_FAILED", "start")] \
        == ["CREATE"]
