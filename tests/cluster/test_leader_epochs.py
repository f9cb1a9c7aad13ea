"""Leader epochs in cluster mode: a node answering for a partition it does not lead names
the leader, its epoch and address (KIP-951); a ``kill -9`` hands the dead node's
partitions over and every partition's epoch grows; the old epoch ends where the new one started (the new
leader learnt the history by indexing what the old leader appended), and consumers read
on without errors."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from tidegate.protocol.errors import ErrorCode as E

from tests.clients.requests import record_batch
from tests.cluster.clients import QUIET, ask, leaders, read_back
from tests.cluster.nodes import start_nodes
from tests.cluster.zk import ZooKeeperServer

PARTITIONS = 4
BEFORE, AFTER = 10, 5


def _epochs(port: int) -> dict[int, tuple[int, int]]:
    """partition -> (leader, leader epoch)."""
    md = ask(port, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="ep")],
                                     allow_auto_topic_creation=False), 12, MetadataResponse)
    return {p.partition_index: (p.leader_id, p.leader_epoch) for t in md.topics
            for p in t.partitions if p.error_code == 0}


def _produce(bootstrap: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **QUIET})
    for p in range(PARTITIONS):
        for i in range(count):
            producer.produce("ep", b"v%d" % i, partition=p)
    assert producer.flush(60) == 0


def test_takeover_grows_epochs_and_keeps_their_history(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    # Two nodes: one left after the kill is too few plog servers for the replicated Tier-1.
    nodes = start_nodes(tmp_path, zookeeper.hosts, 2, container_count=4, tier1="file")
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic("ep", PARTITIONS, 1)])["ep"].result(30)
        deadline = time.monotonic() + 30
        while len(leaders(bootstrap, "ep")) < PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.2)
        survivor, victim = nodes
        before = _epochs(survivor.port)
        assert len(before) == PARTITIONS and len({e for _, e in before.values()}) == 1
        assert {leader for leader, _ in before.values()} == {1, 2}, before
        _produce(bootstrap, BEFORE)
        # Asked of the node that does not lead it, a partition's answers name its leader,
        # epoch and address (KIP-951).
        elsewhere = next(p for p, (leader, _) in before.items() if leader == victim.node_id)
        batch = ProduceRequest.TopicProduceData.PartitionProduceData(
            index=elsewhere, records=record_batch([b"x"]))
        produced = ask(survivor.port, ProduceRequest(
            transactional_id=None, acks=-1, timeout_ms=5000,
            topic_data=[ProduceRequest.TopicProduceData(name="ep", partition_data=[batch])]),
            12, ProduceResponse)
        answer = produced.responses[0].partition_responses[0]
        assert answer.error_code == E.NOT_LEADER_OR_FOLLOWER
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (
            victim.node_id, before[elsewhere][1])
        assert [(n.node_id, n.port) for n in produced.node_endpoints] == [
            (victim.node_id, victim.port)]
        fetched = ask(survivor.port, FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic="ep", partitions=[
                FetchRequest.FetchTopic.FetchPartition(
                    partition=elsewhere, current_leader_epoch=-1, fetch_offset=0,
                    last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)])],
            forgotten_topics_data=[], rack_id=""), 12, FetchResponse)
        part = fetched.responses[0].partitions[0]
        assert part.error_code == E.NOT_LEADER_OR_FOLLOWER
        assert part.current_leader.leader_id == victim.node_id
        victim.kill9()
        after: dict[int, tuple[int, int]] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            after = _epochs(survivor.port)
            if len(after) == PARTITIONS and all(leader == 1 for leader, _ in after.values()):
                break
            time.sleep(0.2)
        old, new = before[0][1], after[0][1]
        assert all(leader == 1 for leader, _ in after.values()) and new > old, (before, after)
        _produce(survivor.bootstrap, AFTER)
        req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic="ep", partitions=[
                OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                    partition=p, current_leader_epoch=new, leader_epoch=epoch)
                for p in range(PARTITIONS) for epoch in (old, new)])])
        resp = ask(survivor.port, req, 4, OffsetForLeaderEpochResponse)
        answers = [(p.partition, p.error_code, p.leader_epoch, p.end_offset)
                   for t in resp.topics for p in t.partitions]
        assert answers == [
            row for p in range(PARTITIONS)
            for row in ((p, 0, old, BEFORE), (p, 0, new, BEFORE + AFTER))
        ], answers
        stored = read_back(survivor.bootstrap, "ep", PARTITIONS, timeout_s=60)
        assert len(stored) == PARTITIONS * (BEFORE + AFTER)
    finally:
        for node in nodes:
            node.close()
