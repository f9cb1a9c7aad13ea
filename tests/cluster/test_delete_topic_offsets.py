"""DeleteTopics sent to a node that does not coordinate consumer groups succeeds, and the
groups' committed offsets for the topic go (the coordinating node drops them as it sees
the topic gone); offsets for other topics stay."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse

from tests.clients import requests as kreq
from tests.cluster.clients import QUIET
from tests.cluster.nodes import start_nodes
from tests.cluster.zk import ZooKeeperServer

GROUP = "keeps-offsets"


def _committed(admin: AdminClient) -> set[tuple[str, int, int]]:
    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)])
    result = found[GROUP].result(30)
    return {(tp.topic, tp.partition, tp.offset) for tp in result.topic_partitions or ()}


def test_delete_topic_through_a_node_not_coordinating_groups(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 2, container_count=4, tier1="file")
    try:
        everyone = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": everyone, **QUIET})
        for topic in ("doomed", "kept"):
            admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        consumer = Consumer({"bootstrap.servers": everyone, "group.id": GROUP,
                             "enable.auto.commit": False, **QUIET})
        offsets = [TopicPartition(t, p, 5 + p) for t in ("doomed", "kept") for p in range(2)]
        deadline = time.monotonic() + 30
        while True:  # the partitions' leaders may still be settling on a new cluster
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        consumer.close()
        assert _committed(admin) == {(tp.topic, tp.partition, tp.offset) for tp in offsets}

        described = admin.describe_consumer_groups([GROUP])[GROUP].result(30)
        other = next(n for n in nodes if n.node_id != described.coordinator.id)
        answer = kreq.split_frames(kreq.exchange(
            other.port, kreq.frame(DeleteTopicsRequest(topic_names=["doomed"], timeout_ms=30_000), 4),
            timeout_s=60))
        assert answer, "DeleteTopics closed the connection"
        deleted = DeleteTopicsResponse.decode(answer[0][5:], version=4).responses[0]
        assert deleted.error_code == 0, deleted

        kept = {(t, p, o) for t, p, o in _committed(admin) if t == "kept"}
        deadline = time.monotonic() + 15
        while (left := _committed(admin)) != kept and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left == {("kept", 0, 5), ("kept", 1, 6)}, left
        for node in nodes:
            assert "Traceback" not in node.tail(400), node.tail(400)
    finally:
        for node in nodes:
            node.close()
