"""What admin tools call through kafka-clients 4.3.0's AdminClient (docs/kafka-apis.md):
log dirs with sizes, reassignments, producers, client quotas, the broker's configs and a
consumer group's offsets against the end offsets."""

from __future__ import annotations

from tests.clients.server import Tidegate
from tests.java.conftest import Java

TS_BASE = 1_700_000_000_000


def test_admin_tools_calls(java: Java, tidegate_groups: Tidegate) -> None:
    server = tidegate_groups
    out = java.run("AdminScenarios", server.bootstrap, "topics", "jv-tools", "3")
    assert "OK topics" in out, out
    out = java.run("ProducerScenario", server.bootstrap, "jv-tools", "30", "3", str(TS_BASE))
    assert "OK produce 30" in out, out
    out = java.run("ToolScenarios", server.bootstrap, "jv-tools", "3", "jv-tools-group")
    assert "OK tools" in out, out
    lines = out.splitlines()
    sizes = {int(p): int(s) for _, p, s in (ln.split() for ln in lines if ln.startswith("size "))}
    # Each partition holds 10 records of ~20 bytes in at least one batch of 61+ bytes.
    assert sorted(sizes) == [0, 1, 2] and all(s >= 61 for s in sizes.values()), out
    assert sum(ln.startswith("logdir ") for ln in lines) == 2, out
    assert "reassignments 0" in lines, out
    assert "producers 3" in lines, out  # one idempotent producer seen by each partition
    assert "quotas 0" in lines, out
    assert "ibp 3.9-IV0" in lines, out
    assert "group partitions 3 lag 27" in lines, out


def test_java_create_topics_validate_only_and_assignments(java: Java, tidegate_groups: Tidegate) -> None:
    """Kafka 4.x's answers to CreateTopics (ReplicationControlManager's checks and
    messages): validateOnly answers as the creation would and creates nothing; explicit
    replica assignments must name registered brokers, once each, for consecutive
    partitions."""
    out = java.run("CreateTopicsScenario", tidegate_groups.bootstrap)
    assert "OK create-topics" in out, out
    expected = [
        "ct-validate ok 3 configs=true",
        "ct-assigned ok 2 configs=true",
        "ct-assigned-v ok 1 configs=true",
        "ct-no-broker InvalidReplicaAssignmentException: The manual partition assignment includes "
        "broker 7, but no such broker is registered.",
        "ct-gap InvalidReplicaAssignmentException: partitions should be a consecutive 0-based integer sequence",
        "ct-twice InvalidReplicaAssignmentException: The manual partition assignment includes the "
        "broker 0 more than once.",
        "ct-empty InvalidReplicaAssignmentException: The manual partition assignment includes an "
        "empty replica list.",
        "ct-zero InvalidPartitionsException: Number of partitions was set to an invalid non-positive value.",
        "ct-rf0 InvalidReplicationFactorException: Replication factor must be larger than 0, or -1 "
        "to use the default value.",
        "ct-assigned TopicExistsException: Topic 'ct-assigned' already exists.",
        "ct-mfv InvalidConfigurationException: Unknown topic config name: message.format.version",
        "ct-tdm InvalidConfigurationException: Unknown topic config name: "
        "message.timestamp.difference.max.ms",
        "ct-seg InvalidConfigurationException: Invalid value 1024 for configuration segment.bytes: "
        "Value must be at least 1048576",
        "alter message.downconversion.enable InvalidConfigurationException: Unknown topic config "
        "name: message.downconversion.enable",
        "topics [ct-assigned]",
        "assigned partitions 2",
    ]
    for line in expected:
        assert line in out.splitlines(), f"{line!r} not in:\n{out}"
