"""A node that stood still (SIGSTOP, or its event loop held up) as long as its ZooKeeper
session lasts gives up every container in the loop's first round after waking, before
it handles any request read meanwhile. kazoo only reports the session lost once it has
reconnected, and in a fault campaign a thawed node served stale answers for the 0.4 s
in between."""

from __future__ import annotations

import asyncio
import time

from tidegate.core.cluster.node import ClusterNode
from tidegate.core.cluster.zookeeper import ClusterSession

from tests.cluster.zk import ZooKeeperServer

SESSION_S = 2.0


class Containers:
    """``LocalContainers`` that start and stop at once."""

    def __init__(self) -> None:
        self.running: set[int] = set()
        self.starts = 0

    async def start_container(self, cid: int) -> None:
        self.starts += 1
        self.running.add(cid)

    async def stop_container(self, cid: int) -> None:
        self.running.discard(cid)

    def plog_server_gone(self, server_id: str, reason: str) -> None:
        pass

    def plog_server_back(self, server_id: str) -> None:
        pass

    def release(self, cid: int) -> None:
        pass


async def _until(check, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_node_that_stood_still_past_its_session_gives_up_its_containers_at_once(
    zookeeper: ZooKeeperServer,
) -> None:
    local = Containers()
    node = ClusterNode(
        ClusterSession(zookeeper.hosts + "/stall", 1, session_timeout_s=SESSION_S), local,
        node_id=1, container_count=2, info={"kafka": "127.0.0.1:1"}, start_retry_ms=50,
    )
    interrupted: list[set[int]] = []
    node.on_interrupted = interrupted.append
    await node.start()
    try:
        await _until(lambda: node.running == {0, 1}, 20)
        time.sleep(SESSION_S + 0.5)  # the whole loop stands still, as under SIGSTOP
        await asyncio.sleep(0.01)  # one round: timers due during the stall run first
        assert interrupted == [{0, 1}], "the node went on serving after standing still"
        # What the map says is this node's is started afresh (a new session).
        await _until(lambda: node.running == {0, 1} and local.starts >= 4, 30)
    finally:
        await node.close()


async def test_a_short_stall_keeps_the_containers(zookeeper: ZooKeeperServer) -> None:
    local = Containers()
    node = ClusterNode(
        ClusterSession(zookeeper.hosts + "/short", 1, session_timeout_s=SESSION_S), local,
        node_id=1, container_count=2, info={"kafka": "127.0.0.1:1"},
    )
    interrupted: list[set[int]] = []
    node.on_interrupted = interrupted.append
    await node.start()
    try:
        await _until(lambda: node.running == {0, 1}, 20)
        time.sleep(SESSION_S / 3)
        await asyncio.sleep(0.5)
        assert interrupted == [] and local.starts == 2
    finally:
        await node.close()
