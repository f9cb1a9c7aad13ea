"""``SegmentService`` in a cluster: events appended through one node land on their
segments' owners, and another node reads them back (reads routed to the owners)."""

from __future__ import annotations

from pathlib import Path

import grpc
from tidegate.protocol import events
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

from tests.cluster.nodes import start_nodes
from tests.cluster.zk import ZooKeeperServer


def test_append_on_one_node_read_on_another(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=6)
    try:
        pairs = [(f"k{i % 9}", f"e{i}".encode()) for i in range(90)]
        with grpc.insecure_channel(nodes[0].grpc) as channel:
            ctl = pb2_grpc.ControllerServiceStub(channel)
            ctl.CreateScope(pb2.ScopeRequest(scope="iot"), timeout=30)
            ctl.CreateStream(pb2.CreateStreamRequest(
                scope="iot", stream="s", config=pb2.StreamConfig(scaling=pb2.ScalingPolicy(min_segments=6))),
                timeout=30)
        with grpc.insecure_channel(nodes[1].grpc) as channel:
            seg = pb2_grpc.SegmentServiceStub(channel)
            for i in range(0, len(pairs), 10):
                seg.AppendEvents(pb2.AppendEventsRequest(scope="iot", stream="s", events=[
                    pb2.Event(routing_key=k, data=d) for k, d in pairs[i:i + 10]]), timeout=30)
        got: list[tuple[str | None, bytes]] = []
        with grpc.insecure_channel(nodes[2].grpc) as channel:
            seg = pb2_grpc.SegmentServiceStub(channel)
            tail = seg.GetStreamCut(pb2.StreamCutRequest(scope="iot", stream="s", position=pb2.TAIL), timeout=30)
            assert len(tail.cut.cut) == 6
            for segment_id, length in sorted(tail.cut.cut.items()):
                page = seg.ReadSegment(pb2.ReadSegmentRequest(
                    scope="iot", stream="s", segment_id=segment_id, offset=0, max_bytes=1 << 20), timeout=30)
                assert page.next_offset == length
                got += [(e.routing_key, e.data) for e in events.parse(page.data, 0)]
        assert sorted(got) == sorted(pairs)
        for key in {k for k, _ in pairs}:
            assert [d for k, d in got if k == key] == [d for k, d in pairs if k == key]
    finally:
        for node in nodes:
            node.close()
