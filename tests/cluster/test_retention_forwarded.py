"""Topic configs set through a follower reach the stream whole: AlterConfigs with both
``retention.ms`` and ``retention.bytes`` is forwarded to the controller leader over gRPC,
and the size bound travels with the time limit (it was dropped on the way)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kazoo.client import KazooClient
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

from tests.cluster.clients import QUIET
from tests.cluster.nodes import start_nodes
from tests.cluster.zk import ZooKeeperServer


def _leader_id(hosts: str) -> int:
    zk = KazooClient(hosts=hosts)
    zk.start(10)
    try:
        return int(json.loads(zk.get("/controller/leader")[0])["node"])
    finally:
        zk.stop()
        zk.close()


def test_retention_bytes_set_through_a_follower(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 2, container_count=4, tier1="file")
    try:
        leader = _leader_id(zookeeper.hosts)
        follower = next(n for n in nodes if n.node_id != leader)
        admin = AdminClient({"bootstrap.servers": follower.bootstrap, **QUIET})
        configs = {"retention.ms": "86400000", "retention.bytes": "1048576"}
        admin.create_topics([NewTopic("kept", 1, 1, config=configs)])["kept"].result(30)
        resource = ConfigResource("topic", "kept", incremental_configs=[
            ConfigEntry("retention.ms", "3600000",
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        deadline = time.monotonic() + 60
        with grpc.insecure_channel(nodes[0].grpc) as channel:
            stub = pb2_grpc.ControllerServiceStub(channel)
            while True:
                retention = stub.GetStream(pb2.StreamRequest(scope="kafka", stream="kept")).config.retention
                if retention.value == 3_600_000 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        assert (retention.type, retention.value) == (pb2.TIME, 3_600_000)
        assert retention.HasField("bytes_max") and retention.bytes_max == 1_048_576
    finally:
        for node in nodes:
            node.close()
