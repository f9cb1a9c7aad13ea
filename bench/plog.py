"""Replicated Tier-1 (three plog servers on this machine) against the file log, in one run.

Starts a standalone ZooKeeper and three ``tidegate plog-server`` processes (the test
helpers in ``tests/cluster.py``), then for each log and entry size: throughput with
``--appenders`` coroutines appending in a loop until ``--total-mb`` is written, and
latency of one append at a time (``--latency-appends`` of them, p50/p99/max). Last
line: ``RESULT {json}``.

``python -m bench.plog [--dir DIR] [--total-mb N] [--appenders N] [--sizes 1024,65536]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidegate.core.cluster.zookeeper import ZooKeeper
from tidegate.core.segmentstore.tier1.api import DurableDataLog
from tidegate.core.segmentstore.tier1.filelog import FileDurableDataLog
from tidegate.core.segmentstore.tier1.replicated.cluster import ZooKeeperPlogCoordinator
from tidegate.core.segmentstore.tier1.replicated.log import ReplicatedDurableDataLog

from bench.baselines import MIB
from tests.cluster.plog import PlogCluster, ZooKeeperServer


async def measure(make: Callable[[], DurableDataLog], entry_bytes: int, total_bytes: int,
                  appenders: int, latency_appends: int) -> dict[str, Any]:
    log = make()
    await log.open()
    payload = os.urandom(entry_bytes)
    count = max(1, total_bytes // entry_bytes)
    per = -(-count // appenders)

    async def appender(n: int) -> None:
        for _ in range(n):
            await log.append(payload)

    t0 = time.perf_counter()
    await asyncio.gather(*(appender(min(per, count - i * per)) for i in range(appenders) if count > i * per))
    elapsed = time.perf_counter() - t0
    lat = []
    for _ in range(latency_appends):
        t = time.perf_counter()
        await log.append(payload)
        lat.append((time.perf_counter() - t) * 1000)
    await log.close()
    lat.sort()
    return {
        "entry_bytes": entry_bytes,
        "mb_per_s": round(count * entry_bytes / elapsed / 1e6, 1),
        "entries_per_s": round(count / elapsed),
        "latency_ms_p50": round(statistics.median(lat), 2),
        "latency_ms_p99": round(lat[int(len(lat) * 0.99) - 1], 2),
        "latency_ms_max": round(lat[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--total-mb", type=float, default=64)
    parser.add_argument("--appenders", type=int, default=256)
    parser.add_argument("--latency-appends", type=int, default=1000)
    parser.add_argument("--sizes", default="1024,65536")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-plog-", dir=args.dir))
    zk = ZooKeeperServer(work / "zookeeper")
    zk.start()
    cluster = PlogCluster(work, 3, zk, "/bench")
    results: list[dict[str, Any]] = []
    try:
        cluster.start()
        for size in (int(s) for s in args.sizes.split(",")):
            for kind in ("file", "replicated"):
                client = ZooKeeper(zk.hosts)

                def make(kind: str = kind, client: ZooKeeper = client) -> DurableDataLog:
                    if kind == "file":
                        return FileDurableDataLog(work / f"file-{uuid.uuid4().hex[:6]}")
                    return ReplicatedDurableDataLog(
                        f"bench-{uuid.uuid4().hex[:6]}", ZooKeeperPlogCoordinator(client, "/bench")
                    )

                r = asyncio.run(measure(make, size, int(args.total_mb * MIB), args.appenders,
                                        args.latency_appends))
                client.stop_blocking()
                r["log"] = kind
                results.append(r)
                print(
                    f"{kind:>10} {size:>7} B: {r['mb_per_s']:7.1f} MB/s {r['entries_per_s']:>7} entries/s; "
                    f"one at a time p50 {r['latency_ms_p50']} ms p99 {r['latency_ms_p99']} ms "
                    f"max {r['latency_ms_max']} ms",
                    flush=True,
                )
    finally:
        cluster.stop()
        zk.close()
        shutil.rmtree(work, ignore_errors=True)
    print("RESULT " + json.dumps({"cpus": os.cpu_count(), "results": results}))


if __name__ == "__main__":
    main()
