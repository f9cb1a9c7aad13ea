"""Re-replication of the replicated Tier-1 log (``tier1/replicated/repair.py``): plogs
made on a short group while a server was down, or left short when a server lost its
disk, are copied to a full group once servers are back, so that losing more disks later
loses nothing acknowledged (DESIGN invariant 8). Real plog server processes, ``kill -9``
and wiped data directories; a wiped server comes back under a new id, as a node's
embedded plog server does."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

from tidegate.core.segmentstore.tier1.replicated.log import ReplicatedDurableDataLog

from tests.cluster.plog import PlogCluster, PlogServerProcess
from tests.tier1.plog_helpers import Appender, check_read_back
from tests.tier1.test_replicated_failures import cluster, make, read_all, server  # noqa: F401

FACTOR = 3


def wipe(s: PlogServerProcess) -> None:
    s.kill9()
    shutil.rmtree(s.data_dir)


def replacement(servers: PlogCluster, tmp_path: Path, sid: str) -> PlogServerProcess:
    """A server on a fresh disk (its id is new: the old one's plogs are gone with it)."""
    s = PlogServerProcess(tmp_path / f"plog-{sid}", servers.zookeeper.hosts, sid, servers.root)
    servers.servers.append(s)  # stopped with the others
    s.start()
    return s


async def full_groups(log: ReplicatedDurableDataLog, alive: set[str], timeout_s: float) -> None:
    """Until every plog of the chain (sealed or active) is on ``FACTOR`` live servers."""
    deadline = time.monotonic() + timeout_s
    while True:
        plogs = log._chain.meta.plogs
        short = [(p.id, p.servers) for p in plogs if len(set(p.servers) & alive) < FACTOR]
        if not short and plogs:
            return
        assert time.monotonic() < deadline, f"plogs still short of {FACTOR} live servers: {short}"
        await asyncio.sleep(0.1)


async def test_two_wiped_disks_in_a_row_lose_nothing_acknowledged(
    make: Any, cluster: PlogCluster, tmp_path: Path  # noqa: F811
) -> None:
    server(cluster, "s3").stop()
    log = make(plog_bytes_max=256 << 10, min_replicas=2, failover_timeout_ms=60_000,
               repair_interval_ms=200)
    await log.open()
    app = Appender(log.append_future)
    await app.wait_acked(300, 30)

    # First disk: the log goes on on the two others; its new plogs are short.
    wipe(server(cluster, "s1"))
    await app.wait_acked(len(app.acked) + 600, 30)
    assert any(len(p.servers) == 2 for p in log._chain.meta.plogs)
    server(cluster, "s3").start()
    await full_groups(log, {"s0", "s2", "s3"}, 60)
    await app.wait_acked(len(app.acked) + 300, 30)

    # Second disk, then its replacement; a third loss leaves two of the servers that
    # ever held the first short plogs' copies.
    wipe(server(cluster, "s0"))
    await app.wait_acked(len(app.acked) + 600, 30)
    replacement(cluster, tmp_path, "s4")
    await full_groups(log, {"s2", "s3", "s4"}, 60)
    wipe(server(cluster, "s2"))
    await app.wait_acked(len(app.acked) + 300, 30)
    await app.stop()
    await log.close()
    assert not app.errors, app.errors[:3]
    assert log.repairs > 0

    check = make(min_replicas=2)
    await check.open()
    check_read_back(await read_all(check), app.acked)
    await check.close()
