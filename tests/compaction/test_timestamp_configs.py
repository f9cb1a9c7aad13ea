"""Topic configs enforced on produce, with confluent-kafka against ``tidegate serve``:
LogAppendTime stamps batches (the consumer checks CRCs and sees the broker's time),
the timestamp bounds answer INVALID_TIMESTAMP, and the names Kafka 3.x brokers accept
(``message.format.version``, ...) are taken, their documentation saying they are ignored."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
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
    # The deprecated difference config bounds both ways when the new ones are unset.
    _create(tidegate, "tsd", {"message.timestamp.difference.max.ms": "60000"})
    reports = _send(tidegate, "tsd", [now - HOUR_MS, now + HOUR_MS, now])
    codes = [e.code() if e is not None else None for e, _ in reports]
    assert codes == [KafkaError.INVALID_TIMESTAMP, KafkaError.INVALID_TIMESTAMP, None]


def test_kafka_3x_names_are_accepted_and_described_as_ignored(tidegate: Tidegate) -> None:
    admin = _create(tidegate, "k3", {"message.format.version": "2.8"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "k3", incremental_configs=[
        ConfigEntry("message.format.version", "3.0-IV1",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("message.downconversion.enable", "false",
                    incremental_operation=AlterConfigOpType.SET),
    ])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(timeout=TIMEOUT_S)
    (entries,) = [f.result(timeout=TIMEOUT_S) for f in admin.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, "k3")]).values()]
    assert entries["message.format.version"].value == "3.0-IV1"
    assert entries["message.downconversion.enable"].value == "false"
