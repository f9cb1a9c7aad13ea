"""The leader moves no running container to a node that is still starting: moved to a
node back from a ``kill -9`` in the middle of its start-up, the container's partitions
waited on that start-up (13 s in a fault campaign), a second stop right after the
failover. Containers whose owner died go to whoever is live, starting or not."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.client import KazooClient
from tidegate.core.cluster import node as node_module
from tidegate.core.cluster.node import ClusterNode
from tidegate.core.cluster.zookeeper import STARTING, ClusterSession

from tests.cluster.local import Containers, until
from tests.cluster.zk import ZooKeeperServer

SESSION_S = 2.0


async def test_a_starting_node_gets_its_share_once_it_serves(zookeeper: ZooKeeperServer) -> None:
    sessions = [ClusterSession(zookeeper.hosts + "/start", n, session_timeout_s=SESSION_S) for n in (1, 2)]
    first = ClusterNode(sessions[0], Containers(), node_id=1, container_count=4,
                        info={"kafka": "127.0.0.1:1"})
    info: dict[str, object] = {STARTING: True}
    second = ClusterNode(sessions[1], Containers(), node_id=2, container_count=4, info=info)
    await first.start()
    try:
        await until(lambda: first.running == {0, 1, 2, 3}, 20)
        await second.start()
        await until(lambda: 2 in first.members, 20)
        await asyncio.sleep(3 * SESSION_S)  # the leader had its chances to move some
        assert second.owned() == set() and first.running == {0, 1, 2, 3}
        info.pop(STARTING)
        info["kafka"] = "127.0.0.1:2"
        await sessions[1].register(info)  # it serves now (the gateway's ``announce``)
        await until(lambda: len(second.owned()) == 2 and len(second.running) == 2, 20)
    finally:
        await second.close()
        await first.close()


async def test_a_starting_node_takes_the_containers_of_a_dead_one(zookeeper: ZooKeeperServer) -> None:
    sessions = [ClusterSession(zookeeper.hosts + "/orphans", n, session_timeout_s=SESSION_S) for n in (1, 2)]
    first = ClusterNode(sessions[0], Containers(), node_id=1, container_count=4,
                        info={"kafka": "127.0.0.1:1"})
    second = ClusterNode(sessions[1], Containers(), node_id=2, container_count=4,
                         info={STARTING: True})
    await first.start()
    try:
        await until(lambda: first.running == {0, 1, 2, 3}, 20)
        await second.start()
        await first.close()  # its session ends: its containers have no live owner
        await until(lambda: second.running == {0, 1, 2, 3}, 30)
    finally:
        await second.close()



async def test_a_node_back_from_a_lost_session_waits_before_it_takes_containers(
        zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node back from a freeze registers again at once, still busy with what it gave
    up: containers moved back to it then stopped a second time in a row."""
    monkeypatch.setattr(node_module, "REJOIN_DELAY_S", 4.0)
    sessions = [ClusterSession(zookeeper.hosts + "/rejoin", n, session_timeout_s=SESSION_S) for n in (1, 2)]
    first = ClusterNode(sessions[0], Containers(), node_id=1, container_count=4,
                        info={"kafka": "127.0.0.1:1"})
    second = ClusterNode(sessions[1], Containers(), node_id=2, container_count=4,
                         info={"kafka": "127.0.0.1:2"})
    await first.start()
    await second.start()
    try:
        await until(lambda: len(second.running) == 2, 20)
        # Expire the second node's session from outside (a second client on it).
        intruder = KazooClient(hosts=zookeeper.hosts + "/rejoin", client_id=sessions[1]._client.client_id)
        await asyncio.to_thread(intruder.start, 10)
        await asyncio.to_thread(intruder.stop)
        await asyncio.to_thread(intruder.close)
        await until(lambda: first.running == {0, 1, 2, 3}, 30)
        await until(lambda: first.members.get(2, {}).get(STARTING), 30)
        await asyncio.sleep(1.5)
        assert second.owned() == set()
        await until(lambda: len(second.owned()) == 2 and len(second.running) == 2, 30)
        assert not (await sessions[0].members())[2].get(STARTING)
    finally:
        await second.close()
        await first.close()
