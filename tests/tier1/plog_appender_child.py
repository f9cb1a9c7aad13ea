"""Child process for the crash-between-seal-and-record test: appends forever to a
replicated log, printing ``i index position`` per acknowledgement; on its first
failover it exits (``os._exit``) right after sealing, before recording the seal.

``python -m tests.tier1.plog_appender_child ZK_HOSTS ROOT NAME``
"""

from __future__ import annotations

import asyncio
import os
import sys

from tidegate.core.cluster.zookeeper import ZooKeeper
from tidegate.core.segmentstore.tier1.replicated.cluster import ZooKeeperPlogCoordinator
from tidegate.core.segmentstore.tier1.replicated.log import ReplicatedDurableDataLog

from tests.tier1.plog_helpers import payload


async def crash() -> None:
    sys.stdout.write("sealed, exiting before the record\n")
    sys.stdout.flush()
    os._exit(7)


async def main(hosts: str, root: str, name: str) -> None:
    zk = ZooKeeper(hosts)
    log = ReplicatedDurableDataLog(
        name, ZooKeeperPlogCoordinator(zk, root), timeout_ms=1000,
        # No roll during the test: the active plog stays the record's last one.
        plog_bytes_max=256 << 20, before_seal_recorded=crash,
    )
    await log.open()
    sys.stdout.write(f"open {log.epoch}\n")
    sys.stdout.flush()
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        try:
            addr = await log.append(payload(i))
            sys.stdout.write(f"{i} {addr.file_id} {addr.position}\n")
            sys.stdout.flush()
        finally:
            sem.release()

    i = 0
    while True:
        await sem.acquire()
        asyncio.ensure_future(one(i))
        i += 1


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
