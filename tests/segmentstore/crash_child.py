"""Child process of the crash test: recover a store, then append until killed.

Usage: ``python crash_child.py DATA_DIR SEED``. Prints (flushed line by line)::

    READY <container>:<epoch>:<seq> ...      after recovery
    ACK <segment> <offset> <length> <crc32c> <container> <committed seq>
    TACK <key> <value> <version>             an acknowledged table put
    TRUNC <segment> <offset>                 an acknowledged truncation

Cold segments are written rarely, so they leave memory (inactive) and come back. Now
and then a writer fills a transaction segment and merges it into its segment (the
merged bytes are acknowledged as one ACK at the offset ``merge`` returned), or truncates
its segment at the start of its own last acknowledged record.

Each append is a self-describing record: u32 magic, u32 length, u64 counter, then
random bytes, so a reader can tell whole records from a torn one.
"""

from __future__ import annotations

import asyncio
import random
import struct
import sys
from pathlib import Path

import crc32c
from tidegate.core.segmentstore.api import BadOffsetError, TableUpdate
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.service import StreamSegmentStore

MAGIC = 0x7E1DE5A1
HEAD = struct.Struct("<IIQ")
#: Written all the time, and now and then (idle in between: they leave memory and come
#: back, see ``metastore.py``).
HOT = [f"crash-{i}" for i in range(6)]
COLD = [f"cold-{i}" for i in range(4)]
SEGMENTS = HOT + COLD
CONFIG = SegmentStoreConfig(
    container_count=3,
    frame_bytes_max=64 * 1024,
    tier1_file_bytes_max=256 * 1024,
    checkpoint_interval_bytes=384 * 1024,
    flush_bytes=96 * 1024,
    flush_interval_ms=30,
    # Between flushes bytes trickle into Tier-2 unsynced: kills land among those too.
    flush_trickle_bytes=16 * 1024,
    flush_trickle_interval_ms=5,
    cache_bytes_max=2 * 1024 * 1024,
    segment_idle_ms=40,
    segment_evict_interval_ms=10,
)


def record(rng: random.Random, counter: int) -> bytes:
    size = rng.choice([rng.randint(1, 200), rng.randint(200, 5000), rng.randint(5000, 150_000)])
    return HEAD.pack(MAGIC, HEAD.size + size, counter) + rng.randbytes(size)


async def main(data_dir: Path, seed: int) -> None:
    store = StreamSegmentStore(data_dir, CONFIG)
    await store.start()
    for name in SEGMENTS:
        try:
            await store.create_segment(name)
        except Exception:
            pass
    try:
        await store.create_table("crash-table")
    except Exception:
        pass
    ready = " ".join(f"{cid}:{c.epoch}:{c.committed_seq}" for cid, c in store.containers.items())
    print("READY", ready, flush=True)
    out = sys.stdout

    async def writer(w: int) -> None:
        rng = random.Random(seed * 1000 + w)
        counter = seed * 1_000_000 + w * 100_000
        last: dict[str, int] = {}
        while True:
            counter += 1
            name = rng.choice(COLD) if rng.random() < 0.04 else rng.choice(HOT)
            c = store.container_for(name)
            dice = rng.random()
            if dice < 0.03:
                txn = f"{name}#transaction.{counter}"
                await store.create_segment(txn)
                parts = [record(rng, counter * 10 + k) for k in range(rng.randint(1, 3))]
                for part in parts:
                    await store.append(txn, part)
                data = b"".join(parts)
                offset = await store.merge(name, txn)
            elif dice < 0.04 and name in last:
                try:
                    await store.truncate(name, last[name])
                except BadOffsetError:
                    continue  # another writer truncated further already
                out.write(f"TRUNC {name} {last[name]}\n")
                out.flush()
                continue
            else:
                data = record(rng, counter)
                offset = await store.append(name, data)
            last[name] = offset
            out.write(f"ACK {name} {offset} {len(data)} {crc32c.crc32c(data)} {c.id} {c.committed_seq}\n")
            out.flush()
            if rng.random() < 0.2:
                key = b"w%d" % w
                (version,) = await store.table_put("crash-table", [TableUpdate(key, b"%d" % counter)])
                out.write(f"TACK {key.decode()} {counter} {version}\n")
                out.flush()

    await asyncio.gather(*(writer(w) for w in range(8)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
