"""Auto-scaling in cluster mode (issue 36, item 7): the controller leader's auto-scaler
reads the rates of segments other nodes own through their segment-store servers. A
topic whose one segment lives on a node that is not the leader, loaded above its target,
is split within a bounded time (the leader's auto-scaler read the owner's rate: before,
it read 0 and never split); every record reads back once, offsets dense. The owner's and
the leader's ``/metrics`` rates are sampled while the load climbs and reported when the
split does not come (under FAST_POLICIES it can come before either /metrics refreshed)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from tidegate.core.controller.api import qualified_segment_name
from tidegate.core.segmentstore.service import container_of

from tests.clients.autoscale_load import (
    FAST_POLICIES,
    create_topic,
    epochs,
    metrics,
    produce,
    read_back,
)
from tests.cluster.nodes import Node, start_together
from tests.cluster.test_leader_scale import CONTAINERS, _zk_state
from tests.cluster.zk import ZooKeeperServer
from tests.conftest import free_port

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 4
TARGET = 20  # KB/s per segment
HOT = 65  # records/s of 1000 bytes, to each of partitions 0 and 1: about 130 KB/s


def _segment_rate(node: Node, topic: str) -> float:
    """The first current segment's bytes/s in ``node``'s ``/metrics``."""
    for (name, labels), value in metrics(node).items():
        if name == "tidegate_segment_bytes_per_second" and ("topic", topic) in labels:
            return value
    return 0.0


def test_hot_segment_owned_by_a_follower_is_split(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    config = tmp_path / "tidegate.toml"
    config.write_text(FAST_POLICIES)
    nodes = [Node(tmp_path, i + 1, zookeeper.hosts, CONTAINERS) for i in range(3)]
    for node in nodes:
        node.rest_port = free_port()
        node.extra_args += ["--config", str(config), "--rest", f"127.0.0.1:{node.rest_port}"]
    start_together(nodes)
    try:
        owners, leader_id = _zk_state(zookeeper.hosts)
        topic = next(
            t for t in (f"hot-{i}" for i in range(1000))
            if owners[container_of(qualified_segment_name("kafka", t, 0), CONTAINERS)] != leader_id
        )
        owner_id = owners[container_of(qualified_segment_name("kafka", topic, 0), CONTAINERS)]
        owner = next(n for n in nodes if n.node_id == owner_id)
        leader = next(n for n in nodes if n.node_id == leader_id)
        bootstrap = ",".join(n.bootstrap for n in nodes)
        create_topic(bootstrap, topic, PARTITIONS, {
            "tidegate.scaling.type": "BY_RATE_IN_KBYTES_PER_SEC",
            "tidegate.scaling.target.rate": str(TARGET),
            "tidegate.scaling.scale.factor": "2",
            "tidegate.scaling.min.segments": "1",
        })
        assert epochs(leader, topic) == [[(0.0, 1.0)]]

        seen = {"owner": 0.0, "leader": 0.0}

        def split() -> bool:
            if len(epochs(leader, topic)) > 1:
                return True
            seen["owner"] = max(seen["owner"], _segment_rate(owner, topic))
            seen["leader"] = max(seen["leader"], _segment_rate(leader, topic))
            return False

        started = time.monotonic()
        sent = produce(bootstrap, topic, {0: HOT, 1: HOT}, seconds=60, until=split)
        took_s = time.monotonic() - started
        history = epochs(leader, topic)
        assert len(history) > 1, (
            f"not split in {took_s:.0f} s; rates seen: {seen}\n{leader.tail()}"
        )
        assert history[0] == [(0.0, 1.0)] and len(history[1]) == 2, history
        read_back(bootstrap, topic, Counter({p: sent[p] for p in range(PARTITIONS)}))
    finally:
        for node in nodes:
            node.close()
