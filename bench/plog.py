"""Replicated Tier-1 (three plog servers on this machine) against the file log, in one run.

Starts a standalone ZooKeeper and three ``tidegate plog-server`` processes (the test
helpers in ``tests/cluster.py``), then for each log and entry size: throughput with
``--appenders`` coroutines appending in a loop until ``--total-mb`` is written, and
latency of one append at a time (``--latency-appends`` of them, p50/p99/max). Last
line: ``RESULT {json}``.

``python -m bench.plog [--dir DIR] [--total-mb N] [--appenders N] [--sizes 1024,65536]``;
``--failover``: instead, the gap in acknowledgements when one of exactly three servers is
``kill -9``ed (``failover_gap``).
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


async def failover_gap(make: Callable[[], ReplicatedDurableDataLog], cluster: PlogCluster,
                       restart_after_s: float | None) -> dict[str, Any]:
    """``kill -9`` of a server in the active group under 32 appenders of 1 KiB: the
    longest time without an acknowledgement, and from the kill to the first one in a
    later plog. ``restart_after_s``: the server is started again after that long."""
    log = make()
    await log.open()
    acks: list[tuple[float, int]] = []
    stop = False

    async def appender() -> None:
        while not stop:
            addr = await log.append(b"x" * 1024)
            acks.append((time.perf_counter(), addr.file_id))

    tasks = [asyncio.ensure_future(appender()) for _ in range(32)]
    await asyncio.sleep(2)
    index = log._segs[-1].index
    victim = next(s for s in cluster.servers if s.server_id == log._segs[-1].servers[0])
    killed = time.perf_counter()
    victim.kill9()
    if restart_after_s is not None:
        await asyncio.sleep(restart_after_s)
        await asyncio.to_thread(victim.start)
    deadline = time.perf_counter() + 60
    while not any(f > index for _, f in acks) and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1)
    stop = True
    await asyncio.gather(*tasks)
    await log.close()
    if victim.proc is None:
        victim.start()
    times = [t for t, _ in acks]
    resumed = min(t for t, f in acks if f > index)
    return {
        "resumed_after_kill_ms": round((resumed - killed) * 1000),
        "longest_gap_ms": round(max(b - a for a, b in zip(times, times[1:], strict=False)) * 1000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--total-mb", type=float, default=64)
    parser.add_argument("--appenders", type=int, default=256)
    parser.add_argument("--latency-appends", type=int, default=1000)
    parser.add_argument("--sizes", default="1024,65536")
    parser.add_argument("--failover", action="store_true",
                        help="measure the failover gap with exactly three servers instead")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-plog-", dir=args.dir))
    zk = ZooKeeperServer(work / "zookeeper")
    zk.start()
    cluster = PlogCluster(work, 3, zk, "/bench")
    results: list[dict[str, Any]] = []
    try:
        cluster.start()
        if args.failover:
            for least, restart in ((2, None), (3, 2.0)):
                client = ZooKeeper(zk.hosts)

                def make_r(least: int = least, client: ZooKeeper = client) -> ReplicatedDurableDataLog:
                    return ReplicatedDurableDataLog(
                        f"bench-{uuid.uuid4().hex[:6]}", ZooKeeperPlogCoordinator(client, "/bench"),
                        min_replicas=least, timeout_ms=2000, failover_timeout_ms=60_000,
                    )

                r = asyncio.run(failover_gap(make_r, cluster, restart))
                client.stop_blocking()
                r.update(min_replicas=least, restarted_after_s=restart)
                results.append(r)
                print(f"min_replicas {least}, restart {restart}: {r}", flush=True)
        for size in (int(s) for s in args.sizes.split(",") if not args.failover):
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
