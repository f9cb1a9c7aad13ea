"""A node that stood still (SIGSTOP) as long as its ZooKeeper session lasts gives up
every container in the loop's first round after waking, before
it handles any request read meanwhile. kazoo only reports the session lost once it has
reconnected, and in a fault campaign a thawed node served stale answers for the 0.4 s
in between."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import pytest
from kazoo.client import KazooClient
from tidegate.core.cluster.node import ClusterNode
from tidegate.core.cluster.zookeeper import ClusterSession

from tests.cluster.local import Containers, until
from tests.cluster.zk import ZooKeeperServer

SESSION_S = 2.0


def _freeze_this_process(seconds: float) -> subprocess.Popen[bytes]:
    """SIGSTOP of this very process (every thread), thawed by a child after ``seconds``."""
    pid = os.getpid()
    thaw = subprocess.Popen(["sh", "-c", f"sleep {seconds}; kill -CONT {pid}; sleep 1; kill -CONT {pid}"])
    os.kill(pid, signal.SIGSTOP)
    return thaw


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
        await until(lambda: node.running == {0, 1}, 20)
        thaw = _freeze_this_process(SESSION_S + 0.5)
        await asyncio.sleep(0.01)  # one round: timers due during the stall run first
        assert interrupted == [{0, 1}], "the node went on serving after standing still"
        await asyncio.to_thread(thaw.wait, 10)
        # What the map says is this node's is started afresh (a new session).
        await until(lambda: node.running == {0, 1} and local.starts >= 4, 30)
    finally:
        await node.close()


@pytest.mark.parametrize("held_s", [SESSION_S / 3, SESSION_S + 0.5], ids=["short", "past-session"])
async def test_a_loop_held_up_while_the_process_runs_keeps_the_containers(
    zookeeper: ZooKeeperServer, held_s: float,
) -> None:
    """The event loop alone held up (a long synchronous step), briefly or past the
    session: kazoo's own thread keeps the session, so nothing is given up."""
    local = Containers()
    node = ClusterNode(
        ClusterSession(zookeeper.hosts + "/held", 1, session_timeout_s=SESSION_S), local,
        node_id=1, container_count=2, info={"kafka": "127.0.0.1:1"},
    )
    interrupted: list[set[int]] = []
    node.on_interrupted = interrupted.append
    await node.start()
    try:
        await until(lambda: node.running == {0, 1}, 20)
        time.sleep(held_s)
        await asyncio.sleep(0.5)
        assert interrupted == [] and local.starts == 2
    finally:
        await node.close()


async def test_an_elected_node_rebalances_while_its_last_stop_as_leader_hangs(
    zookeeper: ZooKeeperServer,
) -> None:
    """Leadership is followed at once, not once the controller's previous start or stop
    (``on_leadership``) returns: a node whose stop as leader hung, then elected again,
    never moved the containers of a node that had died (the map waited on it for good)."""
    sessions = [ClusterSession(zookeeper.hosts + "/elect", n, session_timeout_s=SESSION_S) for n in (1, 2)]
    first = ClusterNode(sessions[0], Containers(), node_id=1, container_count=4,
                        info={"kafka": "127.0.0.1:1"})
    told: list[bool] = []

    async def hangs_on_stop(leading: bool) -> None:
        told.append(leading)
        if not leading:
            await asyncio.Event().wait()  # a controller close that never ends

    first.on_leadership = hangs_on_stop
    await first.start()
    second: ClusterNode | None = None
    try:
        await until(lambda: told == [True] and first.running == {0, 1, 2, 3}, 20)
        # Expire the first node's session from outside (a second client on its session):
        # it gives leadership up (the stop hangs), then wins it back with a new session.
        client_id = sessions[0]._client.client_id
        intruder = KazooClient(hosts=zookeeper.hosts + "/elect", client_id=client_id)
        await asyncio.to_thread(intruder.start, 10)
        await asyncio.to_thread(intruder.stop)
        await asyncio.to_thread(intruder.close)
        await until(lambda: told == [True, False] and sessions[0].is_leader, 30)
        second = ClusterNode(sessions[1], Containers(), node_id=2, container_count=4,
                             info={"kafka": "127.0.0.1:2"})
        await second.start()
        # The leader gives the newcomer its share (before: no rebalance ever again).
        await until(lambda: len(second.owned()) == 2, 30)
    finally:
        if second is not None:
            await second.close()
        await asyncio.wait_for(first.close(), 30)
