"""Container recovery, as the seed's "Container Startup" describes it.

1. Open the Tier-1 log (it fences earlier owners and bumps the epoch; a torn last entry
   is cut there), a fresh ``Tier1Index`` for this epoch, and the store of inactive
   segments (``metastore.py``; a MAP operation in the log installs one that was
   brought back, so replay never reads that store).
2. Read every data frame from the first kept one; decode the operations. If the first
   is a metadata checkpoint (Tier-1 was truncated right before it), it restores the
   metadata; every later operation is applied as at commit: metadata, read index
   (its data stays in the frames it came from), and the storage writer's queue.
3. Reconcile with Tier-2: each segment's storage length is what Tier-2 holds (read
   afresh: ``forget_cached`` drops what this process cached while it last owned them).
4. Rebuild table indexes by reading each table segment from its start offset.
The caller then starts the durable log (a new session) and the storage writer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol

from tidegate.core.segmentstore.apply import Applier
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.durablelog.frames import read_operation_batches
from tidegate.core.segmentstore.fence import Tier2Fence
from tidegate.core.segmentstore.metadata import ContainerMetadata
from tidegate.core.segmentstore.metastore import InactiveSegments, for_epoch
from tidegate.core.segmentstore.operations import CheckpointOp, Operation, PlainAppend
from tidegate.core.segmentstore.placement import container_of
from tidegate.core.segmentstore.reading.index import ReadIndex
from tidegate.core.segmentstore.reading.tier1index import Tier1Index
from tidegate.core.segmentstore.tables import TableIndex
from tidegate.core.segmentstore.tier1.api import DurableDataLog
from tidegate.tier2.api import SegmentInfo, Storage, StorageError
from tidegate.tier2.api import SegmentNotFoundError as Tier2NotFound


class Recoverable(Protocol):
    """What recovery rebuilds and reads (``SegmentContainer``, not yet serving)."""

    #: Opened here when the container keeps inactive segments (``metadata_dir``).
    inactive: InactiveSegments | None

    @property
    def id(self) -> int: ...
    @property
    def config(self) -> SegmentStoreConfig: ...
    @property
    def log(self) -> DurableDataLog: ...
    @property
    def storage(self) -> Storage: ...
    @property
    def index_dir(self) -> Path: ...
    @property
    def metadata_dir(self) -> Path | None: ...
    @property
    def tier2_fence(self) -> Tier2Fence | None: ...
    @property
    def md(self) -> ContainerMetadata: ...
    @property
    def tables(self) -> dict[int, TableIndex]: ...
    @property
    def read_index(self) -> ReadIndex: ...
    @property
    def applier(self) -> Applier: ...


async def recover(c: Recoverable) -> None:
    await c.log.open()
    if c.tier2_fence is not None:  # before Tier-2 is read: no stale owner writes after
        await asyncio.to_thread(c.tier2_fence.claim, c.log.epoch)
    # This process may have owned the container before another node did: what it
    # remembers of the container's Tier-2 segments is read again.
    cid, count = c.id, c.config.container_count
    c.storage.forget_cached(lambda name: container_of(name, count) == cid)
    c.read_index.tier1 = Tier1Index(c.index_dir, c.log.epoch)
    if c.metadata_dir is not None:
        if c.tier2_fence is None:
            c.inactive = await asyncio.to_thread(InactiveSegments, c.metadata_dir)
        else:  # cluster mode: a database per owner's epoch, away from fenced owners
            c.inactive = await asyncio.to_thread(for_epoch, c.metadata_dir, c.log.epoch)
    first = True
    applier = c.applier
    applier.replay_deleted.clear()
    batch: list[Operation | PlainAppend] = []
    async for ops in read_operation_batches(c.log, prefetch_entries=16, plain_appends=True):
        ckpt = ops[0]
        if first and isinstance(ckpt, CheckpointOp):
            c.md.restore(ckpt.data)
            for meta in c.md.by_id.values():
                if meta.is_table:
                    c.tables[meta.id] = TableIndex()
        first = False
        batch += ops
        if len(batch) >= 1024:
            applier.replay(batch)
            batch = []
    applier.replay(batch)

    # Tier-2 lengths: segments still live, and merge sources not yet concatenated.
    for meta in list(c.md.by_id.values()):
        if meta.tier2_stale:
            continue
        try:
            info = await _get_info(c, meta.name)
        except Tier2NotFound:
            continue
        meta.storage_length = min(info.length, meta.length)
        c.read_index.get(meta).flushed_to(meta.storage_length)

    for meta in list(c.md.by_name.values()):
        if meta.is_table and not meta.deleted:
            table = c.tables[meta.id]
            idx = c.read_index.get(meta)
            pos = meta.start_offset
            while pos < meta.length:
                end = min(meta.length, pos + 16 * 1024 * 1024)
                chunks = await c.read_index.read(idx, pos, end)
                data = b"".join(chunks)
                consumed = _whole_entries(data)
                table.apply(memoryview(data)[:consumed], pos, queued=False)
                if consumed == 0:
                    end = meta.length
                    chunks = await c.read_index.read(idx, pos, end)
                    data = b"".join(chunks)
                    table.apply(data, pos, queued=False)
                    consumed = len(data)
                pos += consumed


async def _get_info(c: Recoverable, name: str) -> SegmentInfo:
    """Tier-2 ``get_info``, transient failures retried (a bounded number of times)."""
    for attempt in range(50):
        try:
            return await asyncio.to_thread(c.storage.get_info, name)
        except Tier2NotFound:
            raise
        except (StorageError, OSError):
            if attempt == 49:
                raise
            await asyncio.sleep(c.config.retry_delay_s(attempt))
    raise AssertionError("unreachable")


def _whole_entries(data: bytes) -> int:
    """Bytes of ``data`` that hold whole table entries (batches are never split in the
    segment, but a read window may cut one)."""
    from tidegate.core.segmentstore.tables import _ENTRY

    pos = 0
    n = len(data)
    while pos + _ENTRY.size <= n:
        _, klen, vlen, _ = _ENTRY.unpack_from(data, pos)
        nxt = pos + _ENTRY.size + klen + vlen
        if nxt > n:
            break
        pos = nxt
    return pos
