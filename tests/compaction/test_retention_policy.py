"""A compacted topic has no time or size retention (issue 24's data loss): confluent-kafka's
AdminClient against ``tidegate serve`` whose controller runs retention every 200 ms."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from tidegate.core.controller.api import RetentionPolicy, RetentionType

from tests.clients.server import Tidegate
from tests.gateway.conftest import Node

TIMEOUT_S = 20


def _wait(futures: dict[Any, Any]) -> None:
    for f in futures.values():
        f.result(timeout=TIMEOUT_S)


def _earliest(tidegate: Tidegate, topic: str) -> int:
    c = Consumer({"bootstrap.servers": tidegate.bootstrap, "group.id": "probe"})
    try:
        low, _ = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
        return int(low)
    finally:
        c.close()


def _produce(tidegate: Tidegate, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": tidegate.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(n):
        p.produce(topic, key=b"k%d" % (i % 3), value=b"v%d" % i)
        p.flush(TIMEOUT_S)  # one batch each: a truncation could fall between any two
    assert p.flush(TIMEOUT_S) == 0


def _wait_truncated(tidegate: Tidegate, topic: str) -> int:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        low = _earliest(tidegate, topic)
        if low > 0:
            return low
        time.sleep(0.2)
    raise AssertionError(f"retention never truncated {topic}:\n{tidegate.tail()}")


def test_compacted_topic_keeps_old_records_through_retention(tidegate: Tidegate) -> None:
    admin = AdminClient({"bootstrap.servers": tidegate.bootstrap})
    _wait(admin.create_topics([
        NewTopic("rp-compact", 1, 1, config={"cleanup.policy": "compact",
                                               "retention.ms": "100"}),
        NewTopic("rp-compact-default", 1, 1, config={"cleanup.policy": "compact"}),
        NewTopic("rp-delete", 1, 1, config={"retention.ms": "100"}),
        NewTopic("rp-both", 1, 1, config={"cleanup.policy": "compact,delete",
                                            "retention.ms": "100"}),
    ]))
    for topic in ("rp-compact", "rp-compact-default", "rp-delete", "rp-both"):
        _produce(tidegate, topic, 6)
    # Retention passes run: the delete and compact,delete topics lose their old records...
    assert _wait_truncated(tidegate, "rp-delete") > 0
    assert _wait_truncated(tidegate, "rp-both") > 0
    time.sleep(1.0)  # a few more passes
    # ... the compacted ones keep every record (retention.ms is not theirs to apply).
    assert _earliest(tidegate, "rp-compact") == 0
    assert _earliest(tidegate, "rp-compact-default") == 0

    # Changing the policy changes the stream's retention: compact → delete truncates.
    resource = ConfigResource(
        ConfigResource.Type.TOPIC, "rp-compact",
        incremental_configs=[ConfigEntry("cleanup.policy", "delete",
                                         incremental_operation=AlterConfigOpType.SET)])
    _wait(admin.incremental_alter_configs([resource]))
    _produce(tidegate, "rp-compact", 1)
    assert _wait_truncated(tidegate, "rp-compact") > 0


async def test_stream_retention_follows_cleanup_policy(node: Node) -> None:
    """The stream's retention policy itself, in process, set by a real AdminClient."""

    def run() -> None:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}"})
        _wait(admin.create_topics([NewTopic("sp", 2, 1, config={"cleanup.policy": "compact"})]))

    async def retention() -> RetentionPolicy | None:
        return (await node.controller.get_stream("kafka", "sp")).config.retention

    def alter(policy: str, **more: str) -> None:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}"})
        entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
                   for name, value in {"cleanup.policy": policy, **more}.items()]
        _wait(admin.incremental_alter_configs([ConfigResource(
            ConfigResource.Type.TOPIC, "sp", incremental_configs=entries)]))

    await asyncio.to_thread(run)
    assert await retention() is None
    await asyncio.to_thread(alter, "delete")
    assert await retention() == RetentionPolicy(RetentionType.TIME, 604_800_000)
    await asyncio.to_thread(alter, "compact,delete")
    assert await retention() is None
    # compact,delete: the cleaner applies retention (log starts first), not the stream.
    await asyncio.to_thread(alter, "compact,delete", **{"retention.bytes": "10"})
    assert await retention() is None
    await asyncio.to_thread(alter, "compact")
    assert await retention() is None
