"""Throughput and latency of ``StreamSegmentStore`` appends, and recovery replay speed.

For each append size (100 B, 1 KB, 64 KB) and segment count (1, 16, 1000),
``--writers`` coroutines append concurrently (each awaits its own append; writer ``w``
uses segment ``w % segments``, 1000 segments get one writer each at least) into a fresh
store with the default configuration (real file Tier-1 log, filesystem Tier-2, storage
writer running). The disk's own bandwidth (1 MiB write + fdatasync,
``bench.baselines``) is measured in the same run and directory; every case reports its
ratio to it. Recovery: a store is filled through the durable log with the storage writer
held back (so everything stays in Tier-1), closed, and reopened; replay MB/s is Tier-1
bytes over the time ``start()`` takes, for 1 KB and 64 KB appends.

``python -m bench.segmentstore [--dir DIR] [--writers N] [--scale F]``; last line
``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.service import StreamSegmentStore

from bench.baselines import MIB, disk_fdatasync_bandwidth

SIZES = (100, 1024, 65536)
SEGMENTS = (1, 16, 1000)
#: Bytes appended per case, by append size (before ``--scale``).
VOLUME = {100: 6 * MIB, 1024: 48 * MIB, 65536: 256 * MIB}


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    k = min(len(sorted_values) - 1, max(0, round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


async def append_case(
    root: Path, size: int, segments: int, writers: int, volume: int
) -> dict[str, Any]:
    d = Path(tempfile.mkdtemp(prefix="ss-bench-", dir=root))
    store = StreamSegmentStore(d, SegmentStoreConfig())
    await store.start()
    try:
        names = [f"bench/seg-{i}" for i in range(segments)]
        await asyncio.gather(*(store.create_segment(n) for n in names))
        n_writers = max(writers, segments) if segments <= 1000 else writers
        total = max(n_writers, volume // size)
        per = total // n_writers
        payload = b"\xab" * size
        latencies: list[float] = []
        clock = time.perf_counter

        async def writer(w: int) -> None:
            name = names[w % segments]
            lat = latencies.append
            for _ in range(per):
                t = clock()
                await store.append(name, payload)
                lat(clock() - t)

        t0 = clock()
        cpu0 = time.process_time()
        await asyncio.gather(*(writer(w) for w in range(n_writers)))
        elapsed = clock() - t0
        cpu = time.process_time() - cpu0
    finally:
        await store.close()
        shutil.rmtree(d, ignore_errors=True)
    count = per * n_writers
    latencies.sort()
    return {
        "size": size,
        "segments": segments,
        "writers": n_writers,
        "appends": count,
        "mb_per_s": count * size / elapsed / 1e6,
        "appends_per_s": count / elapsed,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        # Process CPU (all threads) per append: a figure that other load on the machine
        # distorts less than wall-clock rates.
        "cpu_us_per_append": cpu / count * 1e6,
    }


async def replay_case(root: Path, size: int, volume: int, writers: int) -> dict[str, Any]:
    d = Path(tempfile.mkdtemp(prefix="ss-replay-", dir=root))
    held = SegmentStoreConfig(
        container_count=4,
        flush_bytes=1 << 40,
        flush_interval_ms=3_600_000,
        flush_trickle_bytes=0,  # nothing goes to Tier-2 before the restart
        checkpoint_interval_bytes=1 << 40,
        checkpoint_interval_ops=1 << 40,
        tier1_file_bytes_max=256 * MIB,
        writer_lag_bytes_max=1 << 40,
        cache_bytes_max=1 << 40,  # no cache pressure: nothing may be flushed early
    )
    try:
        store = StreamSegmentStore(d, held)
        await store.start()
        names = [f"replay/seg-{i}" for i in range(16)]
        for n in names:
            await store.create_segment(n)
        per = max(1, volume // size // writers)
        payload = b"\xcd" * size

        async def writer(w: int) -> None:
            for _ in range(per):
                await store.append(names[w % 16], payload)

        await asyncio.gather(*(writer(w) for w in range(writers)))
        await store.close()
        tier1 = sum(p.stat().st_size for p in (d / "tier1").rglob("*.log"))
        store = StreamSegmentStore(d, held)
        t0 = time.perf_counter()
        await store.start()
        elapsed = time.perf_counter() - t0
        info = await store.get_info(names[0])
        assert info.length == per * size * len(range(0, writers, 16)), info
        assert info.storage_length == 0  # everything was replayed from Tier-1
        await store.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return {
        "size": size,
        "tier1_bytes": tier1,
        "seconds": elapsed,
        "replay_mb_per_s": tier1 / elapsed / 1e6,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(args.dir) if args.dir else Path(tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    disk = disk_fdatasync_bandwidth(root, int(args.disk_mb * MIB)) / 1e6
    print(f"disk 1 MiB fdatasync bandwidth: {disk:.1f} MB/s")
    cases = []
    print(
        f"{'size':>6} {'segs':>5} {'writers':>7} {'MB/s':>8} {'appends/s':>10} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'ratio':>6} {'cpu us':>7}"
    )
    for size in SIZES:
        for segments in SEGMENTS:
            c = await append_case(root, size, segments, args.writers, int(VOLUME[size] * args.scale))
            c["ratio_to_disk"] = c["mb_per_s"] / disk
            cases.append(c)
            print(
                f"{size:>6} {segments:>5} {c['writers']:>7} {c['mb_per_s']:>8.1f} "
                f"{c['appends_per_s']:>10.0f} {c['p50_ms']:>8.2f} {c['p99_ms']:>8.2f} "
                f"{c['ratio_to_disk']:>6.2f} {c['cpu_us_per_append']:>7.1f}"
            )
    replays = []
    for size in (1024, 65536):
        replay = await replay_case(root, size, int(128 * MIB * args.scale), args.writers)
        replays.append(replay)
        print(
            f"recovery replay of {size} B appends: {replay['tier1_bytes'] / 1e6:.1f} MB of "
            f"Tier-1 in {replay['seconds']:.2f} s = {replay['replay_mb_per_s']:.1f} MB/s"
        )
    one_kb = [c for c in cases if c["size"] == 1024]
    return {
        "disk_fdatasync_mb_per_s": disk,
        "cases": cases,
        "best_1kb_ratio_to_disk": max(c["ratio_to_disk"] for c in one_kb),
        "target_1kb_ratio": 0.75,
        "replay_1kb_mb_per_s": replays[0]["replay_mb_per_s"],
        "replay_64kb_mb_per_s": replays[1]["replay_mb_per_s"],
        "target_replay_mb_per_s": 300,
        "replays": replays,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", help="directory on the disk under test (default: system temp)")
    ap.add_argument("--writers", type=int, default=256)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every volume")
    ap.add_argument("--disk-mb", type=float, default=128)
    args = ap.parse_args()
    result = asyncio.run(main_async(args))
    print("RESULT " + json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
