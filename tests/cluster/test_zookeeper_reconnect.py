"""The replicated Tier-1's plain ZooKeeper session while kazoo reconnects (issue 26).

A node frozen past its session (SIGSTOP, as in ``test_tier2_fence.py``) finds kazoo
reconnecting when it is thawed. Every plog coordinator call starts with
``ZooKeeper.start``; kazoo's own ``start`` on a client that is reconnecting joins its
running connection routine, which never ends, so a container's Tier-1 log never opened
and the container stayed "starting" for good. Now such a call waits for kazoo's
reconnection, at most ``timeout_s``, then fails with a clear error (the container start
is retried), and works again once ZooKeeper answers."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from tidegate.core.cluster.zookeeper import ClusterSession, ZooKeeper, ZooKeeperError

from tests.cluster.local import until
from tests.cluster.zk import ZooKeeperServer

#: More than asyncio's default pool has threads on any machine (at most 32).
THREADS_OF_ANY_POOL = 40


async def test_a_call_while_kazoo_reconnects_fails_in_bounded_time_then_works(
    zookeeper: ZooKeeperServer,
) -> None:
    zk = ZooKeeper(zookeeper.hosts, timeout_s=2.0, session_timeout_s=2.0)
    await zk.start()
    await zk.create("/thaw", b"v")
    assert zookeeper.proc is not None
    os.kill(zookeeper.proc.pid, signal.SIGSTOP)  # no answers: kazoo drops the connection
    try:
        await until(lambda: not zk.connected, 15)
        started = time.monotonic()
        # Before the fix this hung for good (the test timed out here).
        with pytest.raises(ZooKeeperError, match="reconnecting"):
            await asyncio.wait_for(zk.start(), 10)
        assert time.monotonic() - started < 5
    finally:
        os.kill(zookeeper.proc.pid, signal.SIGCONT)
    try:
        # kazoo reconnects by itself (a new session if the old one expired).
        for _ in range(100):
            try:
                await asyncio.wait_for(zk.start(), 10)
                data, _ = await asyncio.wait_for(zk.get("/thaw"), 10)
                break
            except ZooKeeperError:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("ZooKeeper calls did not work again after the thaw")
        assert data == b"v"
    finally:
        await asyncio.wait_for(zk.stop(), 20)


async def test_reconnects_soon_after_a_long_outage(zookeeper: ZooKeeperServer) -> None:
    """kazoo's own backoff doubles up to an hour between attempts: 40 s without ZooKeeper
    left the next attempt 10-30 s after it was back. Capped, it comes within seconds."""
    zk = ZooKeeper(zookeeper.hosts, timeout_s=2.0, session_timeout_s=20.0)
    await zk.start()
    try:
        zookeeper.close()
        await until(lambda: not zk.connected, 15)
        await asyncio.sleep(40)
        zookeeper.start()  # the same port and data: the session may even survive
        back = time.monotonic()
        await until(lambda: zk.connected, 30)
        assert time.monotonic() - back < 8, f"reconnected {time.monotonic() - back:.1f} s after"
    finally:
        await asyncio.wait_for(zk.stop(), 20)


async def test_calls_waiting_on_zookeeper_leave_the_storage_threads_free(
    zookeeper: ZooKeeperServer,
) -> None:
    """A kazoo call made while ZooKeeper is away waits until it is back. Such calls ran in
    the event loop's shared thread pool, where the storage's file I/O also runs: enough
    of them (a node's membership, map and plog reads during an outage) left no thread
    for Tier-2 reads and writes until ZooKeeper answered again."""
    tier1 = ZooKeeper(zookeeper.hosts, timeout_s=30.0, session_timeout_s=30.0)
    session = ClusterSession(zookeeper.hosts, 1, session_timeout_s=30.0)
    await tier1.start()
    await session.start()
    await tier1.create("/outage", b"v")
    assert zookeeper.proc is not None
    os.kill(zookeeper.proc.pid, signal.SIGSTOP)
    waiting: list[asyncio.Future[object]] = []
    try:
        for _ in range(THREADS_OF_ANY_POOL):
            waiting.append(asyncio.ensure_future(tier1.get("/outage")))
            waiting.append(asyncio.ensure_future(session.read_map()))
        await asyncio.sleep(0.5)
        assert not any(w.done() for w in waiting), "ZooKeeper answered while frozen"
        # What Tier-2 and the plog store do: a blocking file call in the loop's pool.
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "read"), 5) == "read"
    finally:
        os.kill(zookeeper.proc.pid, signal.SIGCONT)
    await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 60)
    await asyncio.wait_for(session.close(), 20)
    await asyncio.wait_for(tier1.stop(), 20)
