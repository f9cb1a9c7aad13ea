"""Dynamic broker configs with the Java Admin client and confluent-kafka's AdminClient against a real ``tidegate
serve``: ``message.max.bytes`` set as the cluster default (empty broker name) and for the
node, applied to the next Produce, kept across a restart, reported with Kafka's sources and
synonyms (kafka-python's admin client lists the synonyms in order); static configs and bad
values refused with Kafka's messages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from tests.clients.server import Tidegate, serving
from tests.java.conftest import Java

TIMEOUT_S = 30
STATIC_BYTES = 3000
KAFKA_DEFAULT_BYTES = 1048588
RECORD_BYTES = 5000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Tidegate]:
    with serving(tmp_path, f'"message.max.bytes" = {STATIC_BYTES}\n') as server:
        yield server


def _set(java: Java, server: Tidegate, broker: str, name: str, value: str | None) -> str:
    """IncrementalAlterConfigs SET (DELETE for None) on a broker resource: "" when it
    succeeded, else the error's name and message. The Java Admin client sends the cluster
    default (empty name; librdkafka and kafka-python refuse one), confluent-kafka a node's."""
    if broker == "":
        out = java.run("BrokerConfigs", server.bootstrap, "", name, "-" if value is None else value)
        return "" if "OK" in out.splitlines() else out.strip().splitlines()[-1]
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(ConfigResource.Type.BROKER, broker,
                              incremental_configs=[ConfigEntry(name, value, incremental_operation=op)])
    admin = AdminClient({"bootstrap.servers": server.bootstrap})  # kept alive for the future
    (future,) = admin.incremental_alter_configs([resource]).values()
    try:
        future.result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return f"{error.name()}: {error.str()}"
    return ""


def _described(admin: AdminClient, name: str) -> tuple[str, ConfigSource, bool]:
    (entries,) = {k: f.result(timeout=TIMEOUT_S) for k, f in admin.describe_configs(
        [ConfigResource(ConfigResource.Type.BROKER, "0")]).items()}.values()
    entry = entries[name]
    return entry.value, ConfigSource(entry.source), entry.is_read_only


def _synonyms(server: Tidegate, name: str) -> list[tuple[str, str]]:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        answer = admin.describe_configs([KpResource(ConfigResourceType.BROKER, "0", [name])],
                                        include_synonyms=True, config_filter="all")
    finally:
        admin.close()
    return [(s["value"], s["source"]) for s in answer["broker"]["0"][name]["synonyms"]]


def _produce_fits(server: Tidegate) -> bool:
    """Whether a record of ``RECORD_BYTES`` is accepted."""
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "retries": 0,
                         "compression.type": "none"})
    errors: list[KafkaError] = []
    producer.produce("dyn", value=b"x" * RECORD_BYTES,
                     on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(TIMEOUT_S) == 0
    if errors:
        assert errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, errors
    return not errors


def test_dynamic_message_max_bytes(java: Java, server: Tidegate) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("dyn", 1, 1)])["dyn"].result(timeout=TIMEOUT_S)
    assert _described(admin, "message.max.bytes") == (
        str(STATIC_BYTES), ConfigSource.STATIC_BROKER_CONFIG, False)
    assert _synonyms(server, "message.max.bytes") == [
        (str(STATIC_BYTES), "STATIC_BROKER_CONFIG"), (str(KAFKA_DEFAULT_BYTES), "DEFAULT_CONFIG")]
    assert not _produce_fits(server)

    # The cluster default (empty name) overrides the static value, at once.
    assert _set(java, server, "", "message.max.bytes", "100000") == ""
    assert _described(admin, "message.max.bytes")[:2] == (
        "100000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert _produce_fits(server)
    # The node's own value overrides the cluster default.
    assert _set(java, server, "0", "message.max.bytes", "4000") == ""
    assert _described(admin, "message.max.bytes")[:2] == ("4000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert _synonyms(server, "message.max.bytes") == [
        ("4000", "DYNAMIC_BROKER_CONFIG"), ("100000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        (str(STATIC_BYTES), "STATIC_BROKER_CONFIG"), (str(KAFKA_DEFAULT_BYTES), "DEFAULT_CONFIG")]
    assert not _produce_fits(server)

    # Static configs and bad values: INVALID_REQUEST with DynamicBrokerConfig's messages.
    assert _set(java, server, "0", "num.partitions", "3") == (
        "INVALID_REQUEST: Cannot update these configs dynamically: Set(num.partitions)")
    assert _set(java, server, "0", "message.max.bytes", "lots") == (
        "INVALID_REQUEST: Invalid value lots for configuration message.max.bytes: "
        "Not a number of type INT")
    assert _set(java, server, "", "auto.create.topics.enable", "false") == (
        "ERR InvalidRequestException Cannot update these configs dynamically: "
        "Set(auto.create.topics.enable)")

    # Both levels survive a restart.
    server.restart()
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    assert _described(admin, "message.max.bytes")[:2] == ("4000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert not _produce_fits(server)
    # DELETE of the node's value falls back to the cluster default.
    assert _set(java, server, "0", "message.max.bytes", None) == ""
    assert _described(admin, "message.max.bytes")[:2] == (
        "100000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert _produce_fits(server)
    assert _set(java, server, "", "message.max.bytes", None) == ""
    assert _described(admin, "message.max.bytes")[:2] == (
        str(STATIC_BYTES), ConfigSource.STATIC_BROKER_CONFIG)
    assert not _produce_fits(server)
