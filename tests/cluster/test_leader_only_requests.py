"""ListOffsets, DeleteRecords and DescribeProducers are answered by a partition's leader
only, as Kafka's are; another node answers NOT_LEADER_OR_FOLLOWER and the client asks
Metadata again. Each node keeps its own view of the partitions it does not lead, stale
since it last led them: a fault campaign's read-back asked a node that no longer led a
partition for its high watermark, got an old one, and stopped reading 529 acknowledged
records short of the end."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
)
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from tidegate.protocol.errors import ErrorCode

from tests.cluster.clients import QUIET, ask, node_leaders, wait_for
from tests.cluster.nodes import start_nodes
from tests.cluster.zk import ZooKeeperServer

TOPIC, PARTITIONS, PER_PARTITION = "led-only", 6, 20


def _list_offsets(port: int, partition: int) -> tuple[int, int]:
    topic = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[topic(name=TOPIC, partitions=[
        topic.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=-1)])])
    found = ask(port, req, 4, ListOffsetsResponse).topics[0].partitions[0]
    return int(found.error_code), int(found.offset)


def _describe_producers(port: int, partition: int) -> int:
    req = DescribeProducersRequest(topics=[
        DescribeProducersRequest.TopicRequest(name=TOPIC, partition_indexes=[partition])])
    return int(ask(port, req, 0, DescribeProducersResponse).topics[0].partitions[0].error_code)


def _delete_records(port: int, partition: int, offset: int) -> tuple[int, int]:
    topic = DeleteRecordsRequest.DeleteRecordsTopic
    req = DeleteRecordsRequest(timeout_ms=10_000, topics=[topic(name=TOPIC, partitions=[
        topic.DeleteRecordsPartition(partition_index=partition, offset=offset)])])
    found = ask(port, req, 2, DeleteRecordsResponse).topics[0].partitions[0]
    return int(found.error_code), int(found.low_watermark)


def test_partition_requests_to_a_node_that_does_not_lead_are_sent_to_the_leader(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=6)
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        led = wait_for("every partition led", lambda: (
            found if len(found := node_leaders(nodes[0].port, TOPIC)) == PARTITIONS else None))
        assert len(set(led.values())) > 1, f"one node leads every partition: {led}"
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **QUIET})
        for i in range(PARTITIONS * PER_PARTITION):
            producer.produce(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS)
        assert producer.flush(60) == 0
        port = {n.node_id: n.port for n in nodes}
        for partition, leader in sorted(led.items()):
            assert _list_offsets(port[leader], partition) == (ErrorCode.NONE, PER_PARTITION)
            assert _describe_producers(port[leader], partition) == ErrorCode.NONE
            for node in nodes:
                if node.node_id == leader:
                    continue
                # Before, each of these answered from the node's own, empty view.
                assert _list_offsets(node.port, partition)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
                assert _describe_producers(node.port, partition) == ErrorCode.NOT_LEADER_OR_FOLLOWER
                assert _delete_records(node.port, partition, 5)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert _delete_records(port[leader], partition, 5) == (ErrorCode.NONE, 5)
    finally:
        for node in nodes:
            node.close()
