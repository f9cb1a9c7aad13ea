"""The controller leader is ``kill -9``ed in the middle of a scale: the next leader
finishes it, and Kafka clients carry on over the new segments.

To stop the scale between its recorded start and its end, the node owning the container
of the first new segment is frozen (SIGSTOP) as the scale is sent to the leader: the
leader records the workflow and then waits on that node; it is killed there, and the
frozen node thawed."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from tidegate.core.controller.placement import spreading
from tidegate.core.segmentstore.service import container_of
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

from tests.cluster.clients import QUIET, leaders, read_back
from tests.cluster.nodes import Node, start_nodes
from tests.cluster.zk import ZooKeeperServer
from tests.controller.test_placement import Map  # the container map as the leader reads it

CONTAINERS = 6


def _zk_state(hosts: str, nodes: int = 3) -> tuple[dict[int, int], int]:
    """The container map once it spreads over all ``nodes`` (a node is ready as soon as
    every container has an owner, maybe before the map that includes it), and the leader."""
    zk = KazooClient(hosts=hosts)
    zk.start(10)
    try:
        deadline = time.monotonic() + 30
        while True:
            owners = json.loads(zk.get("/containers/map")[0])["owners"]
            if len(set(owners.values())) >= nodes or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        leader = json.loads(zk.get("/controller/leader")[0])["node"]
    finally:
        zk.stop()
        zk.close()
    return {int(c): int(n) for c, n in owners.items()}, int(leader)


def successor_numbers(owners: dict[int, int], topic: str, count: int) -> list[int]:
    """The numbers the controller gives the ``count`` successors of a one-segment topic's
    segment 0 (``core/controller/placement.py``, over the map ``owners``)."""
    return spreading(Map(owners), "kafka", topic)(1, 1, [], [0], count)


def _stub(node: Node) -> Any:
    return pb2_grpc.ControllerServiceStub(grpc.insecure_channel(node.grpc))


def _produce(bootstrap: str, topic: str, values: range) -> list[tuple[int, int, bytes]]:
    acked: list[tuple[int, int, bytes]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", **QUIET})
    for i in values:
        producer.produce(
            topic, value=str(i).encode(), partition=0,
            on_delivery=lambda err, msg: acked.append((msg.partition(), msg.offset(), msg.value()))
            if err is None else None,
        )
    assert producer.flush(60) == 0
    return acked


def _pick_topic(owners: dict[int, int], leader: int) -> tuple[str, int]:
    """A topic name whose first new segment lives on a node other than the leader, while
    its stream's metadata table and first segment do not."""
    for i in range(1000):
        topic = f"scaled-{i}"
        first = successor_numbers(owners, topic, 2)[0]
        frozen = owners[container_of(f"kafka/{topic}/{first}", CONTAINERS)]
        others = (
            f"kafka/{topic}/0", f"_system/_controller/stream/kafka/{topic}",
            "_system/_controller/scope/kafka", "_system/_controller/scopes",
        )
        if frozen != leader and all(owners[container_of(n, CONTAINERS)] != frozen for n in others):
            return topic, frozen
    raise AssertionError("no topic name fits")


def test_leader_killed_mid_scale_the_next_leader_finishes_it(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=CONTAINERS)
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        owners, leader_id = _zk_state(zookeeper.hosts)
        topic, frozen_id = _pick_topic(owners, leader_id)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        before = _produce(bootstrap, topic, range(0, 200))
        leader = next(n for n in nodes if n.node_id == leader_id)
        frozen = next(n for n in nodes if n.node_id == frozen_id)
        assert frozen.proc is not None

        os.kill(frozen.proc.pid, signal.SIGSTOP)
        answered: list[object] = []

        def scale() -> None:
            request = pb2.ScaleRequest(
                scope="kafka", stream=topic, sealed_segments=[0],
                new_ranges=[pb2.KeyRange(start=0.0, end=0.5), pb2.KeyRange(start=0.5, end=1.0)],
            )
            try:
                answered.append(_stub(leader).Scale(request, timeout=30))
            except grpc.RpcError as exc:
                answered.append(exc)

        caller = threading.Thread(target=scale, daemon=True)
        caller.start()
        time.sleep(1.5)
        assert not answered, f"the scale ended while a node it needs was frozen: {answered}"
        leader.kill9()
        os.kill(frozen.proc.pid, signal.SIGCONT)
        caller.join(35)

        survivor = next(n for n in nodes if n is not leader)
        deadline = time.monotonic() + 60
        current: list[Any] = []
        while time.monotonic() < deadline:
            try:
                current = list(_stub(survivor).GetCurrentSegments(
                    pb2.StreamRequest(scope="kafka", stream=topic), timeout=10
                ).segments)
            except grpc.RpcError:
                current = []
            if len(current) == 2:
                break
            time.sleep(0.5)
        assert len(current) == 2, f"the scale was not finished: current segments {current}"

        survivors = ",".join(n.bootstrap for n in nodes if n is not leader)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and 0 not in leaders(survivors, topic):
            time.sleep(0.2)
        after = _produce(survivors, topic, range(200, 400))
        stored = read_back(survivors, topic, 1)
        assert [o for _, o, _ in stored] == list(range(400))
        assert stored == sorted(before + after)
    finally:
        for node in nodes:
            if node.proc is not None:
                os.kill(node.proc.pid, signal.SIGCONT)
            node.close()
