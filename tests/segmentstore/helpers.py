"""Building ``StreamSegmentStore``s over in-memory Tier-1/Tier-2 that survive restarts."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.service import StreamSegmentStore
from tidegate.core.segmentstore.tier1.api import DurableDataLog
from tidegate.core.segmentstore.tier1.inmemory import InMemoryDurableDataLog, InMemoryLogBacking
from tidegate.tier2.api import Storage
from tidegate.tier2.inmemory import InMemoryStorage

SMALL = SegmentStoreConfig(
    container_count=2,
    frame_bytes_max=4096,
    flush_bytes=8192,
    flush_interval_ms=50,
    checkpoint_interval_bytes=32 * 1024,
    table_compact_bytes_min=2048,
)


@dataclass
class Backings:
    """What survives a "crash": Tier-1 backings per container and the Tier-2 store."""

    tier1: dict[int, InMemoryLogBacking] = field(default_factory=dict)
    tier2: Storage = field(default_factory=InMemoryStorage)
    logs: dict[int, DurableDataLog] = field(default_factory=dict)

    def log(self, cid: int) -> DurableDataLog:
        backing = self.tier1.setdefault(cid, InMemoryLogBacking())
        log = self.logs[cid] = InMemoryDurableDataLog(backing)
        return log

    def store(self, tmp: Path, config: SegmentStoreConfig = SMALL, **changes: object) -> StreamSegmentStore:
        cfg = replace(config, **changes) if changes else config  # type: ignore[arg-type]
        return StreamSegmentStore(tmp, cfg, tier1_factory=self.log, tier2=self.tier2)


async def read_all(s: StreamSegmentStore, name: str) -> bytes:
    """Every byte of the segment from its start offset."""
    info = await s.get_info(name)
    r = await s.read(name, info.start_offset, info.length - info.start_offset)
    return b"".join(bytes(c) for c in r.chunks)
