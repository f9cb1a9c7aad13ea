"""``ClusterSession`` against a real ZooKeeper: membership, leader hand-over and the
container map's compare-and-set; ``tidegate serve`` refusing to join clearly."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tidegate.core.cluster.zookeeper import ClusterSession, MapVersionError

from tests.cluster.nodes import Node, start_nodes
from tests.cluster.zk import ZooKeeperServer


async def _until(check, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_members_leader_and_map(zookeeper: ZooKeeperServer) -> None:
    a = ClusterSession(zookeeper.hosts + "/cluster-a", 1)
    b = ClusterSession(zookeeper.hosts + "/cluster-a", 2)
    await a.start()
    await b.start()
    try:
        seen: list[set[int]] = []
        b.watch_members(lambda members: seen.append(set(members)))
        await a.register({"kafka": "127.0.0.1:1"})
        await b.register({"kafka": "127.0.0.1:2"})
        await _until(lambda: bool(seen) and seen[-1] == {1, 2})
        assert (await b.members())[1] == {"kafka": "127.0.0.1:1"}

        leading: dict[int, list[bool]] = {1: [], 2: []}
        await a.campaign(leading[1].append)
        await _until(lambda: leading[1] == [True])
        await b.campaign(leading[2].append)
        await _until(lambda: b.leader_id == 1)
        assert leading[2] == [] and await b.leader() == 1

        maps: list[dict[int, int]] = []
        b.watch_map(lambda owners, version: maps.append(owners))
        assert await a.read_map() == ({}, -1)
        version = await a.write_map({0: 1, 1: 2}, -1)
        with pytest.raises(MapVersionError):
            await b.write_map({0: 2, 1: 2}, -1)
        with pytest.raises(MapVersionError):
            await b.write_map({0: 2, 1: 2}, version + 1)
        await _until(lambda: bool(maps) and maps[-1] == {0: 1, 1: 2})

        await a.close()  # the leader's session ends: its znodes go, b takes over
        await _until(lambda: leading[2] == [True])
        assert await b.leader() == 2
        await _until(lambda: seen[-1] == {2})
        owners, version = await b.read_map()
        assert owners == {0: 1, 1: 2}
        assert await b.write_map({0: 2, 1: 2}, version) == version + 1
    finally:
        await a.close()
        await b.close()


def test_serve_refuses_a_container_count_the_cluster_does_not_have(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    (first,) = start_nodes(tmp_path, zookeeper.hosts, 1, container_count=4, tier1="file")
    try:
        odd = Node(tmp_path, 2, zookeeper.hosts, container_count=6, tier1="file")
        with pytest.raises(AssertionError, match="exited with 1") as failure:
            odd.start()
        assert "--container-count must match" in str(failure.value)
        odd.close()
    finally:
        first.close()
