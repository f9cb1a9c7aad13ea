"""Share groups (KIP-932) on three nodes: the share coordinator runs on the group
coordinator's node and its state (share-partition start offsets) moves with the groups'
container: set with kafka-clients 4.3's Admin, it is the same after a ``kill -9`` of that
node (another node takes over) and after the node comes back. Other nodes answer share
group requests with NOT_COORDINATOR; ShareFetch for a partition another node leads
answers NOT_LEADER_OR_FOLLOWER naming that leader (docs/share-groups.md)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from tidegate.protocol.errors import ErrorCode as E
from tidegate.protocol.share_group import (
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)

from tests.cluster.clients import QUIET, ask, coordinator, leaders, wait_for
from tests.cluster.nodes import start_nodes
from tests.cluster.zk import ZooKeeperServer
from tests.java.conftest import Java

TOPIC, GROUP, PARTITIONS, COUNT = "sq", "sg", 3, 10
#: The start offsets set for each partition (records below them are done).
STARTS = {0: 3, 1: 5, 2: 7}




def _fetch_request(topic_id: uuid.UUID, partition: int, member: str, epoch: int) -> Any:
    """A ShareFetch of one partition (none with the final epoch, which closes)."""
    topics = [] if epoch == -1 else [ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
        ShareFetchRequest.FetchTopic.FetchPartition(partition_index=partition,
                                                    acknowledgement_batches=[])])]
    return ShareFetchRequest(
        group_id=GROUP, member_id=member, share_session_epoch=epoch, max_wait_ms=0,
        min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10, topics=topics,
        forgotten_topics_data=[])


def _offsets(java: Java, bootstrap: str) -> dict[int, tuple[int, int]]:
    """Each partition's (start offset, lag) as the Java Admin lists them."""
    out = java.run("ShareScenarios", bootstrap, "admin", GROUP)
    found = {}
    for line in out.splitlines():
        m = re.fullmatch(rf"OFFSET {TOPIC}-(\d+) start=(-?\d+) lag=(-?\d+)", line)
        if m:
            found[int(m[1])] = (int(m[2]), int(m[3]))
    assert "OK admin" in out, out
    return found


def test_share_state_moves_with_the_group_coordinator(
    tmp_path: Path, zookeeper: ZooKeeperServer, java: Java
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=6)
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        wait_for("every partition led", lambda: len(leaders(bootstrap, TOPIC)) == PARTITIONS, 90)
        producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
        for p in range(PARTITIONS):
            for i in range(COUNT):
                producer.produce(TOPIC, value=b"v-%d-%d" % (p, i), partition=p)
        assert producer.flush(60) == 0

        coord_id = wait_for("a coordinator", lambda: (c := coordinator(nodes[0].port, GROUP, 0)) > 0 and c, 90)
        coord = next(n for n in nodes if n.node_id == coord_id)
        other = next(n for n in nodes if n is not coord)
        # Share group requests sent to another node: NOT_COORDINATOR, as for groups.
        hb = ask(other.port, ShareGroupHeartbeatRequest(
            group_id=GROUP, member_id=uuid.uuid4().hex[:22], member_epoch=0, rack_id=None,
            subscribed_topic_names=[TOPIC]), 1, ShareGroupHeartbeatResponse)
        assert hb.error_code == E.NOT_COORDINATOR, hb
        # ShareFetch for a partition led elsewhere: NOT_LEADER_OR_FOLLOWER and its leader.
        led = leaders(bootstrap, TOPIC)
        asker = next(n for n in nodes if set(led.values()) - {n.node_id})
        p, leader = next((p, n) for p, n in led.items() if n != asker.node_id)
        md = ask(asker.port, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=TOPIC)], allow_auto_topic_creation=False), 12, MetadataResponse)
        topic_id = md.topics[0].topic_id
        fetch = ask(asker.port, _fetch_request(topic_id, p, "m", 0), 1, ShareFetchResponse)
        assert fetch.error_code == E.NONE, fetch
        (answer,) = fetch.responses[0].partitions
        assert answer.error_code == E.NOT_LEADER_OR_FOLLOWER, fetch
        assert answer.current_leader.leader_id == leader, fetch
        assert [e.node_id for e in fetch.node_endpoints] == [leader], fetch
        # At the leader, a member id the group does not know is served, as on one node and
        # as Kafka's share-partition leader does (ShareFetch has no UNKNOWN_MEMBER_ID).
        at_leader = next(n for n in nodes if n.node_id == leader)
        served = ask(at_leader.port, _fetch_request(topic_id, p, "not-a-member", 0), 1,
                     ShareFetchResponse)
        assert served.error_code == E.NONE, served
        assert all(q.error_code == E.NONE for t in served.responses for q in t.partitions), served
        closed = ask(at_leader.port, _fetch_request(topic_id, p, "not-a-member", -1), 1,
                     ShareFetchResponse)
        assert closed.error_code == E.NONE, closed

        out = java.run("ShareScenarios", bootstrap, "alter", GROUP, TOPIC,
                       *(f"{p}={o}" for p, o in STARTS.items()))
        assert "OK alter" in out, out
        expected = {p: (o, COUNT - o) for p, o in STARTS.items()}
        assert _offsets(java, bootstrap) == expected

        coord.kill9()
        survivors = [n for n in nodes if n is not coord]
        new_id = wait_for("another coordinator",
                           lambda: (c := coordinator(survivors[0].port, GROUP, 0)) not in (-1, coord_id) and c, 90)
        assert coordinator(survivors[1].port, GROUP, 0) == new_id
        survivor_bootstrap = ",".join(n.bootstrap for n in survivors)
        assert _offsets(java, survivor_bootstrap) == expected

        coord.start()
        # It takes its share of containers back once it has read the others' segments: a
        # partition moving meanwhile has no lag to list (-1).
        coord.wait_ready(b" started here")
        wait_for("the same offsets after the return", lambda: _offsets(java, bootstrap) == expected, 60)
    finally:
        for node in nodes:
            node.close()
