"""A partition that a scale moves to another node and a later scale moves back
(issue 36; found as an auto-scaler's split and merge in CI): the node it comes back to
must read what the other node appended meanwhile before it serves the partition again.
Before, it took up its cached log where it had left it: the read-back stopped at the
old high watermark and the next produce reused the other node's offsets.

Two nodes: a scale of a one-segment stream into one segment puts the successor on the
other node (``core/controller/placement.py: spreading``), so two scales bring it back."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from tidegate.core.segmentstore.service import container_of
from tidegate.protocol.controller_grpc import pb2

from tests.cluster.clients import QUIET, read_back
from tests.cluster.nodes import Node, start_nodes
from tests.cluster.test_leader_scale import CONTAINERS, _produce, _stub, _zk_state
from tests.cluster.zk import ZooKeeperServer

TOPIC = "back"


def _current(node: Node) -> int:
    segments = _stub(node).GetCurrentSegments(pb2.StreamRequest(scope="kafka", stream=TOPIC), timeout=10)
    (seg,) = segments.segments
    return int(seg.id)


def _scale_whole(node: Node, sealed: int) -> int:
    """Seal ``sealed`` into one segment of the same range; the new segment's id."""
    _stub(node).Scale(pb2.ScaleRequest(
        scope="kafka", stream=TOPIC, sealed_segments=[sealed],
        new_ranges=[pb2.KeyRange(start=0.0, end=1.0)],
    ), timeout=30)
    deadline = time.monotonic() + 30
    while (seg := _current(node)) == sealed:
        assert time.monotonic() < deadline, "the scale did not end"
        time.sleep(0.1)
    return seg


def test_a_partition_scaled_away_and_back_serves_what_was_appended_meanwhile(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 2, container_count=CONTAINERS, tier1="file")
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        owners, leader_id = _zk_state(zookeeper.hosts, nodes=2)
        leader = next(n for n in nodes if n.node_id == leader_id)

        def holder(seg: int) -> int:
            return owners[container_of(f"kafka/{TOPIC}/{seg}", CONTAINERS)]

        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        acked = _produce(bootstrap, TOPIC, range(0, 20))
        home = holder(0)

        away = _scale_whole(leader, 0)
        assert holder(away) != home, (away, owners)
        acked += _produce(bootstrap, TOPIC, range(20, 40))
        back = _scale_whole(leader, away)
        assert holder(back) == home, (back, owners)
        acked += _produce(bootstrap, TOPIC, range(40, 60))

        assert sorted(o for _, o, _ in acked) == list(range(60)), "offsets given twice"
        stored = read_back(bootstrap, TOPIC, 1)
        assert sorted(stored) == sorted(acked)
    finally:
        for node in nodes:
            node.close()
