"""A container start that cannot finish (its recovery stuck, as in issue 26) is given
up after ``start_timeout_ms`` with a clear log line and started again, never left
hanging: ``ClusterNode`` over a real ZooKeeper session, with a segment store whose
first start of container 0 never returns."""

from __future__ import annotations

import asyncio
import logging

import pytest
from tidegate.core.cluster.node import ClusterNode
from tidegate.core.cluster.zookeeper import ClusterSession

from tests.cluster.local import Containers
from tests.cluster.zk import ZooKeeperServer


class FirstStartHangs(Containers):
    """Container 0's first start waits for ever (until cancelled)."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts: dict[int, int] = {}
        self.cancelled = 0

    async def start_container(self, cid: int) -> None:
        self.attempts[cid] = self.attempts.get(cid, 0) + 1
        if cid == 0 and self.attempts[cid] == 1:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        await super().start_container(cid)


async def test_a_stuck_container_start_is_given_up_and_retried(
    zookeeper: ZooKeeperServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tidegate.core.cluster.node")
    local = FirstStartHangs()
    node = ClusterNode(
        ClusterSession(zookeeper.hosts + "/bounded", 1), local, node_id=1, container_count=2,
        info={"kafka": "127.0.0.1:1"}, start_retry_ms=50, start_timeout_ms=500,
    )
    await node.start()
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while node.running != {0, 1}:
            assert asyncio.get_running_loop().time() < deadline, (node.running, local.attempts)
            await asyncio.sleep(0.05)
    finally:
        await node.close()
    assert local.attempts[0] == 2 and local.cancelled == 1
    assert local.running == {0, 1}
    assert "container 0 did not start within 500 ms (its start is stuck); retrying" in caplog.text
