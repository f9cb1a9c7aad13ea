"""A container that moves to another node and back, both nodes sharing Tier-2: the node
it returns to reads its segments' Tier-2 lengths afresh (a length it cached while it
last owned the container is behind what the other node wrote since; trusted, it failed
the storage writer and lost the reads of what Tier-2 alone held)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tidegate.core.segmentstore.service import StreamSegmentStore, container_of
from tidegate.tier2.filesystem import FileSystemStorage

from tests.segmentstore.helpers import SMALL, Backings, read_all


async def test_a_container_back_on_a_node_reads_tier2_afresh(tmp_path: Path) -> None:
    b = Backings()
    shared = tmp_path / "tier2"
    cid = 0
    name = next(n for n in (f"s{i}" for i in range(50)) if container_of(n, SMALL.container_count) == cid)

    def node(label: str) -> StreamSegmentStore:
        config = replace(SMALL, owned_containers=frozenset())
        return StreamSegmentStore(
            tmp_path / label, config, tier1_factory=b.log, tier2=FileSystemStorage(shared)
        )

    a, other = node("a"), node("b")
    written = b""
    try:
        await a.start()
        await a.start_container(cid)
        await a.create_segment(name)
        for i in range(3):
            chunk = bytes([65 + i]) * 5000
            await a.append(name, chunk)
            written += chunk
        await a.flush_to_storage()  # a caches the segment's Tier-2 length
        await a.stop_container(cid)

        await other.start()
        await other.start_container(cid)
        for i in range(3):
            chunk = bytes([75 + i]) * 5000
            await other.append(name, chunk)
            written += chunk
        await other.flush_to_storage()  # Tier-2 grows; Tier-1 is truncated behind it
        await other.flush_to_storage()
        await other.stop_container(cid)

        await a.start_container(cid)
        chunk = b"Z" * 5000
        await a.append(name, chunk)
        written += chunk
        await a.flush_to_storage()
        assert a.containers[cid].writer.error is None, a.containers[cid].writer.error
        assert await read_all(a, name) == written
        assert FileSystemStorage(shared).read(name, 0, len(written)) == written
    finally:
        await a.close()
        await other.close()
