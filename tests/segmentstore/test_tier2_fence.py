"""The Tier-2 fence (``core/segmentstore/fence.py``) and the per-epoch store of inactive
segments (``metastore.for_epoch``): what a stale container owner can no longer do."""

from __future__ import annotations

from pathlib import Path

import pytest
from tidegate.core.segmentstore.fence import FencedStorage, Tier2Fence
from tidegate.core.segmentstore.metastore import InactiveSegments, for_epoch
from tidegate.tier2.api import StorageFencedError
from tidegate.tier2.filesystem import FileSystemStorage


def test_a_claimed_epoch_fences_the_older_owner(tmp_path: Path) -> None:
    tier2 = FileSystemStorage(tmp_path / "tier2")
    fence_path = tmp_path / "tier2" / ".fence" / "container-0"
    old, new = Tier2Fence(fence_path), Tier2Fence(fence_path)
    stale = FencedStorage(tier2, old)
    with pytest.raises(StorageFencedError):
        stale.create("s")  # nothing claimed yet: no write
    old.claim(3)
    stale.create("s")
    stale.write("s", 0, b"abc")
    new.claim(4)
    with pytest.raises(StorageFencedError):
        stale.write("s", 3, b"def")
    with pytest.raises(StorageFencedError):
        stale.seal("s")
    assert tier2.get_info("s").length == 3 and not tier2.get_info("s").sealed
    assert stale.read("s", 0, 3) == b"abc"  # reads are not fenced
    FencedStorage(tier2, new).write("s", 3, b"def")
    with pytest.raises(StorageFencedError):
        Tier2Fence(fence_path).claim(2)  # an owner older than the fence's epoch
    assert list(tier2.list_segments()) == ["s"]  # the fence files are no segment


def test_inactive_segments_move_to_the_new_epoch_past_a_held_database(tmp_path: Path) -> None:
    base = tmp_path / "metadata" / "container-1"
    legacy = InactiveSegments(base)  # the one-database layout, still open (its lock held)
    legacy.put_many({"a": b"\x01" * 8})
    first = for_epoch(base, 2)
    assert first.names() == ["a"]
    first.put_many({"b": b"\x02" * 8})  # first stays open: a frozen owner
    second = for_epoch(base, 5)
    assert sorted(second.names()) == ["a", "b"]
    assert [p.name for p in base.parent.iterdir()] == ["container-1.epoch-5"]
    for db in (legacy, first, second):
        db.close()
