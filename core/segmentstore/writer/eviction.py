"""Inactive segments: every ``segment_evict_interval_ms`` the storage writer moves
segments that are wholly in Tier-2 and idle (or least recently used, past
``active_segments_max``) out of memory into the container's store of inactive segments
(``metastore.py``). The part of the writer that chooses them and lets them go.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.metadata import SegmentMeta, encode_segment
from tidegate.core.segmentstore.operations import Operation
from tidegate.core.segmentstore.writer.source import WriterDataSource
from tidegate.tier2.api import SegmentInfo

#: Segments one event-loop step looks at while choosing which leave memory: a container
#: may hold tens of thousands, and one pass over all of them held up every produce.
SEGMENTS_PER_STEP = 1024


class SegmentEviction:
    """Mixed into ``StorageWriter``, whose state it reads: the queued operations, the
    aggregators and the known Tier-2 state."""

    c: WriterDataSource
    config: SegmentStoreConfig
    clock: Callable[[], float]
    evicted: int
    _ops: deque[Operation]
    _aggs: dict[int, Any]
    _t2: dict[str, SegmentInfo | None]
    _next_evict: float
    _store_call: Callable[..., Awaitable[Any]]

    def _can_leave(self, m: SegmentMeta, busy: set[int]) -> bool:
        """Whether ``m`` can leave memory now: a stream segment (tables stay), created,
        not deleted or merged, no operation of it queued or unprocessed here, all of it
        in Tier-2 (with its seal and truncation), no tail reader waiting on it, nothing
        of it only in Tier-1."""
        if (
            m.is_table
            or not m.created
            or m.deleted
            or m.p_deleted
            or m.tier2_stale
            or m.merged_into is not None
            or m.p_ops
            or m.id in busy
            or m.id in self._aggs
            or m.storage_length < m.length
            or m.p_length != m.length
            or m.p_start != m.start_offset
            or m.p_sealed != m.sealed
            or m.p_attributes != m.attributes
        ):
            return False
        idx = self.c.read_index.segments.get(m.id)
        return idx is None or not (idx.waiters or idx.merges or idx.spilled)

    async def _evict_inactive(self) -> None:
        """Make segments inactive: those idle for ``segment_idle_ms``, and the least
        recently used past ``active_segments_max``. Their records are written (synced)
        first; one used while that write was under way stays in memory."""
        c = self.c
        inactive = c.inactive
        now = self.clock()
        if inactive is None or now < self._next_evict:
            return
        cfg = self.config
        self._next_evict = now + cfg.segment_evict_interval_ms / 1000
        md = c.md
        over = len(md.by_name) - cfg.active_segments_max
        if cfg.segment_idle_ms <= 0 and over <= 0:
            return
        idle_before = int(c.wall_clock() * 1000) - cfg.segment_idle_ms
        busy = {op.segment_id for op in self._ops}
        candidates: list[SegmentMeta] = []
        for n, m in enumerate(list(md.by_name.values())):
            if n % SEGMENTS_PER_STEP == SEGMENTS_PER_STEP - 1:
                await asyncio.sleep(0)  # what changes meanwhile is checked again below
            if md.by_name.get(m.name) is m and self._can_leave(m, busy):
                candidates.append(m)
        candidates.sort(key=last_used)
        chosen: list[SegmentMeta] = []
        for i, m in enumerate(candidates):
            if i < over or (cfg.segment_idle_ms > 0 and last_used(m) <= idle_before):
                chosen.append(m)
            else:
                break
        if not chosen:
            return
        records: dict[str, bytes] = {}
        for n, m in enumerate(chosen):
            if n % SEGMENTS_PER_STEP == SEGMENTS_PER_STEP - 1:
                await asyncio.sleep(0)  # one used meanwhile fails the check below
            records[m.name] = encode_segment(m)
        await self._store_call(inactive.put_many, records)
        for n, m in enumerate(chosen):
            if n % SEGMENTS_PER_STEP == 0:
                if n:
                    await asyncio.sleep(0)
                busy = {op.segment_id for op in self._ops}  # as of this step
            if (
                md.by_name.get(m.name) is not m
                or not self._can_leave(m, busy)
                or encode_segment(m) != records[m.name]
            ):
                continue  # used meanwhile: it stays; its record is ignored while it does
            del md.by_name[m.name]
            del md.by_id[m.id]
            c.read_index.remove(m)
            self._t2.pop(m.name, None)
            c.traffic.forget(m.name)
            self.evicted += 1


def last_used(m: SegmentMeta) -> int:
    return max(m.last_modified_ms, m.last_read_ms)
