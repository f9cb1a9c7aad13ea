"""Admin APIs through confluent-kafka's ``AdminClient`` (librdkafka) and kcat against a
real ``tidegate serve`` (one server for the module; each test uses its own topics)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from tests.clients.server import Tidegate

TIMEOUT_S = 20


def _admin(tidegate: Tidegate) -> AdminClient:
    return AdminClient({"bootstrap.servers": tidegate.bootstrap})


def _wait(futures: dict[Any, Any]) -> dict[Any, Any]:
    return {k: f.result(timeout=TIMEOUT_S) for k, f in futures.items()}


def _error(future: Any) -> Any:
    with pytest.raises(KafkaException) as failure:
        future.result(timeout=TIMEOUT_S)
    return failure.value.args[0]


def _configs(admin: AdminClient, topic: str) -> dict[str, Any]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    (entries,) = _wait(admin.describe_configs([resource])).values()
    return dict(entries)


def _produce(tidegate: Tidegate, topic: str, counts: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": tidegate.bootstrap, "acks": "all"})
    for p, n in counts.items():
        for i in range(n):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(TIMEOUT_S) == 0


def test_create_describe_and_alter_configs(tidegate: Tidegate) -> None:
    admin = _admin(tidegate)
    futures = admin.create_topics(
        [NewTopic("cfa-v", 2, 1, config={"retention.ms": "60000"})], validate_only=True)
    _wait(futures)
    assert "cfa-v" not in admin.list_topics(timeout=TIMEOUT_S).topics
    futures = admin.create_topics([
        NewTopic("cfa-c", 2, 1, config={"retention.ms": "60000", "cleanup.policy": "delete"}),
        NewTopic("cfa-bad", 1, 1, config={"segment.ms": "0"}),
        NewTopic("cfa-bad2", 1, 1, config={"not.a.config": "1"}),
    ])
    futures["cfa-c"].result(timeout=TIMEOUT_S)
    assert _error(futures["cfa-bad"]).name() == "INVALID_CONFIG"
    assert "segment.ms" in _error(futures["cfa-bad"]).str()
    assert _error(futures["cfa-bad2"]).name() == "INVALID_CONFIG"
    assert _error(admin.create_topics([NewTopic("cfa-c", 2, 1)])["cfa-c"]).name() == \
        "TOPIC_ALREADY_EXISTS"

    configs = _configs(admin, "cfa-c")
    assert configs["retention.ms"].value == "60000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["max.message.bytes"].is_default

    # AlterConfigs replaces the set: retention.ms and cleanup.policy return to defaults.
    resource = ConfigResource(ConfigResource.Type.TOPIC, "cfa-c",
                              set_config={"segment.ms": "3600000"})
    with pytest.warns(DeprecationWarning, match="alter_configs"):  # still AlterConfigs
        futures = admin.alter_configs([resource])
    _wait(futures)
    configs = _configs(admin, "cfa-c")
    assert configs["segment.ms"].value == "3600000"
    assert configs["retention.ms"].value == "604800000" and configs["retention.ms"].is_default

    # IncrementalAlterConfigs: SET, APPEND, SUBTRACT, DELETE.
    def incremental(*entries: ConfigEntry) -> Any:
        resource = ConfigResource(ConfigResource.Type.TOPIC, "cfa-c",
                                  incremental_configs=list(entries))
        (future,) = admin.incremental_alter_configs([resource]).values()
        return future

    incremental(
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ).result(timeout=TIMEOUT_S)
    configs = _configs(admin, "cfa-c")
    assert configs["retention.ms"].value == "1000"
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["segment.ms"].is_default
    incremental(ConfigEntry("cleanup.policy", "delete",
                            incremental_operation=AlterConfigOpType.SUBTRACT)).result(TIMEOUT_S)
    assert _configs(admin, "cfa-c")["cleanup.policy"].value == "compact"
    bad = incremental(ConfigEntry("retention.ms", "x", incremental_operation=AlterConfigOpType.SET))
    assert _error(bad).name() == "INVALID_CONFIG"
    assert _configs(admin, "cfa-c")["retention.ms"].value == "1000"

    # The broker resource is described; read-only but for its dynamic configs; num.partitions
    # is static in Kafka too.
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    (entries,) = _wait(admin.describe_configs([broker])).values()
    assert entries["message.max.bytes"].value == "1048588"
    assert not entries["message.max.bytes"].is_read_only
    assert entries["num.partitions"].is_read_only
    assert entries["queued.max.request.bytes"].value == str(128 * 1024 * 1024)
    broker = ConfigResource(ConfigResource.Type.BROKER, "0", set_config={"num.partitions": "3"})
    with pytest.warns(DeprecationWarning, match="alter_configs"):
        (future,) = admin.alter_configs([broker]).values()
    assert _error(future).name() == "INVALID_REQUEST"
    unknown = ConfigResource(ConfigResource.Type.TOPIC, "cfa-none")
    (future,) = admin.describe_configs([unknown]).values()
    assert _error(future).name() == "UNKNOWN_TOPIC_OR_PART"


def test_partitions_records_cluster_and_deletion(tidegate: Tidegate) -> None:
    admin = _admin(tidegate)
    _wait(admin.create_topics([NewTopic("cfa-p", 1, 1)]))
    _produce(tidegate, "cfa-p", {0: 6})
    _wait(admin.create_partitions([NewPartitions("cfa-p", 3)], validate_only=True))
    assert len(admin.list_topics(timeout=TIMEOUT_S).topics["cfa-p"].partitions) == 1
    _wait(admin.create_partitions([NewPartitions("cfa-p", 3)]))
    assert len(admin.list_topics("cfa-p", timeout=TIMEOUT_S).topics["cfa-p"].partitions) == 3
    (future,) = admin.create_partitions([NewPartitions("cfa-p", 2)]).values()
    assert _error(future).name() == "INVALID_PARTITIONS"
    _produce(tidegate, "cfa-p", {1: 2, 2: 2})

    # DeleteRecords, seen by ListOffsets earliest; beyond the high watermark is an error.
    (result,) = _wait(admin.delete_records([TopicPartition("cfa-p", 0, 4)])).values()
    assert result.low_watermark == 4
    (future,) = admin.delete_records([TopicPartition("cfa-p", 1, 99)]).values()
    assert _error(future).name() == "OFFSET_OUT_OF_RANGE"
    earliest = _wait(admin.list_offsets({TopicPartition("cfa-p", p): OffsetSpec.earliest()
                                         for p in range(3)}))
    assert {tp.partition: r.offset for tp, r in earliest.items()} == {0: 4, 1: 0, 2: 0}

    # kcat sees the new partitions and reads partition 0 from its log start.
    listing = subprocess.run(["kcat", "-b", tidegate.bootstrap, "-L", "-t", "cfa-p"],
                             capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
    assert "3 partitions" in listing.stdout
    consumed = subprocess.run(
        ["kcat", "-b", tidegate.bootstrap, "-C", "-t", "cfa-p", "-p", "0", "-o", "beginning",
         "-e", "-f", "%o %s\n"], capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
    assert consumed.stdout.split("\n")[:2] == ["4 0-4", "5 0-5"]

    cluster = admin.describe_cluster().result(timeout=TIMEOUT_S)
    assert cluster.cluster_id == "tidegate"
    assert [(n.id, n.port) for n in cluster.nodes] == [(0, tidegate.port)]
    assert cluster.controller is not None and cluster.controller.id == 0

    _wait(admin.delete_topics(["cfa-p"]))
    assert "cfa-p" not in admin.list_topics(timeout=TIMEOUT_S).topics
    (future,) = admin.delete_topics(["cfa-p"]).values()
    assert _error(future).name() == "UNKNOWN_TOPIC_OR_PART"
