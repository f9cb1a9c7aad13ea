"""Committed offsets (with metadata strings) and group metadata survive ``kill -9`` of a
real ``tidegate serve``; a live member carries on in its generation afterwards.

confluent-kafka (librdkafka) is the client here: it reconnects across the kill without
leaving Python sockets behind."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.clients.server import Tidegate


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Tidegate]:
    config = tmp_path / "tidegate.toml"
    config.write_text("[groups]\ninitial_rebalance_delay_ms = 0\n")
    s = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config)
    s.start()
    try:
        yield s
    finally:
        s.close()


def _describe(admin: AdminClient, group: str) -> Any:
    return admin.describe_consumer_groups([group])[group].result(timeout=30)


def _committed(admin: AdminClient, group: str) -> dict[int, tuple[int, str]]:
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    return {tp.partition: (tp.offset, tp.metadata) for tp in res.topic_partitions}


def test_commits_and_group_survive_kill9(server: Tidegate) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("dur", num_partitions=2, replication_factor=1)])["dur"].result(20)
    consumer = Consumer({
        "bootstrap.servers": server.bootstrap, "group.id": "dur-group",
        "enable.auto.commit": False, "session.timeout.ms": 30_000,
        "heartbeat.interval.ms": 500, "reconnect.backoff.max.ms": 500,
    })
    consumer.subscribe(["dur"])
    try:
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert len(consumer.assignment()) == 2
        consumer.commit(
            offsets=[TopicPartition("dur", 0, 5, "meta ü 0"), TopicPartition("dur", 1, 7, "")],
            asynchronous=False,
        )
        before = _describe(admin, "dur-group")
        assert before.state.name == "STABLE"

        server.kill9()
        server.start()

        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        after = _describe(admin, "dur-group")
        assert after.state.name == "STABLE"
        assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
        assert _committed(admin, "dur-group") == {0: (5, "meta ü 0"), 1: (7, "")}
        # The member never noticed: same generation, commits still accepted.
        consumer.commit(offsets=[TopicPartition("dur", 0, 6, "again")], asynchronous=False)
        assert _committed(admin, "dur-group")[0] == (6, "again")
    finally:
        consumer.close()
