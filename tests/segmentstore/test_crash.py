"""Crash tests with real processes: ``kill -9`` a child that appends (with the real
file-based Tier-1 log and filesystem Tier-2), reopen, and check that every acknowledged
append is readable byte-exact, nothing unacknowledged is half-visible, and sequence
numbers, epochs and offsets never go backwards."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import crc32c
from tidegate.core.segmentstore.service import StreamSegmentStore

from tests.segmentstore.crash_child import CONFIG, HEAD, MAGIC, SEGMENTS

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("crash_child.py")
RUNS = 24


def run_child(data_dir: Path, seed: int, rng: random.Random) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(data_dir), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().decode()
    if not first.startswith("READY"):
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"child failed to start: {first!r} {err.decode()[-3000:]}")
    time.sleep(rng.uniform(0.05, 0.6))
    os.kill(proc.pid, signal.SIGKILL)
    out, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode()[-3000:]
    return [first.strip(), *out.decode().splitlines()]


async def test_kill9_many_times(tmp_path: Path) -> None:
    seed = int(os.environ.get("TIDEGATE_CRASH_SEED", "20261122"))  # vary to explore
    rng = random.Random(seed)
    acked: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)  # seg -> off -> (len, crc)
    table_acked: dict[str, int] = {}
    max_seq: dict[int, int] = defaultdict(int)
    max_epoch: dict[int, int] = defaultdict(int)
    max_len: dict[str, int] = defaultdict(int)
    max_start: dict[str, int] = defaultdict(int)
    total_acks = 0
    inactive_seen = 0
    started = time.monotonic()
    for run in range(RUNS):
        lines = run_child(tmp_path, seed % 1000 * 100 + run + 1, rng)
        for item in lines[0].split()[1:]:
            cid, epoch, seq = map(int, item.split(":"))
            assert epoch > max_epoch[cid], "epoch did not increase across a recovery"
            assert seq >= max_seq[cid], "sequence number went backwards"
            max_epoch[cid] = epoch
        for line in lines[1:]:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "ACK" and len(parts) == 7:
                name, off, n, crc, cid, seq = parts[1], *map(int, parts[2:])
                acked[name][off] = (n, crc)
                max_seq[cid] = max(max_seq[cid], seq)
                max_len[name] = max(max_len[name], off + n)
                total_acks += 1
            elif parts[0] == "TACK" and len(parts) == 4:
                table_acked[parts[1]] = max(table_acked.get(parts[1], 0), int(parts[2]))
            elif parts[0] == "TRUNC" and len(parts) == 3:
                max_start[parts[1]] = max(max_start[parts[1]], int(parts[2]))
        inactive_seen += await verify(tmp_path, acked, table_acked, max_seq, max_len, max_start)
    print(f"{total_acks} acknowledged appends over {RUNS} kill -9 runs")
    # Children made segments inactive (records found at recovery), and those came back.
    assert inactive_seen > 0
    assert total_acks > RUNS * 10, f"only {total_acks} acknowledged appends in {RUNS} runs"
    assert time.monotonic() - started < 120


async def verify(
    data_dir: Path,
    acked: dict[str, dict[int, tuple[int, int]]],
    table_acked: dict[str, int],
    max_seq: dict[int, int],
    max_len: dict[str, int],
    max_start: dict[str, int],
) -> int:
    """Check everything acknowledged; the number of inactive segment records found."""
    store = StreamSegmentStore(data_dir, CONFIG)
    await store.start()
    inactive = sum(
        len([n for n in c.inactive.names() if n not in c.md.by_name])
        for c in store.containers.values()
        if c.inactive is not None
    )
    try:
        for cid, c in store.containers.items():
            assert c.committed_seq >= max_seq[cid], (cid, c.committed_seq, max_seq[cid])
        for name in SEGMENTS:
            info = await store.get_info(name)
            assert info.length >= max_len[name], (name, info.length, max_len[name])
            start = info.start_offset
            assert start >= max_start[name], (name, start, max_start[name])
            r = await store.read(name, start, info.length - start)
            data = bytes(start) + b"".join(bytes(c) for c in r.chunks)
            assert len(data) == info.length
            # Whole records only, back to back: nothing half-visible. (A merge adds
            # whole records; truncations cut at record starts.)
            pos = start
            while pos < len(data):
                magic, size, _ = HEAD.unpack_from(data, pos)
                assert magic == MAGIC, f"{name}: garbage at {pos}"
                assert pos + size <= len(data), f"{name}: torn record at {pos}"
                pos += size
            for off, (n, crc) in acked[name].items():
                if off >= start:
                    assert crc32c.crc32c(data[off : off + n]) == crc, f"{name}@{off} lost"
        entries = {e.key.decode(): int(e.value) for e in await store.table_entries("crash-table")}
        for key, value in table_acked.items():
            assert entries.get(key, -1) >= value, (key, entries.get(key), value)
    finally:
        await store.close()
    return inactive
