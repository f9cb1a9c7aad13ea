"""Reconciliation with Tier-2 after a crash: Tier-2 already holds the effects of
operations that Tier-1 still replays (the crash came after the writer applied them and
before Tier-1 was truncated). Replaying must not write twice, leave gaps, or redo a
concat, seal or delete."""

from __future__ import annotations

from pathlib import Path

import pytest
from tidegate.core.segmentstore.api import SegmentNotFoundError
from tidegate.core.segmentstore.service import container_of
from tidegate.tier2.api import SegmentNotFoundError as Tier2NotFound

from tests.segmentstore.helpers import SMALL, Backings


async def test_replay_over_tier2_that_is_ahead(tmp_path: Path) -> None:
    b = Backings()
    names = [n for n in (f"r{i}" for i in range(50)) if container_of(n, SMALL.container_count) == 0]
    target, source, sealed, gone = names[:4]
    s = b.store(tmp_path)
    await s.start()
    for n in (target, source, sealed, gone):
        await s.create_segment(n)
    await s.flush_to_storage()
    await s.append(target, b"T" * 3000)
    await s.append(source, b"S" * 2000)
    await s.append(sealed, b"X" * 100)
    await s.append(gone, b"G" * 10)
    merged_at = await s.merge(target, source)
    await s.seal(sealed)
    await s.delete_segment(gone)
    await s.append(target, b"U" * 500)
    await s.close()
    # Tier-1 as it is now: what a crash right after the writer's work below leaves.
    saved = {cid: list(backing.entries) for cid, backing in b.tier1.items()}
    # The writer applies everything to Tier-2 (a clean run), then Tier-1 "loses" its
    # truncation: put back the old entries plus everything written since.
    s = b.store(tmp_path)
    await s.start()
    await s.flush_to_storage()
    await s.close()
    tier2 = b.tier2
    assert tier2.get_info(target).length == 5500 and not tier2.exists(source)
    for cid, backing in b.tier1.items():
        backing.entries = saved[cid]
    s = b.store(tmp_path)
    await s.start()
    await s.flush_to_storage()
    assert merged_at == 3000
    info = tier2.get_info(target)
    assert info.length == 5500
    assert tier2.read(target, 0, 5500) == b"T" * 3000 + b"S" * 2000 + b"U" * 500
    assert tier2.get_info(sealed).sealed and not tier2.exists(gone)
    r = await s.read(target, 0, 10_000)
    assert b"".join(bytes(c) for c in r.chunks) == b"T" * 3000 + b"S" * 2000 + b"U" * 500
    await s.close()


@pytest.mark.parametrize("source_bytes", [0, 700])
async def test_replayed_merge_into_a_target_deleted_since(tmp_path: Path, source_bytes: int) -> None:
    """The log holds a merge and, later, the deletion of its target; Tier-2 has both
    applied (the writer got there, Tier-1 was not truncated yet). Replaying the merge
    must not bring either segment back into Tier-2 (it did: an empty target, then
    "Tier-2 length 0, merge at 32", and the container failed)."""
    b = Backings()
    names = [n for n in (f"m{i}" for i in range(50)) if container_of(n, SMALL.container_count) == 0]
    target, source = names[:2]
    s = b.store(tmp_path)
    await s.start()
    await s.create_segment(target)
    await s.append(target, b"T" * 32)
    await s.create_segment(source)
    if source_bytes:
        await s.append(source, b"S" * source_bytes)
    assert await s.merge(target, source) == 32
    await s.delete_segment(target)
    for c in s.containers.values():
        await c.writer.flush_all()  # Tier-2 sees it all; no new checkpoint: no truncation
    await s.close()
    for name in (target, source):
        with pytest.raises(Tier2NotFound):
            b.tier2.get_info(name)

    s = b.store(tmp_path)
    await s.start()  # replays the merge and the deletion
    for c in s.containers.values():
        await c.writer.flush_all()
        assert c.writer.error is None and c.failure is None
    for name in (target, source):
        with pytest.raises(SegmentNotFoundError):
            await s.get_info(name)
        with pytest.raises(Tier2NotFound):
            b.tier2.get_info(name)
    await s.create_segment(target)  # the name is free, and empty
    assert (await s.get_info(target)).length == 0
    await s.close()
