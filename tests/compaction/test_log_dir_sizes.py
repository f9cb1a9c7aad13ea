"""DescribeLogDirs counts a compacted partition's clean segment beside its stream's
segments."""

from __future__ import annotations

import time

from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse
from kafka.protocol.consumer import FetchResponse

from tests.compaction.test_cleaner import cleaner
from tests.compaction.test_gaps_and_faults import _fill
from tests.gateway.conftest import Node
from tests.gateway.test_fetch_sessions import _fetch, _parts


async def _size(node: Node, topic: str) -> int:
    c = await node.client()
    resp = await c.call(DescribeLogDirsRequest(topics=None), 4, DescribeLogDirsResponse)
    await c.close()
    return sum(p.partition_size for r in resp.results for t in r.topics if t.name == topic
               for p in t.partitions)


async def test_clean_segment_counted(node: Node) -> None:
    await _fill(node, "lds")
    before = await _size(node, "lds")
    now = int(time.time() * 1000)
    assert await cleaner(node, lambda: now + 1000).run_once() == 1
    c = await node.client()
    resp = await c.call(_fetch(0, -1, [_parts("lds", {0: 0})]), 12, FetchResponse)
    await c.close()
    readable = len(resp.responses[0].partitions[0].records)
    after = await _size(node, "lds")
    # The clean segment is counted beside the stream's segments, not yet truncated.
    assert after > before and after >= readable
