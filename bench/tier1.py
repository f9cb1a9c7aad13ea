"""Throughput of the Tier-1 ``FileDurableDataLog`` against the disk's own limit.

For each entry size, ``--appenders`` coroutines append in a loop (each awaiting its own
append, so up to ``--appenders`` entries are in flight) until ``--total-mb`` is written;
the disk baseline (1 MiB write + fdatasync, ``bench.baselines``) is measured right before,
in the same directory. Last line: ``RESULT {json}`` with MB/s, entries/s, entries per
sync and the ratio to the baseline for every size.

``python -m bench.tier1 [--dir DIR] [--total-mb N] [--appenders N] [--sizes 1024,65536,...]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tidegate.core.segmentstore.tier1.filelog import FileDurableDataLog

from bench.baselines import MIB, disk_fdatasync_bandwidth


async def measure(
    directory: Path, entry_bytes: int, total_bytes: int, appenders: int
) -> dict[str, Any]:
    log = FileDurableDataLog(directory)
    await log.open()
    payload = os.urandom(entry_bytes)
    count = max(1, total_bytes // entry_bytes)
    per = -(-count // appenders)

    async def appender(n: int) -> None:
        for _ in range(n):
            await log.append(payload)

    t0 = time.perf_counter()
    await asyncio.gather(
        *(appender(min(per, count - i * per)) for i in range(appenders) if count > i * per)
    )
    elapsed = time.perf_counter() - t0
    await log.close()
    return {
        "entry_bytes": entry_bytes,
        "entries": count,
        "seconds": round(elapsed, 3),
        "mb_per_s": round(count * entry_bytes / elapsed / 1e6, 1),
        "entries_per_s": round(count / elapsed),
        "entries_per_sync": round(count / max(1, log.syncs), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--total-mb", type=float, default=256)
    parser.add_argument("--appenders", type=int, default=256)
    parser.add_argument("--sizes", default="1024,65536,1048576")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-tier1-", dir=args.dir))
    results = []
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            baseline = disk_fdatasync_bandwidth(work, int(args.total_mb * MIB))
            d = work / f"log-{size}"
            r = asyncio.run(measure(d, size, int(args.total_mb * MIB), args.appenders))
            shutil.rmtree(d, ignore_errors=True)
            r["disk_baseline_mb_per_s"] = round(baseline / 1e6, 1)
            r["ratio_to_disk"] = round(r["mb_per_s"] / (baseline / 1e6), 3)
            print(
                f"{size:>8} B entries: {r['mb_per_s']:8.1f} MB/s {r['entries_per_s']:>8} entries/s "
                f"{r['entries_per_sync']:>7} per sync; disk {r['disk_baseline_mb_per_s']} MB/s; "
                f"ratio {r['ratio_to_disk']}",
                flush=True,
            )
            results.append(r)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("RESULT " + json.dumps({"appenders": args.appenders, "results": results}))


if __name__ == "__main__":
    main()
