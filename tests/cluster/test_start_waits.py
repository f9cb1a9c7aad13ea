"""A cluster node started before its peers (or before ZooKeeper) waits for them as long
as it takes (issue 34, item 3): it keeps running, says every so often what it waits
for, answers ApiVersions and Metadata, ``/health`` answers 503 with the reason, a
Produce gets a retriable error; once the peers arrive it becomes ready by itself and a
producer's records are acknowledged and read back. Real processes, started apart as an
orchestrator may start them."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from tidegate.protocol.errors import ErrorCode

from tests.clients.requests import record_batch
from tests.cluster.clients import QUIET, read_back
from tests.cluster.nodes import Node, start_nodes
from tests.cluster.zk import ZooKeeperServer
from tests.conftest import free_port
from tests.gateway.conftest import RawClient

#: Each test leaves a node alone this long, then starts its peers: more than the default.
pytestmark = pytest.mark.timeout(480)
#: Longer than any retry limit start-up had (its container map waited 30 s at most).
ALONE_S = 45.0
WAITING = b"tidegate.gateway.waiting: waiting for "


def _health(port: int) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def _kafka_answers(port: int) -> tuple[int, Any, int]:
    """ApiVersions' error, Metadata for topic ``t`` and a Produce's error, from one node."""
    client = await RawClient.connect(port)
    try:
        versions = await client.call(ApiVersionsRequest(), 3, ApiVersionsResponse)
        md = await client.call(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                            allow_auto_topic_creation=True), 9, MetadataResponse)
        P = ProduceRequest.TopicProduceData
        produced = await client.call(ProduceRequest(
            transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[P(
                name="t", partition_data=[P.PartitionProduceData(
                    index=0, records=record_batch([b"early"]))])],
        ), 9, ProduceResponse)
        error = produced.responses[0].partition_responses[0].error_code
        return int(versions.error_code), md, int(error)
    finally:
        await client.close()


def _log(node: Node) -> str:
    return node.log_path.read_text(errors="replace")


def _wait_alone(node: Node, rest_port: int, what: str) -> None:
    """``ALONE_S`` of the node alone: it lives, answers as a starting node, logs a
    waiting line every so often and no traceback."""
    node.wait_ready(WAITING)
    api_error, md, produce_error = asyncio.run(_kafka_answers(node.port))
    assert api_error == 0
    assert [b.node_id for b in md.brokers] == [node.node_id], md
    assert [(t.name, t.error_code) for t in md.topics] == [("t", ErrorCode.LEADER_NOT_AVAILABLE)]
    assert produce_error == ErrorCode.NOT_LEADER_OR_FOLLOWER  # retriable: the client retries
    status, body = _health(rest_port)
    assert status == 503 and body["status"] == "starting", body
    assert what in body["waiting_for"], body
    deadline = time.monotonic() + ALONE_S
    while time.monotonic() < deadline:
        assert node.proc is not None and node.proc.poll() is None, node.tail()
        time.sleep(0.5)
    text = _log(node)
    assert "Traceback" not in text, node.tail()
    waiting = [line for line in text.splitlines() if WAITING.decode() in line]
    # One line every so often: more than one in the time, not one per retry.
    assert 2 <= len(waiting) <= ALONE_S / 10 + 2, waiting
    assert "tidegate ready" not in text


def _ready_and_serving(nodes: list[Node], rest_port: int) -> None:
    for node in nodes:
        node.wait_ready()
    status, body = _health(rest_port)
    assert status == 200 and body == {"status": "ready"}, body
    bootstrap = ",".join(n.bootstrap for n in nodes)
    acked: list[tuple[int, int, bytes]] = []
    producer = Producer({"bootstrap.servers": nodes[0].bootstrap, "acks": "all",
                         "enable.idempotence": True, **QUIET})
    for i in range(40):
        producer.produce("later", value=b"%d" % i, partition=0, on_delivery=lambda err, msg:
                         acked.append((msg.partition(), msg.offset(), msg.value()))
                         if err is None else None)
    assert producer.flush(60) == 0 and len(acked) == 40
    assert sorted(read_back(bootstrap, "later", 1)) == sorted(acked)


def test_a_node_started_before_its_peers_waits_for_them(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    rest_port = free_port()
    first = Node(tmp_path, 1, zookeeper.hosts + "/apart", 4,
                 extra_args=("--rest", f"127.0.0.1:{rest_port}"))
    nodes = [first] + [Node(tmp_path, i, zookeeper.hosts + "/apart", 4) for i in (2, 3)]
    try:
        first.spawn()
        _wait_alone(first, rest_port, "more plog server")
        for node in nodes[1:]:
            node.spawn()
        _ready_and_serving(nodes, rest_port)
    finally:
        for node in nodes:
            node.close()


def test_a_node_started_before_zookeeper_waits_for_it(tmp_path: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zk")  # its port chosen, not started yet
    rest_port = free_port()
    nodes = [Node(tmp_path, i, zookeeper.hosts, 4, tier1="file",
                  extra_args=("--rest", f"127.0.0.1:{rest_port}") if i == 1 else ())
             for i in (1, 2)]
    try:
        nodes[0].spawn()
        _wait_alone(nodes[0], rest_port, f"ZooKeeper at {zookeeper.hosts}")
        zookeeper.start()
        nodes[1].spawn()
        _ready_and_serving(nodes, rest_port)
        assert re.search(r"ZooKeeper at \S+ done after \d+ s of waiting", _log(nodes[0]))
    finally:
        for node in nodes:
            node.close()
        zookeeper.close()


def _produce_all(bootstrap: str, topic: str, partitions: int, values: range) -> list[tuple[int, int, bytes]]:
    acked: list[tuple[int, int, bytes]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 120_000, **QUIET})
    for i in values:
        producer.produce(topic, value=b"%d" % i, partition=i % partitions, on_delivery=lambda err, msg:
                         acked.append((msg.partition(), msg.offset(), msg.value()))
                         if err is None else None)
    assert producer.flush(150) == 0 and len(acked) == len(values)
    return acked


def test_a_node_restarted_while_another_is_down_serves(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    """Issue 36: node 3 killed, node 1 restarted meanwhile: node 1 starts (the offset
    index rebuild does not stop on node 3's containers), every partition is served
    again once they moved, and node 3 joins back."""
    partitions = 6
    nodes = start_nodes(tmp_path, zookeeper.hosts + "/restart", 3, container_count=6)
    try:
        admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap, **QUIET})
        admin.create_topics([NewTopic("kept", partitions, 1)])["kept"].result(30)
        everyone = ",".join(n.bootstrap for n in nodes)
        acked = _produce_all(everyone, "kept", partitions, range(0, 300))
        nodes[2].kill9()
        assert nodes[0].stop() == 0, nodes[0].tail()
        nodes[0].start()
        assert "Traceback" not in _log(nodes[0])
        survivors = f"{nodes[0].bootstrap},{nodes[1].bootstrap}"
        acked += _produce_all(survivors, "kept", partitions, range(300, 600))
        nodes[2].start()
        acked += _produce_all(everyone, "kept", partitions, range(600, 900))
        stored = read_back(everyone, "kept", partitions)
        assert sorted(stored) == sorted(acked)
        for p in range(partitions):
            assert [o for q, o, _ in sorted(stored) if q == p] == list(range(150))
    finally:
        for node in nodes:
            node.close()


def test_sigterm_stops_a_waiting_node(tmp_path: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zk")  # never started: the node waits for it
    node = Node(tmp_path, 1, zookeeper.hosts, 4, tier1="file")
    try:
        node.spawn()
        node.wait_ready(WAITING)
        assert node.stop() == 0, node.tail()
        text = _log(node)
        assert "tidegate stopping before it was ready (waiting for ZooKeeper at" in text
        assert "tidegate stopped" in text and "Traceback" not in text, node.tail()
    finally:
        node.close()
