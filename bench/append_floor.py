"""The least CPU an append can cost when many coroutines each await their own, in asyncio.

Issue 2's target, 1 KB appends at 0.75× the disk's 1 MiB-``fdatasync`` bandwidth from
many concurrent writers, means ~370,000 appends/s on a ~500 MB/s disk: at most ~2.7 µs of
CPU per append for all of the work. This measures what the event loop alone takes, with
no work at all: ``--writers`` coroutines each await a future of their own, and one
callback per loop turn completes every pending one (the group commit a durable log does).

``python -m bench.append_floor [--writers N] [--appends-per-writer N]``; last line
``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time


async def floor(writers: int, per_writer: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    pending: list[asyncio.Future[None]] = []
    scheduled = False

    def complete() -> None:
        nonlocal pending, scheduled
        batch, pending = pending, []
        scheduled = False
        for fut in batch:
            fut.set_result(None)

    def append() -> asyncio.Future[None]:
        nonlocal scheduled
        fut = loop.create_future()
        pending.append(fut)
        if not scheduled:
            scheduled = True
            loop.call_soon(complete)
        return fut

    async def writer() -> None:
        for _ in range(per_writer):
            await append()

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(writers)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    n = writers * per_writer
    return {"appends": n, "cpu_us_per_append": cpu / n * 1e6, "appends_per_s": n / wall}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, default=256)
    ap.add_argument("--appends-per-writer", type=int, default=2000)
    args = ap.parse_args(argv)
    result = asyncio.run(floor(args.writers, args.appends_per_writer))
    print(
        f"{result['cpu_us_per_append']:.2f} µs of CPU per append, "
        f"{result['appends_per_s']:,.0f} appends/s, with no work at all"
    )
    print("RESULT " + json.dumps(result, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
