"""The machine baselines and the Tier-1 benchmark run and report sane numbers."""

from __future__ import annotations

from pathlib import Path

from bench.baselines import disk_fdatasync_bandwidth, loopback_tcp_bandwidth
from bench.tier1 import measure


def test_baselines_measure_something(tmp_path: Path) -> None:
    assert disk_fdatasync_bandwidth(tmp_path, 4 << 20) > 1e6
    assert list(tmp_path.iterdir()) == []
    assert loopback_tcp_bandwidth(16 << 20) > 1e6


async def test_tier1_bench_counts_entries_per_sync(tmp_path: Path) -> None:
    r = await measure(tmp_path / "log", 1024, 1 << 20, 64)
    assert r["entries"] == 1024
    assert r["entries_per_sync"] > 1
