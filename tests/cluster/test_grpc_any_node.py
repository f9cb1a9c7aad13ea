"""gRPC writes sent straight to a follower run on the controller leader: the follower
forwards them (``LeaderForwarding``), as it does the Kafka gateway's and REST's."""

from __future__ import annotations

from pathlib import Path

import grpc
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

from tests.cluster.nodes import start_nodes
from tests.cluster.test_admin_any_node import _leader_id
from tests.cluster.zk import ZooKeeperServer


def test_grpc_writes_to_a_follower_run_on_the_leader(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=6)
    try:
        leader_id = _leader_id(zookeeper.hosts)
        leader = next(n for n in nodes if n.node_id == leader_id)
        follower = next(n for n in nodes if n.node_id != leader_id)
        with grpc.insecure_channel(follower.grpc) as channel:
            stub = pb2_grpc.ControllerServiceStub(channel)
            stub.CreateScope(pb2.ScopeRequest(scope="plain"), timeout=30)
            stub.CreateStream(pb2.CreateStreamRequest(
                scope="plain", stream="s", config=pb2.StreamConfig(),
            ), timeout=30)
            scaled = stub.Scale(pb2.ScaleRequest(
                scope="plain", stream="s", sealed_segments=[0],
                new_ranges=[pb2.KeyRange(start=0.0, end=0.5), pb2.KeyRange(start=0.5, end=1.0)],
            ), timeout=30)
            assert len(scaled.segments) == 2
        with grpc.insecure_channel(leader.grpc) as channel:
            current = pb2_grpc.ControllerServiceStub(channel).GetCurrentSegments(
                pb2.StreamRequest(scope="plain", stream="s"), timeout=10
            )
            assert len(current.segments) == 2
        ran = b"scaled plain/s (manual)"
        assert ran in leader.log_path.read_bytes(), "the leader did not run the scale"
        assert ran not in follower.log_path.read_bytes(), "the follower ran the scale itself"
    finally:
        for node in nodes:
            node.close()
