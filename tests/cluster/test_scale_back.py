"""A partition that a scale moves to another node and a later scale moves back
(issue 36; found as an auto-scaler's split and merge in CI): the node it comes back to
must read what the other node appended meanwhile before it serves the partition again.
Before, it took up its cached log where it had left it: the read-back stopped at the
old high watermark and the next produce reused the other node's offsets.

Two nodes; the partition's segment is scaled (into one of the same range) until it lies
in the other node's container, then until it is back."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tidegate.core.controller.api import SegmentRecord, qualified_segment_name
from tidegate.core.segmentstore.service import container_of
from tidegate.gateway.cluster.leadership import PartitionLeaders
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


def _scale_until(node: Node, sealed: int, where: Callable[[int], bool]) -> int:
    """Scale until the current segment is one ``where`` picks (its id)."""
    for _ in range(10):
        sealed = _scale_whole(node, sealed)
        if where(sealed):
            return sealed
    raise AssertionError("ten scales did not bring the segment where wanted")


@dataclass
class _Pair:
    """Two nodes on the shared file Tier-1 and the one-partition topic, 20 records in."""

    nodes: list[Node]
    bootstrap: str
    leader: Node
    owners: dict[int, int]
    acked: list[tuple[int, int, bytes]]

    def holder(self, seg: int) -> int:
        return self.owners[container_of(qualified_segment_name("kafka", TOPIC, seg), CONTAINERS)]


@pytest.fixture
def pair(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[_Pair]:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 2, container_count=CONTAINERS, tier1="file")
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        owners, leader_id = _zk_state(zookeeper.hosts, nodes=2)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        acked = _produce(bootstrap, TOPIC, range(0, 20))
        leader = next(n for n in nodes if n.node_id == leader_id)
        yield _Pair(nodes, bootstrap, leader, owners, acked)
    finally:
        for node in nodes:
            node.close()


def test_a_partition_scaled_away_and_back_serves_what_was_appended_meanwhile(pair: _Pair) -> None:
    home = pair.holder(0)
    away = _scale_until(pair.leader, 0, lambda seg: pair.holder(seg) != home)
    acked = pair.acked + _produce(pair.bootstrap, TOPIC, range(20, 40))
    _scale_until(pair.leader, away, lambda seg: pair.holder(seg) == home)
    acked += _produce(pair.bootstrap, TOPIC, range(40, 60))

    assert sorted(o for _, o, _ in acked) == list(range(60)), "offsets given twice"
    stored = read_back(pair.bootstrap, TOPIC, 1)
    assert sorted(stored) == sorted(acked)


def test_a_node_back_with_an_empty_disk_reads_a_partition_s_segments_in_order(pair: _Pair) -> None:
    """The partition's first segment lies in one node's container, its current one in the
    other's; that node is killed, its disk emptied, and it is back before its session
    ended, so it keeps its containers and indexes them first. Before, the first segment,
    read afterwards in the background, was taken for appends reported failed and left out
    of its index: reads from offset 0 began at the second segment (a 50-fault campaign's
    kill9-wipe left 4,850 batches out so)."""
    away = _scale_until(pair.leader, 0, lambda seg: pair.holder(seg) != pair.holder(0))
    acked = pair.acked + _produce(pair.bootstrap, TOPIC, range(20, 40))

    wiped = next(n for n in pair.nodes if n.node_id == pair.holder(away))
    wiped.kill9()
    shutil.rmtree(wiped.data_dir)
    wiped.start()
    wiped.wait_ready(b"other nodes' containers indexed")
    acked += _produce(pair.bootstrap, TOPIC, range(40, 60))

    stored = read_back(pair.bootstrap, TOPIC, 1)
    assert sorted(stored) == sorted(acked)
    assert b"left out" not in wiped.log_path.read_bytes()


def _in_container(cid: int, epoch: int) -> SegmentRecord:
    """A whole-range segment of ``epoch`` whose name hashes into container ``cid``."""
    seg_id = next(epoch << 32 | n for n in range(1000)
                  if container_of(qualified_segment_name("kafka", TOPIC, epoch << 32 | n), 4) == cid)
    return SegmentRecord(seg_id, 0, 0.0, 1.0)


async def test_the_rule_a_segment_led_elsewhere_between_means_catching_up() -> None:
    """This node (1) runs containers 0 and 1; node 2 runs 2. The partition's segments:
    epoch 0 in container 0, epoch 1 in container 2 (node 2's), epoch 2 in container 1."""
    lineage = [_in_container(0, 0), _in_container(2, 1), _in_container(1, 2)]
    names = [qualified_segment_name("kafka", TOPIC, s.id) for s in lineage]
    history: list[SegmentRecord] = lineage[:1]

    async def all_segments(topic: str) -> list[SegmentRecord]:
        return list(history)

    topics = SimpleNamespace(all_segments=all_segments, segment_name=lambda t, i: qualified_segment_name("kafka", t, i))
    owners = {0: 1, 1: 1, 2: 2, 3: 2}
    node = SimpleNamespace(node_id=1, members={1: {}, 2: {}}, running={0, 1}, interrupted=set(),
                           containers=SimpleNamespace(owners=owners, version=1), session=None)
    leaders = PartitionLeaders(SimpleNamespace(topics=topics, controller=None, logs=None), node,
                               SimpleNamespace(container_count=4, owner=lambda n: None))
    leaders.ready, leaders._ready_at = {0, 1}, {0: 1, 1: 1}
    leaders._generation = 1
    key = (TOPIC, 0)
    leaders.leading[key] = (names[0], 1)
    assert await leaders._still_led(TOPIC, 0, names[0])

    # Scaled straight into container 1, ready here since before: led throughout.
    history[:] = [lineage[0], lineage[2]]
    assert await leaders._still_led(TOPIC, 0, names[2])
    assert leaders.leading[key] == (names[2], 1)

    # Through container 2 (node 2 appended there) and back: caught up first.
    leaders.leading[key] = (names[0], 1)
    history[:] = lineage
    assert not await leaders._still_led(TOPIC, 0, names[2])
    assert key not in leaders.leading

    # Through container 2 while it ran here from before: still led throughout.
    leaders.ready, leaders._ready_at = {0, 1, 2}, {0: 1, 1: 1, 2: 1}
    leaders.leading[key] = (names[0], 1)
    assert await leaders._still_led(TOPIC, 0, names[2])

    # Container 2 came here only after the last catch-up: its appends may be another node's.
    leaders._ready_at[2] = 2
    leaders.leading[key] = (names[0], 1)
    assert not await leaders._still_led(TOPIC, 0, names[2])
    seg: Any = lineage[2]
    leaders.leading[key] = (names[0], 1)
    assert not await leaders.still_leads_segment(TOPIC, 0, seg)
