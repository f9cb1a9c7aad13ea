"""Child process for the kill -9 test: appends forever, printing each acknowledgement.

``python -m tests.tier1.appender_child DIR [truncate]`` appends entry ``i``
(``payload(i)``) with up to 64 appends in flight, and prints ``i file_id position`` once
append ``i`` is acknowledged, flushing every line, until it is killed. With
``truncate``, each 200th acknowledgement also truncates the log before entry ``i - 300``
(so rolls reuse spare files) and prints ``spares B A``, the spare files before and after.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tidegate.core.segmentstore.tier1.api import LogAddress
from tidegate.core.segmentstore.tier1.fileformat import list_spares
from tidegate.core.segmentstore.tier1.filelog import FileDurableDataLog


def payload(i: int) -> bytes:
    size = (i * 7919) % 20000 + 1
    return (i.to_bytes(8, "big") * (size // 8 + 1))[:size]


async def main(directory: Path, truncate: bool) -> None:
    log = FileDurableDataLog(directory, file_bytes_max=1 << 20, in_flight_bytes_max=1 << 20)
    await log.open()
    sem = asyncio.Semaphore(64)
    out = sys.stdout

    addrs: dict[int, LogAddress] = {}

    async def one(i: int) -> None:
        addr = await log.append(payload(i))
        out.write(f"{i} {addr.file_id} {addr.position}\n")
        out.flush()
        if truncate:
            addrs[i] = addr
            if i % 200 == 0 and i - 300 in addrs:
                before = len(list_spares(directory))
                await log.truncate(addrs[i - 300])
                out.write(f"spares {before} {len(list_spares(directory))}\n")
                out.flush()
        sem.release()

    i = 0
    tasks = set()
    while True:
        await sem.acquire()
        t = asyncio.ensure_future(one(i))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
        i += 1


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2:] == ["truncate"]))
