"""A node that gains containers serves them once their own segments are indexed: it does
not first index what other nodes' containers appended (a failover once waited seconds
for that), which is indexed afterwards, in the background, and again every while."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

import pytest
from tidegate.core.segmentstore.service import container_of
from tidegate.gateway.cluster import leadership
from tidegate.gateway.cluster.leadership import PartitionLeaders

COUNT = 4


def _segment_in(container: int) -> str:
    return next(name for i in range(1000)
                if container_of(name := f"kafka/t/{i}.#epoch.0", COUNT) == container)


class _Logs:
    """Rebuilds that record which segments they read; reading container 3 (another
    node's, moving) blocks until released."""

    def __init__(self) -> None:
        self.read: list[int] = []
        self.release = asyncio.Event()

    async def rebuild_where(self, pick: Callable[[str], bool], *, strict: bool = False,
                            topics: Iterable[str] | None = None,
                            down: set[int] | None = None) -> int:
        count = 0
        for cid in range(COUNT):
            if pick(_segment_in(cid)):
                if cid == 3:
                    await self.release.wait()
                self.read.append(cid)
                count += 1
        return count

    def retire_where(self, drop: Callable[[str, int], bool]) -> int:
        return 0

    def cached(self, topic: str, partition: int) -> Any:
        return None


async def test_gained_containers_are_served_before_other_nodes_are_indexed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leadership, "INDEX_OTHERS_S", 0.05)
    logs = _Logs()
    ctx = SimpleNamespace(topics=SimpleNamespace(names=lambda: ["t"]), controller=None, logs=logs)
    # This node (1) runs 0 and has just started 1; node 2 runs 2 and 3.
    owners = {0: 1, 1: 1, 2: 2, 3: 2}
    node = SimpleNamespace(node_id=1, members={1: {}, 2: {}}, running={0, 1}, interrupted=set(),
                           containers=SimpleNamespace(owners=owners, version=5), session=None)
    leaders = PartitionLeaders(ctx, node, SimpleNamespace(container_count=COUNT))
    try:
        await asyncio.wait_for(leaders.on_owned({1}, set()), 10)
        assert leaders.ready == {1}
        assert logs.read[0] == 1 and 3 not in logs.read  # container 3 not waited for
        logs.release.set()
        for _ in range(200):  # indexed in the background, and again later
            if logs.read.count(3) >= 2:
                break
            await asyncio.sleep(0.05)
        assert logs.read.count(2) >= 2 and logs.read.count(3) >= 2, logs.read
        assert 0 not in logs.read  # kept here throughout: indexed as appended
    finally:
        leaders.close()
