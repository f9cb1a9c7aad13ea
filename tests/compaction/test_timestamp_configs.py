"""Topic configs enforced on produce, with confluent-kafka against ``tidegate serve``:
LogAppendTime stamps batches (the consumer checks CRCs and sees the broker's time),
the timestamp bounds answer INVALID_TIMESTAMP, and the names Kafka 4.x removed
(``message.format.version``, ...) are refused as unknown, as Kafka 4.x refuses them."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.clients.server import Tidegate

TIMEOUT_S = 20
HOUR_MS = 3_600_000


def _create(server: Tidegate, topic: str, configs: dict[str, str]) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(timeout=TIMEOUT_S)
    return admin


def _send(server: Tidegate, topic: str, timestamps: list[int], codec: str = "none") -> list[Any]:
    reports: list[Any] = []
    p = Producer({"bootstrap.servers": server.bootstrap, "compression.type": codec,
                  "retries": 0, "enable.idempotence": False, "linger.ms": 0})
    for ts in timestamps:
        p.produce(topic, key=b"k", value=b"v" * 100, timestamp=ts,
                  on_delivery=lambda e, m: reports.append((e, m)))
        p.flush(TIMEOUT_S)
    return reports


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_log_append_time_stamps_batches(tidegate: Tidegate, codec: str) -> None:
    topic = f"lat-{codec}"
    _create(tidegate, topic, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    reports = _send(tidegate, topic, [before - HOUR_MS, before - 2 * HOUR_MS], codec)
    after = int(time.time() * 1000)
    assert [e for e, _ in reports] == [None, None]
    for _, m in reports:  # the produce answer's log_append_time
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after
    c = Consumer({"bootstrap.servers": tidegate.bootstrap, "group.id": "lat",
                  "check.crcs": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < 2 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None:
            assert m.error() is None, m.error()
            got.append(m.timestamp())
    c.close()
    assert len(got) == 2
    for kind, ts in got:
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after


def test_timestamp_bounds(tidegate: Tidegate) -> None:
    _create(tidegate, "tsb", {"message.timestamp.before.max.ms": str(HOUR_MS),
                              "message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    reports = _send(tidegate, "tsb", [now, now - 2 * HOUR_MS, now + HOUR_MS, now - 60_000])
    codes = [e.code() if e is not None else None for e, _ in reports]
    assert codes == [None, KafkaError.INVALID_TIMESTAMP, KafkaError.INVALID_TIMESTAMP, None]


REMOVED = ("message.format.version", "message.downconversion.enable",
           "message.timestamp.difference.max.ms")


def test_names_kafka_4_removed_are_refused(tidegate: Tidegate) -> None:
    """Kafka 3.x topic configs that Kafka 4.x's LogConfig no longer defines are unknown
    names to CreateTopics (validate_only too), AlterConfigs and IncrementalAlterConfigs:
    INVALID_CONFIG "Unknown topic config name: ...", nothing created or changed."""
    admin = AdminClient({"bootstrap.servers": tidegate.bootstrap})
    for i, (name, value) in enumerate(zip(REMOVED, ("2.8", "true", "60000"), strict=True)):
        for validate_only in (True, False):
            fut = admin.create_topics([NewTopic(f"k3-{i}", 1, 1, config={name: value})],
                                      validate_only=validate_only)[f"k3-{i}"]
            with pytest.raises(KafkaException) as err:
                fut.result(timeout=TIMEOUT_S)
            assert err.value.args[0].code() == KafkaError.INVALID_CONFIG, err.value
            assert f"Unknown topic config name: {name}" in err.value.args[0].str(), err.value
    assert not [t for t in admin.list_topics(timeout=TIMEOUT_S).topics if t.startswith("k3-")]
    _create(tidegate, "k4", {"retention.ms": "3600000"})
    for name in REMOVED:
        incremental = ConfigResource(ConfigResource.Type.TOPIC, "k4", incremental_configs=[
            ConfigEntry(name, "1", incremental_operation=AlterConfigOpType.SET)])
        legacy = ConfigResource(ConfigResource.Type.TOPIC, "k4", set_config={name: "1"})
        with pytest.warns(DeprecationWarning):  # AlterConfigs, as old tools still send it
            legacy_futures = list(admin.alter_configs([legacy]).values())
        for fut in [*admin.incremental_alter_configs([incremental]).values(), *legacy_futures]:
            with pytest.raises(KafkaException) as err:
                fut.result(timeout=TIMEOUT_S)
            assert err.value.args[0].code() == KafkaError.INVALID_CONFIG, err.value
            assert f"Unknown topic config name: {name}" in err.value.args[0].str(), err.value
    # Deleting one is no error (Kafka 4.x validates what remains).
    deleting = ConfigResource(ConfigResource.Type.TOPIC, "k4", incremental_configs=[
        ConfigEntry("message.format.version", None, incremental_operation=AlterConfigOpType.DELETE)])
    for fut in admin.incremental_alter_configs([deleting]).values():
        fut.result(timeout=TIMEOUT_S)
    (entries,) = [f.result(timeout=TIMEOUT_S) for f in admin.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, "k4")]).values()]
    assert entries["retention.ms"].value == "3600000"  # untouched by the refused alters
    assert not set(REMOVED) & set(entries)
    # An unknown name is refused the same way.
    fut = admin.create_topics([NewTopic("k5", 1, 1, config={"no.such.config": "1"})])["k5"]
    with pytest.raises(KafkaException) as err:
        fut.result(timeout=TIMEOUT_S)
    assert "Unknown topic config name: no.such.config" in err.value.args[0].str(), err.value
