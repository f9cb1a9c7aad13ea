"""The gateway's RocksDB offset index on its own: entry encoding and log-start cleanup."""

from __future__ import annotations

from pathlib import Path

from tidegate.gateway.log.offset_index import IndexEntry, OffsetIndex


def _entry(base: int, count: int = 10, position: int = 0, ts: int = 0) -> IndexEntry:
    return IndexEntry(base, base + count - 1, 7, position, 1000, ts)


def test_positions_past_4_gib_round_trip(tmp_path: Path) -> None:
    # A segment passes 2 GiB after ~2M records of 1 KB: positions are 64-bit.
    index = OffsetIndex(tmp_path / "index")
    big = _entry(5_000_000, position=(1 << 32) + 12345)
    write = index.batch()
    write.entry("t", 0, big)
    write.commit()
    assert index.floor("t", 0, 5_000_003) == big
    index.close()


def test_log_start_drops_entries_wholly_below_it(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "index")
    write = index.batch()
    for i in range(10):
        write.entry("t", 0, _entry(i * 10, ts=1000 + i))
        write.time_entry("t", 0, 1000 + i, i * 10)
        write.entry("t", 1, _entry(i * 10, ts=1000 + i))  # another partition: untouched
    write.commit()

    index.set_log_start("t", 0, 45)  # inside the batch at 40

    assert index.log_start("t", 0) == 45
    assert index.first("t", 0) == _entry(40, ts=1004)
    assert [e.base_offset for e in index.entries_from("t", 0, 0)] == [40, 50, 60, 70, 80, 90]
    assert index.offset_for_timestamp("t", 0, 0) == 40
    assert index.offset_for_timestamp("t", 0, 1007) == 70
    assert index.first("t", 1) == _entry(0, ts=1000)
    index.close()

    reopened = OffsetIndex(tmp_path / "index")
    assert reopened.first("t", 0) == _entry(40, ts=1004)
    assert reopened.log_start("t", 0) == 45
    reopened.close()
